package schema

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/fleetwave/fleetwave"
)

// scaffoldFS holds the files of a new config repository.
//
//go:embed all:scaffold
var scaffoldFS embed.FS

// VendoredSchemaPath is where Scaffold vendors the schema in a new config
// repository, so that `cue vet -c cue.mod/fleetwave/schema.cue -d '#Node'
// nodes/x.yaml` and CUE-aware editors work.
const VendoredSchemaPath = "cue.mod/fleetwave/schema.cue"

// scaffoldModule is the cue.mod/module.cue of a new config repository.
const scaffoldModule = `// The CUE module of this fleetwave config repository. The fleetwave schema is
// vendored in cue.mod/fleetwave/schema.cue (fleetwave init writes it).
module: "fleetwave.local/config@v0"
language: {
	version: "v0.17.0"
}
`

// Scaffold writes a new config repository into dir: fleetwave.cue,
// cue.mod/module.cue with the vendored schema, the system BRC
// brc/fleetwave-agent.cue keeping the fleetwave-agent block installed
// fleet-wide, blocks/fleetwave-agent.cue, blocks/example.cue,
// nodes/example-node.cue and README.md. dir may exist but must not hold a
// fleetwave.* object already; no existing file is overwritten. It does not
// run git.
func Scaffold(dir string) error {
	for _, ext := range []string{".cue", ".yaml", ".yml", ".json"} {
		if _, err := os.Lstat(filepath.Join(dir, configStem+ext)); err == nil {
			return fmt.Errorf("scaffold %s: %s already exists", dir, configStem+ext)
		}
	}
	files := map[string][]byte{
		"cue.mod/module.cue": []byte(scaffoldModule),
		VendoredSchemaPath:   schemaSource,
	}
	err := fs.WalkDir(scaffoldFS, "scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := scaffoldFS.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("scaffold", p)
		if rel == filepath.FromSlash("brc/fleetwave-agent.cue") {
			// the system BRC starts at the version of the binary that wrote
			// it, so a fresh fleet does not upgrade its agents at once
			b = bytes.Replace(b, []byte(`target_version: "0.1.0"`), []byte("target_version: "+strconv.Quote(fleetwave.Version)), 1)
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return fmt.Errorf("scaffold: %w", err)
	}
	for p := range files {
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(p))); err == nil {
			return fmt.Errorf("scaffold %s: %s already exists", dir, p)
		}
	}
	for p, b := range files {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			return fmt.Errorf("scaffold: %w", err)
		}
		// O_EXCL: never overwrite a file that appeared since the check.
		f, err := os.OpenFile(fp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("scaffold: %w", err)
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			return fmt.Errorf("scaffold %s: %w", path.Clean(p), err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("scaffold: %w", err)
		}
	}
	return nil
}
