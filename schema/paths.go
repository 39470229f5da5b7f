package schema

import (
	"path"
	"strings"

	"github.com/fleetwave/fleetwave"
)

// folders maps each object folder of a config repository to the kind of the
// objects it holds (docs/contract.md#the-config-repository).
var folders = map[string]fleetwave.Kind{
	"brc":           fleetwave.KindTrigger,
	"blocks":        fleetwave.KindBlock,
	"nodes":         fleetwave.KindNode,
	"organizations": fleetwave.KindOrganization,
	"workspaces":    fleetwave.KindWorkspace,
	"rollouts":      fleetwave.KindRollout,
	"approvals":     fleetwave.KindApproval,
}

// configStem is the file name stem of the kind:config object at the root.
const configStem = "fleetwave"

// objectExts are the accepted object file extensions.
var objectExts = map[string]bool{".cue": true, ".yaml": true, ".yml": true, ".json": true}

// ObjectKeyForPath maps a repository-relative slash path to the key of the
// object the file must hold: "brc/x.cue" -> "trigger/x", "fleetwave.cue" ->
// "config/fleetwave", "nodes/n1.yaml" -> "node/n1". It returns ok=false for
// every path that holds no object: other extensions, dotfiles, files in
// sub-folders of an object folder, other folders, unclean paths; Load
// reports those of them that look like object files (see outsideLayout).
// The name part is the file name stem as written; Load checks that it is a
// valid name.
func ObjectKeyForPath(p string) (fleetwave.ObjectKey, bool) {
	if p == "" || path.Clean(p) != p || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return "", false
	}
	ext := path.Ext(p)
	if !objectExts[ext] {
		return "", false
	}
	dir, file := path.Split(p)
	stem := strings.TrimSuffix(file, ext)
	if stem == "" || strings.HasPrefix(stem, ".") {
		return "", false
	}
	if dir == "" {
		if stem == configStem {
			return fleetwave.Key(fleetwave.KindConfig, stem), true
		}
		return "", false
	}
	kind, ok := folders[strings.TrimSuffix(dir, "/")]
	if !ok {
		return "", false
	}
	return fleetwave.Key(kind, stem), true
}

// layoutMessage is the error of an object file outside the layout.
const layoutMessage = "not part of the repository layout: object files belong in brc/, blocks/, nodes/, organizations/, workspaces/, rollouts/, approvals/ (or fleetwave.cue at the root); subfolders are not read"

// outsideLayout reports whether a repository path has the extension of an
// object file (.cue, .yaml, .yml, .json) but is not where the layout reads
// objects: a typo in a folder name (node/x.cue), a sub-folder of an object
// folder (nodes/eu/x.cue), another file at the root. Load reports such a
// file instead of ignoring it, so a misplaced object never silently drops
// out of the fleet. Paths under status/ (written by the hub), cue.mod/
// (the CUE module and the vendored schema) and every path with an element
// starting with '.' (.git, .github, editor files) are not objects and are
// not reported; neither are files of other extensions (README.md, *.sh).
func outsideLayout(p string) bool {
	if !objectExts[path.Ext(p)] {
		return false
	}
	if _, ok := ObjectKeyForPath(p); ok {
		return false
	}
	top, _, _ := strings.Cut(p, "/")
	if top == "status" || top == "cue.mod" {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if strings.HasPrefix(el, ".") {
			return false
		}
	}
	return true
}

// folderOf returns the folder a kind's files live in, for messages.
func folderOf(k fleetwave.Kind) string {
	for f, kind := range folders {
		if kind == k {
			return f + "/"
		}
	}
	return "the repository root"
}
