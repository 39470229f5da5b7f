package schema

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/fleetgen"
)

// smallFleet is a generated valid tree with every kind fleetgen writes.
// One block per BRC: fleetgen gives BRCs that share a block overlapping
// scopes, which two reconciliation BRCs may not have.
func smallFleet(t *testing.T) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	if err := fleetgen.Generate(dir, 300, 6, 6, 7); err != nil {
		t.Fatal(err)
	}
	return readTree(t, dir)
}

// loadResult is what Load returned, in a comparable form.
type loadResult struct {
	snap *fleetwave.Snapshot
	errs string
}

func load(v *Validator, files map[string][]byte) loadResult {
	snap, err := v.Load(files)
	r := loadResult{snap: snap}
	if err != nil {
		r.errs = err.Error()
	}
	return r
}

func sameResult(t *testing.T, step string, got, want loadResult) {
	t.Helper()
	if got.errs != want.errs {
		t.Fatalf("%s: errors of the reused validator:\n%s\nof a fresh validator:\n%s", step, got.errs, want.errs)
	}
	if !reflect.DeepEqual(got.snap, want.snap) {
		t.Fatalf("%s: the reused validator's snapshot differs from a fresh validator's", step)
	}
}

// TestIncrementalLoadMatchesFresh changes a tree one step at a time and
// checks that a Validator reusing its cache returns exactly what a fresh
// Validator returns: the same snapshot, or the same errors.
func TestIncrementalLoadMatchesFresh(t *testing.T) {
	tree := smallFleet(t)
	node := "nodes/node-000042.yaml"
	if _, ok := tree[node]; !ok {
		for p := range tree {
			if strings.HasPrefix(p, "nodes/node-000042.") {
				node = p
			}
		}
	}
	orig := tree[node]
	nodeFile := func(body string) []byte {
		switch filepath.Ext(node) {
		case ".json":
			return []byte(`{"kind": "node", "name": "node-000042"` + body + "}")
		case ".cue":
			return []byte("kind: \"node\"\nname: \"node-000042\"\n" + strings.ReplaceAll(strings.TrimPrefix(body, ", "), ", ", "\n") + "\n")
		}
		return []byte("kind: node\nname: node-000042\n" + strings.ReplaceAll(strings.TrimPrefix(body, ", "), ", ", "\n") + "\n")
	}
	steps := []struct {
		name   string
		change func(map[string][]byte)
	}{
		{"unchanged", func(map[string][]byte) {}},
		{"one node changed", func(m map[string][]byte) { m[node] = nodeFile(`, "criticality": "high"`) }},
		{"the node made invalid", func(m map[string][]byte) { m[node] = nodeFile(`, "criticality": "urgent"`) }},
		{"the node valid again", func(m map[string][]byte) { m[node] = orig }},
		{"the node with a syntax error", func(m map[string][]byte) { m[node] = []byte("{[") }},
		{"the node with a bad label", func(m map[string][]byte) { m[node] = nodeFile(`, "labels": {"a b": "c"}`) }},
		{"the node referring to an unknown window", func(m map[string][]byte) {
			m[node] = nodeFile(`, "maintenance_windows": ["weekly"]`)
		}},
		{"the window defined", func(m map[string][]byte) {
			m["fleetwave.cue"] = append(append([]byte{}, m["fleetwave.cue"]...), "maintenance_windows: weekly: {cron: \"0 3 * * 0\", duration: \"1h\"}\n"...)
		}},
		{"the config broken", func(m map[string][]byte) {
			m["fleetwave.cue"] = []byte("kind: \"config\"\nname: \"fleetwave\"\nbackoff: \"soon\"\n")
		}},
		{"the config deleted", func(m map[string][]byte) { delete(m, "fleetwave.cue") }},
		{"the original tree", func(m map[string][]byte) { clear(m); maps.Copy(m, tree) }},
		{"a duplicate node file", func(m map[string][]byte) { m[dupOf(node)] = orig }},
		{"a node deleted", func(m map[string][]byte) { delete(m, dupOf(node)); delete(m, node) }},
		{"a block without actions", func(m map[string][]byte) {
			m["blocks/block-000.yaml"] = []byte("kind: block\nname: block-000\nactions: {}\n")
			delete(m, "blocks/block-000.json")
			delete(m, "blocks/block-000.cue")
		}},
		{"the original tree again", func(m map[string][]byte) { clear(m); maps.Copy(m, tree) }},
	}
	v := newValidator(t)
	cur := maps.Clone(tree)
	for _, s := range steps {
		s.change(cur)
		got := load(v, cur)
		want := load(newValidator(t), cur)
		sameResult(t, s.name, got, want)
		if s.name == "the node made invalid" && !strings.Contains(got.errs, "criticality") {
			t.Fatalf("%s: errors %q, want a criticality error", s.name, got.errs)
		}
		if s.name == "the node referring to an unknown window" && !strings.Contains(got.errs, `maintenance window "weekly" is not defined`) {
			t.Fatalf("%s: errors %q, want a window error", s.name, got.errs)
		}
		if v.cacheLen() > len(cur) {
			t.Fatalf("%s: cache holds %d files, the tree %d", s.name, v.cacheLen(), len(cur))
		}
	}
}

// dupOf returns a second file name of the same object as p.
func dupOf(p string) string {
	if filepath.Ext(p) == ".json" {
		return strings.TrimSuffix(p, ".json") + ".yaml"
	}
	return strings.TrimSuffix(p, filepath.Ext(p)) + ".json"
}

func (v *Validator) cacheLen() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.cache)
}

