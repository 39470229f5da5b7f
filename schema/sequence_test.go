package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// seqTree is a valid tree whose every object is written as JSON (which
// YAML reads too; CUE files get the JSON's fields) under a .cue, .yaml or
// .json name, so that a test can write any object again under its path.
type seqTree struct {
	files map[string][]byte
	paths map[string]string // object "kind/name" -> its path
}

func (s *seqTree) put(folder, name string, ext string, doc map[string]any) {
	p := folder + "/" + name + ext
	if folder == "" {
		p = name + ext
	}
	if old, ok := s.paths[folder+"/"+name]; ok {
		p = old // written again where it is
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	if strings.HasSuffix(p, ".cue") {
		data = data[1 : len(data)-1] // the fields, not an embedded struct
	}
	s.files[p], s.paths[folder+"/"+name] = data, p
}

var seqExts = []string{".cue", ".yaml", ".json"}

func seqNode(i int, region, ws, crit, org string) map[string]any {
	doc := map[string]any{"kind": "node", "name": fmt.Sprintf("n%02d", i), "labels": map[string]any{"region": region}}
	if ws != "" {
		doc["workspace"] = ws
	}
	if crit != "" {
		doc["criticality"] = crit
	}
	if org != "" {
		doc["organization"] = org
	}
	return doc
}

func seqWeb(name, block, region, version string) map[string]any {
	return map[string]any{"kind": "trigger", "name": name, "block_name": block, "target_version": version,
		"selector": map[string]any{"match_labels": map[string]any{"region": region}}}
}

func newSeqTree() *seqTree {
	s := &seqTree{files: map[string][]byte{}, paths: map[string]string{}}
	s.put("", "fleetwave", ".json", map[string]any{"kind": "config", "name": "fleetwave",
		"maintenance_windows": map[string]any{"nightly": map[string]any{"cron": "0 2 * * *", "duration": "2h"}}})
	s.put("organizations", "acme", ".yaml", map[string]any{"kind": "organization", "name": "acme"})
	s.put("organizations", "globex", ".cue", map[string]any{"kind": "organization", "name": "globex"})
	for i, org := range []string{"acme", "globex", "acme"} {
		s.put("workspaces", fmt.Sprintf("w%d", i+1), seqExts[i], map[string]any{"kind": "workspace", "name": fmt.Sprintf("w%d", i+1), "organization": org})
	}
	s.put("blocks", "web", ".yaml", map[string]any{"kind": "block", "name": "web", "actions": map[string]any{
		"install": map[string]any{"command": "echo i"}, "upgrade": map[string]any{"command": "echo u"}, "restart": map[string]any{"command": "echo r"}}})
	s.put("blocks", "db", ".cue", map[string]any{"kind": "block", "name": "db", "actions": map[string]any{
		"install": map[string]any{"command": "echo i"}, "upgrade": map[string]any{"command": "echo u"}}})
	for i := range 40 {
		s.put("nodes", fmt.Sprintf("n%02d", i), seqExts[i%3], seqNode(i, []string{"eu", "us"}[i%2], fmt.Sprintf("w%d", i%3+1), "", ""))
	}
	s.put("brc", "web-eu", ".yaml", seqWeb("web-eu", "web", "eu", "1.0"))
	s.put("brc", "web-us", ".cue", seqWeb("web-us", "web", "us", "1.0"))
	s.put("brc", "web-canary", ".json", map[string]any{"kind": "trigger", "name": "web-canary", "block_name": "web", "target_version": "1.2",
		"selector": map[string]any{"match_labels": map[string]any{"canary": "yes"}}})
	s.put("brc", "db", ".json", map[string]any{"kind": "trigger", "name": "db", "block_name": "db", "target_version": "2.0", "nodes": []string{"n01", "n03"}})
	s.put("rollouts", "restart", ".yaml", map[string]any{"kind": "rollout", "name": "restart", "brc": "web-us", "action_name": "restart", "nodes": []string{"n05"}})
	s.put("approvals", "a1", ".json", map[string]any{"kind": "approval", "name": "a1", "brc": "db", "target_version": "2.0", "nodes": []string{"n01"}})
	s.files["README.md"] = []byte("# the fleet\n")
	return s
}

func load2(s *Sequence, files map[string][]byte) loadResult {
	snap, err := s.Load(files)
	r := loadResult{snap: snap}
	if err != nil {
		r.errs = err.Error()
	}
	return r
}

func nodeKey(name string) fleetwave.ObjectKey { return fleetwave.Key(fleetwave.KindNode, name) }

// TestSequenceLoadsWhatLoadLoads changes a tree at random, one step at a
// time, mostly as a push does (a node, a BRC, a rollout or an approval
// rewritten, valid or not), sometimes otherwise (the config, a workspace,
// a file deleted or added again, a syntax error), and checks that a
// Sequence returns exactly what Load of the same tree returns: the same
// snapshot, or the same errors. It also checks that most steps were loaded
// from the last tree, so the comparison covers that path.
func TestSequenceLoadsWhatLoadLoads(t *testing.T) {
	base := newSeqTree()
	seq := newValidator(t).Sequence()
	ref := newValidator(t)
	if r := load(ref, base.files); r.errs != "" {
		t.Fatalf("the base tree is invalid:\n%s", r.errs)
	}
	var last *fleetwave.Snapshot // the last tree loaded without errors, and its name
	lastTag := ""
	var readFiles map[string][]byte // the tree read before, and its name
	readTag := ""
	for seed := int64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewSource(seed))
		cur := &seqTree{files: maps.Clone(base.files), paths: maps.Clone(base.paths)}
		pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
		nodes := func(bad bool) []string {
			var out []string
			for range 1 + r.Intn(3) {
				out = append(out, fmt.Sprintf("n%02d", r.Intn(40)))
			}
			if bad {
				out = append(out, "n40") // no such node
			}
			return out
		}
		followed, errored, told, toldWhole, addedFollowed := 0, 0, 0, 0, 0
		var saved map[string][]byte
		steps := 150
		for step := range steps {
			what := r.Intn(23)
			// bad: the change makes the tree invalid (a node deleted may be
			// one a BRC, the rollout or the approval names)
			bad := r.Intn(5) == 0 || what == 16 || what == 17
			if saved != nil && r.Intn(2) == 0 {
				what, bad = -1, false // back to the tree before the first bad change
				cur.files, saved = saved, nil
			}
			if bad && saved == nil {
				saved = maps.Clone(cur.files)
			}
			adding := false // a file added at this step
			either := func(good, wrong string) string {
				if bad {
					return wrong
				}
				return good
			}
			switch {
			case what < 0:
			case what < 6:
				i := r.Intn(40)
				doc := seqNode(i, pick("eu", "us", "ap"), pick("w1", "w2", "w3", ""), pick("", "high", "low"), "")
				switch k := r.Intn(4); {
				case !bad:
				case k == 0:
					doc["criticality"] = "urgent"
				case k == 1:
					doc["workspace"] = "w9"
				case k == 2:
					doc = seqNode(i, "eu", "w1", "", "globex") // w1 belongs to acme
				default:
					doc["labels"].(map[string]any)["canary"] = "yes" // web-canary's, and web-eu's or web-us'
					doc["labels"].(map[string]any)["region"] = "eu"
				}
				cur.put("nodes", fmt.Sprintf("n%02d", i), "", doc)
			case what < 10:
				name := pick("web-eu", "web-us")
				region := strings.TrimPrefix(name, "web-")
				if bad && r.Intn(2) == 0 {
					region = map[string]string{"eu": "us", "us": "eu"}[region] // both BRCs own the same instances
				}
				cur.put("brc", name, "", seqWeb(name, either("web", pick("db", "nope")), region, pick("1.0", "1.1")))
			case what == 10:
				cur.put("brc", "db", "", map[string]any{"kind": "trigger", "name": "db", "block_name": "db", "target_version": pick("2.0", "2.1"),
					"nodes": nodes(bad)})
			case what == 11:
				cur.put("rollouts", "restart", "", map[string]any{"kind": "rollout", "name": "restart", "brc": either(pick("web-us", "web-eu"), pick("gone", "db")),
					"action_name": either(pick("restart", "install"), "stop"), "nodes": nodes(bad)})
			case what == 12:
				cur.put("approvals", "a1", "", map[string]any{"kind": "approval", "name": "a1", "brc": either(pick("db", "web-eu"), "gone"),
					"target_version": pick("2.0", "2.1"), "nodes": nodes(bad)})
			case what == 13:
				cur.files["README.md"] = fmt.Appendf(nil, "# the fleet, step %d\n", step)
			case what == 14:
				windows := map[string]any{"nightly": map[string]any{"cron": "0 2 * * *", "duration": "2h"}}
				if r.Intn(2) == 0 {
					windows["weekly"] = map[string]any{"cron": "0 3 * * 0", "duration": "1h"}
				}
				cur.put("", "fleetwave", "", map[string]any{"kind": "config", "name": "fleetwave", "maintenance_windows": windows})
			case what == 15:
				cur.put("workspaces", "w2", "", map[string]any{"kind": "workspace", "name": "w2", "organization": pick("acme", "globex")})
			case what == 16:
				p := cur.paths[fmt.Sprintf("nodes/n%02d", r.Intn(40))]
				if _, ok := cur.files[p]; ok {
					delete(cur.files, p)
				} else {
					cur.files[p] = base.files[p]
				}
			case what == 17:
				cur.files[cur.paths[fmt.Sprintf("nodes/n%02d", r.Intn(40))]] = []byte("{[")
			case what == 20 || what == 21: // a BRC added (a push that starts a rollout), or removed
				name := pick("cache", "web-ap")
				p := "brc/" + name + pick(seqExts...)
				if had := cur.paths["brc/"+name]; had != "" {
					delete(cur.files, had)
					delete(cur.paths, "brc/"+name)
					break
				}
				if bad && r.Intn(2) == 0 {
					p = "brc/db" + pick(".yaml", ".cue") // a second file of BRC db
				}
				doc := seqWeb(name, either("web", "nope"), "ap", pick("1.0", "1.1"))
				if name == "cache" {
					doc = map[string]any{"kind": "trigger", "name": name, "block_name": either("db", "nope"), "target_version": "3.0", "nodes": nodes(bad)}
				}
				data, err := json.Marshal(doc)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(p, ".cue") {
					data = data[1 : len(data)-1]
				}
				cur.files[p], adding = data, true
				if !strings.HasPrefix(p, "brc/db") {
					cur.paths["brc/"+name] = p
				}
			case what == 22: // a rollout request or an approval added, or removed
				folder, name := pick("rollouts", "approvals"), pick("r2", "a2")
				if had := cur.paths[folder+"/"+name]; had != "" {
					delete(cur.files, had)
					delete(cur.paths, folder+"/"+name)
					break
				}
				adding = true
				if folder == "rollouts" {
					cur.put(folder, name, pick(seqExts...), map[string]any{"kind": "rollout", "name": name, "brc": either(pick("web-us", "web-eu", "cache"), "gone"),
						"action_name": either("restart", "stop"), "nodes": nodes(bad)})
				} else {
					cur.put(folder, name, pick(seqExts...), map[string]any{"kind": "approval", "name": name, "brc": either(pick("db", "web-eu", "cache"), "gone"),
						"target_version": "2.0", "nodes": nodes(bad)})
				}
			case what >= 18 && r.Intn(2) == 0: // back to the base tree, then on from there
				cur = &seqTree{files: maps.Clone(base.files), paths: maps.Clone(base.paths)}
			}
			before := seq.followed
			// as the hub's sync reads it: the paths changed since the
			// commit read before, valid or not
			tag := fmt.Sprintf("c%d.%d", seed, step)
			var changed []string
			for p, data := range cur.files {
				if old, ok := readFiles[p]; !ok || !bytes.Equal(old, data) {
					changed = append(changed, p)
				}
			}
			for p := range readFiles {
				if _, ok := cur.files[p]; !ok {
					changed = append(changed, p)
				}
			}
			slices.Sort(changed)
			snap, err := seq.LoadChanged(maps.Clone(cur.files), tag, readTag, changed)
			readFiles, readTag = maps.Clone(cur.files), tag
			got := loadResult{snap: snap}
			if err != nil {
				got.errs = err.Error()
			} else {
				// what it says changed since the last tree: every other
				// object is the last tree's
				if snap.ChangedSince != "" {
					if snap.ChangedSince != lastTag {
						t.Fatalf("seed %d step %d: loaded from %q, the last tree was %q", seed, step, snap.ChangedSince, lastTag)
					}
					said := map[fleetwave.ObjectKey]bool{}
					for _, k := range snap.Changed {
						said[k] = true
					}
					for _, objs := range []map[fleetwave.ObjectKey]fleetwave.Object{last.Objects, snap.Objects} {
						for k := range objs {
							if o, ok := snap.Objects[k]; !said[k] && (!ok || o != last.Objects[k]) {
								t.Fatalf("seed %d step %d: %s changed, and the snapshot says only %v did", seed, step, k, snap.Changed)
							}
						}
					}
					told++
					if seq.followed == before {
						toldWhole++
					}
				}
				last, lastTag = snap, tag
				cp := *snap
				cp.ChangedSince, cp.Changed = "", nil // a whole load does not tell
				got.snap = &cp
			}
			want := load(ref, cur.files)

			sameResult(t, fmt.Sprintf("seed %d step %d (change %d)", seed, step, what), got, want)
			if seq.followed > before {
				followed++
				if adding {
					addedFollowed++
				}
			}
			if want.errs != "" {
				errored++
			}
		}
		t.Logf("seed %d: %d of %d steps loaded from the last tree (%d adding a file), %d told what changed (%d loaded whole), %d with errors", seed, followed, steps, addedFollowed, told, toldWhole, errored)
		if followed < steps/4 || addedFollowed == 0 || told < followed || toldWhole == 0 || errored < steps/20 {
			t.Fatalf("seed %d: %d steps loaded from the last tree and %d with errors: the test no longer covers both", seed, followed, errored)
		}
	}
}

