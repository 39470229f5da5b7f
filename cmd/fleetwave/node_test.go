package main

import (
	"encoding/json"
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// nodeFleet is three nodes, one file format each, with comments the
// writes must keep.
func nodeFleet() map[string]string {
	return map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/app.cue": "kind: \"block\"\nname: \"app\"\nactions: { install: { command: \"true\" }, upgrade: { command: \"true\" }, restart: { command: \"true\" } }\n",
		"nodes/n1.cue":   "// n1: the first web node\nkind: \"node\"\nname: \"n1\"\nlabels: {\n\ttier: \"web\"\n\track: \"r1\"\n}\n",
		"nodes/n2.yaml":  "# n2: the second web node\nkind: node\nname: n2\nlabels:\n  tier: web\n",
		"nodes/n3.json":  "{\n  \"kind\": \"node\",\n  \"name\": \"n3\",\n  \"labels\": {\"tier\": \"db\"}\n}\n",
	}
}

var commitLine = regexp.MustCompile(`: commit ([0-9a-f]{40})\n`)

// commitOf is the commit a node write printed.
func commitOf(t *testing.T, out string) string {
	t.Helper()
	m := commitLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no commit in:\n%s", out)
	}
	return m[1]
}

// TestNodeCommandsAgainstAHub drives node list/get, labels get/set, drain
// and undrain against a running hub: each write is a commit on the
// remote, by the hub, with the caller in Fleetwave-Actor.
func TestNodeCommandsAgainstAHub(t *testing.T) {
	f := startCLIFleet(t, nodeFleet(), nil)
	out := f.waitFor("the hub to list the nodes", func(out string, code int) bool {
		return code == 0 && hasRow(out, "n3")
	}, "node", "list")
	if !hasRow(out, "NODE", "CRITICALITY", "DRAIN") || !hasRow(out, "n1", "medium", "-", "never", "0", "1", "0", "rack=r1,tier=web") || !hasRow(out, "n2") {
		t.Fatalf("node list:\n%s", out)
	}
	var listed []api.NodeView
	out, errb, code := f.cli("node", "list", "-o", "json", "--limit", "2")
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed) != 2 || listed[0].ID != "n1" || listed[1].ID != "n2" {
		t.Fatalf("node list -o json --limit 2: exit %d %v\n%s%s", code, err, out, errb)
	}

	// labels set: the whole set, a commit on the remote by olga
	head := gittest.Head(t, f.remote)
	out, errb, code = f.cli("node", "labels", "set", "n1", "tier=web", "rack=r9", "--reason", "moved to rack 9", "--token", "op-token")
	mustOK(t, "labels set", out, errb, code)
	commit := commitOf(t, out)
	if !strings.HasPrefix(out, "node n1 labels set: commit "+commit+"\n") || !hasRow(out, "labels", "rack=r9,tier=web") {
		t.Fatalf("labels set output:\n%s", out)
	}
	if msg := f.commitText(commit); !strings.HasPrefix(msg, "fleetwave hub\n") || !strings.Contains(msg, "Fleetwave-Actor: olga") ||
		!strings.Contains(msg, "Fleetwave-Reason: moved to rack 9") {
		t.Fatalf("commit %s:\n%s", commit, msg)
	}
	if tip := gittest.Head(t, f.remote); tip != commit || tip == head {
		t.Fatalf("main is at %s, want the write %s", tip, commit)
	}
	if doc := f.file("nodes/n1.cue"); !strings.Contains(doc, "// n1: the first web node") || !strings.Contains(doc, `"r9"`) || strings.Contains(doc, `"r1"`) {
		t.Fatalf("nodes/n1.cue:\n%s", doc)
	}
	f.waitFor("the hub to sync the labels", func(out string, code int) bool {
		var labels map[string]string
		return code == 0 && json.Unmarshal([]byte(out), &labels) == nil && maps.Equal(labels, map[string]string{"tier": "web", "rack": "r9"})
	}, "node", "labels", "get", "n1", "-o", "json")
	if out, errb, code := f.cli("node", "labels", "get", "n1"); code != 0 || !hasRow(out, "KEY", "VALUE") || !hasRow(out, "rack", "r9") || !hasRow(out, "tier", "web") {
		t.Fatalf("labels get: exit %d\n%s%s", code, out, errb)
	}

	// a bad set is refused before the hub: nothing lands
	head = gittest.Head(t, f.remote)
	if out, errb, code := f.cli("node", "labels", "set", "n1", "tier=web", "bad key=x", "--token", "op-token"); code != 2 || out != "" ||
		!strings.Contains(errb, `invalid label key "bad key"`) {
		t.Fatalf("bad label: exit %d\n%s%s", code, out, errb)
	}
	// --clear: no labels, the rest of the file kept
	out, errb, code = f.cli("node", "labels", "set", "n1", "--clear", "--token", "op-token", "-o", "json")
	mustOK(t, "labels set --clear", out, errb, code)
	var w api.NodeWrite
	if err := json.Unmarshal([]byte(out), &w); err != nil || w.Commit == "" || len(w.Node.Labels) != 0 || w.Node.ID != "n1" {
		t.Fatalf("labels set --clear -o json: %v %+v\n%s", err, w, out)
	}
	if parent := gittest.Git(t, "", "--git-dir", strings.TrimPrefix(f.remote, "file://"), "rev-parse", w.Commit+"^"); parent != head {
		t.Fatalf("the --clear commit's parent is %s, want %s: the refused set landed?", parent, head)
	}
	if doc := f.file("nodes/n1.cue"); strings.Contains(doc, "labels") || !strings.Contains(doc, `name: "n1"`) {
		t.Fatalf("nodes/n1.cue after --clear:\n%s", doc)
	}

	// drain: a commit by olga; again once synced: nothing to commit
	out, errb, code = f.cli("node", "drain", "n2", "--reason", "disk swap", "--token", "op-token")
	mustOK(t, "drain", out, errb, code)
	commit = commitOf(t, out)
	if !strings.HasPrefix(out, "node n2 drained: commit "+commit+"\n") {
		t.Fatalf("drain output:\n%s", out)
	}
	if msg := f.commitText(commit); !strings.Contains(msg, "Fleetwave-Actor: olga") || !strings.Contains(msg, "Fleetwave-Reason: disk swap") {
		t.Fatalf("drain commit:\n%s", msg)
	}
	if doc := f.file("nodes/n2.yaml"); !strings.Contains(doc, "drain: true") || !strings.Contains(doc, "# n2: the second web node") {
		t.Fatalf("nodes/n2.yaml:\n%s", doc)
	}
	f.waitFor("the hub to sync the drain", func(out string, code int) bool { return code == 0 && hasRow(out, "drain", "true") }, "node", "get", "n2")
	out, errb, code = f.cli("node", "drain", "n2", "--token", "op-token")
	if code != 0 || out != "node n2 was already drained (no commit)\n" || gittest.Head(t, f.remote) != commit {
		t.Fatalf("drain again: exit %d\n%s%s", code, out, errb)
	}
	// undrain, as the admin, -o json
	out, errb, code = f.cli("node", "undrain", "n2", "--token", "admin-token", "-o", "json")
	mustOK(t, "undrain", out, errb, code)
	w = api.NodeWrite{}
	if err := json.Unmarshal([]byte(out), &w); err != nil || w.Commit == "" || w.Node.Drain {
		t.Fatalf("undrain -o json: %v %+v", err, w)
	}
	if msg := f.commitText(w.Commit); !strings.Contains(msg, "Fleetwave-Actor: adam") {
		t.Fatalf("undrain commit:\n%s", msg)
	}
	if doc := f.file("nodes/n2.yaml"); strings.Contains(doc, "drain") {
		t.Fatalf("nodes/n2.yaml after undrain:\n%s", doc)
	}

	// errors a human can act on
	if _, errb, code := f.cli("node", "drain", "n3"); code != 1 || !strings.HasPrefix(errb, "error: ") || !strings.Contains(errb, "(forbidden)\n") ||
		!strings.Contains(errb, "hint: changing a node needs an operator or admin token (--token or FLEETWAVE_TOKEN)\n") {
		t.Fatalf("a viewer drained: exit %d\n%s", code, errb)
	}
	if _, errb, code := f.cli("node", "get", "n9"); code != 1 || !strings.Contains(errb, "(not_found)\n") || !strings.Contains(errb, "hint: fleetwave node list shows the nodes\n") {
		t.Fatalf("an unknown node: exit %d\n%s", code, errb)
	}
	if _, errb, code := f.cli("node", "list", "--token", "wrong"); code != 1 || !strings.Contains(errb, "(unauthorized)\n") || !strings.Contains(errb, "--token or FLEETWAVE_TOKEN") {
		t.Fatalf("a wrong token: exit %d\n%s", code, errb)
	}
	out = f.waitFor("the hub to sync the undrain", func(out string, code int) bool { return code == 0 && hasRow(out, "drain", "false") }, "node", "get", "n2")
	if !hasRow(out, "node", "n2") || !hasRow(out, "labels", "tier=web") || !hasRow(out, "last", "report", "never") {
		t.Fatalf("node get:\n%s", out)
	}
}
