package schema

import (
	"maps"
	"path"
	"slices"
	"strings"
)

// Source is the CUE schema of every object kind (package schema), as
// Scaffold vendors it to cue.mod.
func Source() []byte { return slices.Clone(schemaSource) }

// VetArgs are the arguments of the `cue vet` runs that check the YAML and
// JSON object files among files (repository-relative slash paths, joined to
// dir) against the schema written at schemaFile (Source): the baseline
// `fleetwave validate` is compared with. cue vet checks data files against
// one definition per run, so there is one run per object folder, split
// every perRun files (a command line has a size limit; 0: no split). The
// .cue object files have no package and cannot be vetted as data: they are
// left out, as is everything else no folder's kind covers.
func VetArgs(schemaFile, dir string, files []string, perRun int) [][]string {
	byFolder := map[string][]string{}
	for _, p := range files {
		folder, _, ok := strings.Cut(p, "/")
		if _, known := folders[folder]; !ok || !known || path.Ext(p) == ".cue" {
			continue
		}
		if _, ok := ObjectKeyForPath(p); !ok {
			continue
		}
		byFolder[folder] = append(byFolder[folder], path.Join(dir, p))
	}
	var runs [][]string
	for _, folder := range slices.Sorted(maps.Keys(byFolder)) {
		args := byFolder[folder]
		slices.Sort(args)
		for len(args) > 0 {
			n := len(args)
			if perRun > 0 {
				n = min(n, perRun)
			}
			runs = append(runs, append([]string{"vet", "-c", "-d", definitions[folders[folder]][0], schemaFile}, args[:n]...))
			args = args[n:]
		}
	}
	return runs
}