// TestSequenceSharesUnchangedObjects: a tree that changes one node file is
// loaded from the last snapshot, whose other objects it shares, and the
// last snapshot is left as it was.
func TestSequenceSharesUnchangedObjects(t *testing.T) {
	tree := newSeqTree()
	seq := newValidator(t).Sequence()
	first, err := seq.Load(tree.files)
	if err != nil {
		t.Fatal(err)
	}
	next := &seqTree{files: maps.Clone(tree.files), paths: tree.paths}
	next.put("nodes", "n07", "", seqNode(7, "ap", "w2", "high", ""))
	second, err := seq.Load(next.files)
	if err != nil {
		t.Fatal(err)
	}
	if seq.followed != 1 {
		t.Fatalf("followed = %d, want the second tree loaded from the first", seq.followed)
	}
	if first.Nodes["n07"].Labels["region"] != "us" || second.Nodes["n07"].Labels["region"] != "ap" {
		t.Errorf("n07's region: %q in the first snapshot, %q in the second", first.Nodes["n07"].Labels["region"], second.Nodes["n07"].Labels["region"])
	}
	if first.Nodes["n08"] != second.Nodes["n08"] || first.Triggers["db"] != second.Triggers["db"] {
		t.Error("unchanged objects are not shared")
	}
	if first.Objects[nodeKey("n07")].Hash == second.Objects[nodeKey("n07")].Hash {
		t.Error("n07's content hash did not change")
	}
	if !slices.Equal(first.NodeIDs, second.NodeIDs) || !strings.HasPrefix(first.NodeIDs[0], "n00") {
		t.Errorf("node ids %v then %v", first.NodeIDs[:3], second.NodeIDs[:3])
	}
}