// TestSnapshotChangesDoNotReachTheCache modifies every map, slice, pointer
// target and string of a snapshot in place and checks that the next Load
// of the same tree is not affected.
func TestSnapshotChangesDoNotReachTheCache(t *testing.T) {
	tree := smallFleet(t)
	tree["rollouts/r1.yaml"] = []byte("kind: rollout\nname: r1\nbrc: brc-000\nnodes: [node-000001]\nselector:\n  match_labels: {env: prod}\n  match_expressions: [{key: tier, operator: in, values: [edge]}]\n")
	tree["approvals/a1.yaml"] = []byte("kind: approval\nname: a1\nbrc: brc-000\ntarget_version: \"1\"\nnodes: [node-000001]\n")
	tree["nodes/node-000001.yaml"] = []byte("kind: node\nname: node-000001\nlabels: {env: prod}\nmaintenance_windows: [nightly]\ncapabilities: [gpu]\ndata_addresses: {a: b}\n")
	delete(tree, "nodes/node-000001.json")
	delete(tree, "nodes/node-000001.cue")
	tree["blocks/hand.yaml"] = []byte("kind: block\nname: hand\nactions:\n  install: {command: echo, placement: split, requires: [gpu]}\ndetect: {command: cat version, timeout: 5s}\n")
	v := newValidator(t)
	first, err := v.Load(tree)
	if err != nil {
		t.Fatal(err)
	}
	want := load(newValidator(t), tree)
	scribble(reflect.ValueOf(first).Elem())
	sameResult(t, "after changing the first snapshot", load(v, tree), want)
}

// scribble changes every value reachable from v in place: strings, numbers
// and bools of elements of maps and slices and of pointer targets, and adds
// a key to every map.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			scribble(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			scribble(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			scribble(e)
			v.SetMapIndex(k, e)
		}
		if v.Type().Key().Kind() == reflect.String {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString("scribbled")
			v.SetMapIndex(k, reflect.New(v.Type().Elem()).Elem())
		}
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	}
}

// TestJSONDecodeMatchesCUEDecode checks the fast path of the kinds without
// defaults (decoding the file's JSON) against CUE's Decode, on generated
// files, the example fleet and edge cases.
func TestJSONDecodeMatchesCUEDecode(t *testing.T) {
	files := smallFleet(t)
	maps.Copy(files, readTree(t, filepath.Join("..", "examples", "fleet")))
	extra := map[string]string{
		"nodes/e1.yaml":         "kind: node\nname: e1\nlabels: {}\nmaintenance_windows: []\ncapabilities: []\ndata_addresses: {}\ndrain: false\n",
		"nodes/e2.json":         `{"kind": "node", "name": "e2", "labels": {"k": "v"}, "capabilities": ["caf\u00e9 \"q\" \\ \t"], "data_addresses": {"x": "<&>", "y": "\u2028"}, "drain": true}`,
		"nodes/e3.cue":          "kind: \"node\"\nname: \"e3\"\nlabels: {\"a.b/c\": \"x\"}\ncapabilities: [\"\"\"\n\tmulti\n\tline\n\t\"\"\"]\n",
		"rollouts/r1.yaml":      "kind: rollout\nname: r1\nbrc: b\nbatch_size: 3\nselector: {match_labels: {}, match_expressions: [{key: a, operator: exists}, {key: b, operator: in, values: [x, y]}]}\n",
		"rollouts/r2.json":      `{"kind": "rollout", "name": "r2", "brc": "b", "nodes": [], "selector": {}}`,
		"approvals/a1.yaml":     "kind: approval\nname: a1\nbrc: b\ntarget_version: \"1.0\"\nbatch_size: 1000000\nnodes: [n1]\n",
		"organizations/o1.yaml": "kind: organization\nname: o1\nmaintenance_windows: []\n",
		"workspaces/w1.yaml":    "kind: workspace\nname: w1\norganization: o1\ncriticality: low\n",
	}
	for p, s := range extra {
		files[p] = []byte(s)
	}
	v := newValidator(t)
	ctx, _ := newContext()
	checked := 0
	for p, data := range files {
		key, _ := ObjectKeyForPath(p)
		if _, hasDefaults := v.defaults[key.Kind()]; hasDefaults {
			continue
		}
		fast, errs := v.checkFile(ctx, p, key, data)
		if len(errs) > 0 || fast == nil {
			t.Fatalf("%s: %v", p, errs)
		}
		dv := v.buildData(p, data)
		slow := newObject(key.Kind())
		if err := dv.Decode(slow); err != nil {
			t.Fatalf("%s: Decode: %v", p, err)
		}
		if errs := checkObject(p, dv, slow); len(errs) > 0 {
			t.Fatalf("%s: %v", p, errs)
		}
		if !reflect.DeepEqual(fast.obj, slow) {
			t.Errorf("%s: JSON decoding gives\n%#v\nCUE's Decode\n%#v", p, fast.obj, slow)
		}
		norm, err := Normalize(p, data)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%x", sha256Sum(norm)); fast.hash != want {
			t.Errorf("%s: hash %s, want %s", p, fast.hash, want)
		}
		checked++
	}
	if checked < 300 {
		t.Errorf("checked %d files, expected at least 300", checked)
	}
}

func TestCacheIsDroppedWithTheFiles(t *testing.T) {
	v := newValidator(t)
	if _, err := v.Load(smallFleet(t)); err != nil {
		t.Fatal(err)
	}
	tree := baseTree()
	if _, err := v.Load(tree); err != nil {
		t.Fatal(err)
	}
	if got := v.cacheLen(); got != 6 {
		t.Errorf("cache holds %d files after loading a tree of 6 object files", got)
	}
}

func sha256Sum(b []byte) [sha256.Size]byte { return sha256.Sum256(b) }
