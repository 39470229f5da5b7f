package schema

import (
	"path"
	"strings"

	"github.com/fleetwave/fleetwave"
)

// folders maps each object folder of a config repository to the kind of the
// objects it holds (DESIGN §3).
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
// sub-folders of an object folder, other folders, unclean paths. The name
// part is the file name stem as written; Load checks that it is a valid name.
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

// folderOf returns the folder a kind's files live in, for messages.
func folderOf(k fleetwave.Kind) string {
	for f, kind := range folders {
		if kind == k {
			return f + "/"
		}
	}
	return "the repository root"
}