// TestSequenceTellsChangesSinceTheLastValidTree: the paths a sync says
// changed are those since the commit it read before, which may be one
// the Sequence refused. A tree loaded after a refused one is not said to
// differ from the last valid tree by those paths alone: here n03 was
// deleted by the refused commit (the BRC db names it) and the next one
// changes db only.
func TestSequenceTellsChangesSinceTheLastValidTree(t *testing.T) {
	tree := newSeqTree()
	seq := newValidator(t).Sequence()
	if _, err := seq.LoadChanged(maps.Clone(tree.files), "v", "", nil); err != nil {
		t.Fatal(err)
	}
	n03 := tree.paths["nodes/n03"]
	delete(tree.files, n03)
	if _, err := seq.LoadChanged(maps.Clone(tree.files), "b", "v", []string{n03}); err == nil {
		t.Fatal("a tree whose BRC names a deleted node was loaded")
	}
	tree.put("brc", "db", "", map[string]any{"kind": "trigger", "name": "db", "block_name": "db", "target_version": "2.0", "nodes": []string{"n01"}})
	snap, err := seq.LoadChanged(maps.Clone(tree.files), "c", "b", []string{tree.paths["brc/db"]})
	if err != nil {
		t.Fatal(err)
	}
	if snap.ChangedSince == "v" && !slices.Contains(snap.Changed, nodeKey("n03")) {
		t.Fatalf("c is said to differ from v by %v alone; n03 was deleted too", snap.Changed)
	}
	// the next commit, read after c, is told
	tree.put("brc", "db", "", map[string]any{"kind": "trigger", "name": "db", "block_name": "db", "target_version": "2.1", "nodes": []string{"n01"}})
	snap, err = seq.LoadChanged(maps.Clone(tree.files), "d", "c", []string{tree.paths["brc/db"]})
	if err != nil {
		t.Fatal(err)
	}
	if want := []fleetwave.ObjectKey{fleetwave.Key(fleetwave.KindTrigger, "db")}; snap.ChangedSince != "c" || !slices.Equal(snap.Changed, want) {
		t.Fatalf("d: changed since %q: %v, want since c: %v", snap.ChangedSince, snap.Changed, want)
	}
}
