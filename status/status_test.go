package status

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// TestGoldenDocumentsRoundTrip decodes every document of testdata/ and
// encodes it again: the bytes must not change, so what the hub writes is
// exactly what it reads back (a rewrite never makes a commit by itself).
func TestGoldenDocumentsRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden documents: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := roundTrip(kindOfGolden(t, path), data)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("re-encoded document differs:\n--- got\n%s\n--- want\n%s", got, data)
			}
		})
	}
}

// kindOfGolden reads the kind from the golden file's name: <kind>-<case>.yaml.
func kindOfGolden(t *testing.T, path string) Kind {
	t.Helper()
	kind, _, _ := strings.Cut(filepath.Base(path), "-")
	switch k := Kind(strings.TrimSuffix(kind, ".yaml")); k {
	case KindSummary, KindGenerationMarks, KindRollout, KindNode, KindApproval:
		return k
	}
	t.Fatalf("%s: want <summary|generation_marks|rollout|node|approval>-<case>.yaml", path)
	return KindNone
}

func roundTrip(kind Kind, data []byte) ([]byte, error) {
	switch kind {
	case KindSummary:
		d, err := DecodeSummary(data)
		if err != nil {
			return nil, err
		}
		return EncodeSummary(d)
	case KindGenerationMarks:
		d, err := DecodeGenerationMarks(data)
		if err != nil {
			return nil, err
		}
		return EncodeGenerationMarks(d)
	case KindRollout:
		d, err := DecodeRollout(data)
		if err != nil {
			return nil, err
		}
		return EncodeRollout(d)
	case KindNode:
		d, err := DecodeNode(data)
		if err != nil {
			return nil, err
		}
		return EncodeNode(d)
	default:
		d, err := DecodeApproval(data)
		if err != nil {
			return nil, err
		}
		return EncodeApproval(d)
	}
}

func TestGoldenDocumentsRead(t *testing.T) {
	t.Run("summary", func(t *testing.T) {
		s, err := DecodeSummary(readGolden(t, "summary-approvals.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if s.Format != 1 || s.Approval == nil || !s.Approval.Required || s.Sync.Result == "" || len(s.Rollouts) == 0 || s.Nodes == nil {
			t.Fatalf("summary read as %+v", s)
		}
	})
	t.Run("rollout", func(t *testing.T) {
		d, err := DecodeRollout(readGolden(t, "rollout-completed.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if d.Rollout.ID == "" || !d.Rollout.Status.Finished() || len(d.Items) == 0 || len(d.Targets) != len(d.Items) ||
			d.Rollout.UpdatedAt.IsZero() || d.Items[0].Status == "" {
			t.Fatalf("rollout read as %+v", d)
		}
	})
	t.Run("approval", func(t *testing.T) {
		a, err := DecodeApproval(readGolden(t, "approval-consumed.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if a.ID == "" || a.TargetVersion == "" || a.State != fleetwave.ApprovalConsumed || a.SubmittedAt.IsZero() || a.Rollout == "" {
			t.Fatalf("approval read as %+v", a)
		}
	})
	t.Run("node that never reported", func(t *testing.T) {
		n, err := DecodeNode(readGolden(t, "node-unreported.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if n.Reported || n.Node == "" || len(n.Instances) != 0 {
			t.Fatalf("node read as %+v", n)
		}
		if r := n.Observation(); r.Node != n.Node || len(r.Instances) != 0 {
			t.Fatalf("observation %+v", r)
		}
	})
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestFormat(t *testing.T) {
	doc := []byte(header + "format: 1\nnode: n1\ninstances: []\n")
	t.Run("a document without format is version 1", func(t *testing.T) {
		old := bytes.Replace(doc, []byte("format: 1\n"), nil, 1)
		n, err := DecodeNode(old)
		if err != nil {
			t.Fatal(err)
		}
		if n.Format != 1 || n.Node != "n1" || !n.Reported {
			t.Fatalf("read as %+v", n)
		}
		out, err := EncodeNode(n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(out, []byte(header+"format: 1\n")) {
			t.Fatalf("written without the format first:\n%s", out)
		}
	})
	t.Run("a document of a newer format is refused", func(t *testing.T) {
		newer := bytes.Replace(doc, []byte("format: 1\n"), []byte("format: 2\n"), 1)
		for name, decode := range map[string]func([]byte) error{
			"summary":  func(b []byte) error { _, err := DecodeSummary(b); return err },
			"rollout":  func(b []byte) error { _, err := DecodeRollout(b); return err },
			"node":     func(b []byte) error { _, err := DecodeNode(b); return err },
			"approval": func(b []byte) error { _, err := DecodeApproval(b); return err },
		} {
			err := decode(newer)
			var fe *FormatError
			if !errors.As(err, &fe) || !fe.Newer || fe.Format != "2" {
				t.Fatalf("%s: got %v, want a newer-format error", name, err)
			}
			if !strings.Contains(err.Error(), "status format 2 is newer than this build reads (up to 1)") {
				t.Fatalf("%s: unclear error %q", name, err)
			}
		}
	})
	t.Run("a format that is no version is refused", func(t *testing.T) {
		for _, f := range []string{"format: 0\n", "format: one\n", "format: 1.5\n"} {
			_, err := DecodeNode(bytes.Replace(doc, []byte("format: 1\n"), []byte(f), 1))
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Newer {
				t.Fatalf("%q: got %v, want a format error", f, err)
			}
		}
	})
	t.Run("no document at all is refused", func(t *testing.T) {
		for _, data := range []string{"", "# only a comment\n", "- a list\n", "node: [unclosed\n"} {
			if _, err := DecodeNode([]byte(data)); err == nil {
				t.Fatalf("%q read without an error", data)
			}
		}
	})
}

// TestLargeIntegersStayIntegers: counters past a million are written as
// integers, and the exponent form older hubs wrote is still read.
func TestLargeIntegersStayIntegers(t *testing.T) {
	s := Summary{History: fleetwave.Counters{Total: 1_234_567, Done: 1_000_000}, Lanes: map[string]fleetwave.Counters{},
		GenerationMarks: map[fleetwave.ObjectKey]int64{"trigger/web": 1 << 60}}
	out, err := EncodeSummary(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"total: 1234567\n", "done: 1000000\n", "trigger/web: 1152921504606846976\n"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	old := strings.NewReplacer("1234567", "1.234567e+06", "1000000", "1e+06").Replace(string(out))
	back, err := DecodeSummary([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if back.History != s.History {
		t.Fatalf("read back %+v, want %+v", back.History, s.History)
	}
}

func TestRolloutDerivesTargetsAndWaves(t *testing.T) {
	items := []fleetwave.Item{{ID: "i3", Node: "n3", Wave: 2}, {ID: "i1", Node: "n1", Wave: 1}, {ID: "i2", Node: "n2", Wave: 1}, {ID: "i4", Node: "n0"}}
	d := NewRollout(fleetwave.Rollout{ID: "web-g1"}, items)
	if strings.Join(d.Targets, ",") != "n0,n1,n2,n3" {
		t.Fatalf("targets %v", d.Targets)
	}
	if len(d.Waves) != 2 || d.Waves[0].Wave != 1 || strings.Join(d.Waves[0].Nodes, ",") != "n1,n2" || d.Waves[1].Wave != 2 {
		t.Fatalf("waves %+v", d.Waves)
	}
	out, err := EncodeRollout(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRollout(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Items) != 4 || back.Rollout.ID != "web-g1" || back.Rollout.CreatedAt != (time.Time{}) {
		t.Fatalf("read back %+v", back)
	}
}

func TestNodeWrittenForm(t *testing.T) {
	drain := false
	for _, tc := range []struct {
		name      string
		node      Node
		want, not []string
	}{
		{"a reported node has its agent fields, never reported: false",
			Node{Node: "n1", Reported: true, AgentVersion: "1.2.0", Instances: []Instance{{Block: "db", Generation: 2}}, Drain: &drain},
			[]string{"agent_version: 1.2.0\n", "capabilities: null\n", "drain: false\n", "- block: db\n"}, []string{"reported:", "unknown_node"}},
		{"a node that never reported says so and has no agent fields",
			Node{Node: "n2", Instances: []Instance{}, UnknownNode: true},
			[]string{"reported: false\n", "instances: []\n", "unknown_node: true\n"}, []string{"agent_version", "capabilities", "drain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := EncodeNode(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("want %q in:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(string(out), n) {
					t.Fatalf("want no %q in:\n%s", n, out)
				}
			}
			back, err := DecodeNode(out)
			if err != nil {
				t.Fatal(err)
			}
			if back.Reported != tc.node.Reported || back.Node != tc.node.Node || back.UnknownNode != tc.node.UnknownNode || (back.Drain == nil) != (tc.node.Drain == nil) {
				t.Fatalf("read back %+v, wrote %+v", back, tc.node)
			}
		})
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		kind Kind
		id   string
	}{
		{SummaryPath, KindSummary, ""},
		{GenerationMarksPath, KindGenerationMarks, ""},
		{RolloutPath("web-g1"), KindRollout, "web-g1"},
		{NodePath("n1"), KindNode, "n1"},
		{ApprovalPath("up-v2"), KindApproval, "up-v2"},
		{"status/rollouts/web-g1.yml", KindNone, ""},
		{"status/rollouts/.yaml", KindNone, ""},
		{"status/nodes/sub/n1.yaml", KindNone, ""},
		{"status/notes.yaml", KindNone, ""},
		{"nodes/n1.yaml", KindNone, ""},
	} {
		kind, id := ParsePath(tc.path)
		if kind != tc.kind || id != tc.id {
			t.Errorf("ParsePath(%q) = %q, %q; want %q, %q", tc.path, kind, id, tc.kind, tc.id)
		}
	}
}

// TestALargeRolloutIsWrittenInParts writes a rollout of 2,500 items: its
// document lists three parts and each wave's size, the parts hold every
// item, and reading them back gives the whole rollout. A change to one
// item changes one part's bytes only.
func TestALargeRolloutIsWrittenInParts(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := fleetwave.Rollout{ID: "web-g3", Status: fleetwave.RolloutActive, Wave: 2, CreatedAt: at, UpdatedAt: at}
	var items []fleetwave.Item
	for i := range 2500 {
		it := fleetwave.Item{ID: fmt.Sprintf("web-g3-%05d", i), Rollout: r.ID, Node: fmt.Sprintf("n%05d", 2499-i), Block: "web",
			Action: "upgrade", Generation: 3, Status: fleetwave.ItemPending, Source: fleetwave.SourceScheduler}
		if i < 1500 {
			it.Wave, it.Status, it.Attempts, it.CompletedAt = 1+i/1000, fleetwave.ItemCompleted, 1, at
		}
		items = append(items, it)
	}
	whole := NewRollout(r, items)
	files, err := RolloutFiles(whole)
	if err != nil {
		t.Fatal(err)
	}
	wantPaths := []string{RolloutPath(r.ID), "status/rollouts/web-g3/items-0001.yaml", "status/rollouts/web-g3/items-0002.yaml", "status/rollouts/web-g3/items-0003.yaml"}
	if len(files) != len(wantPaths) {
		t.Fatalf("files %d, want %v", len(files), wantPaths)
	}
	for _, p := range wantPaths {
		if _, ok := files[p]; !ok {
			t.Fatalf("no %s among the files", p)
		}
	}
	main, err := DecodeRollout(files[RolloutPath(r.ID)])
	if err != nil {
		t.Fatal(err)
	}
	if len(main.Items) != 0 || len(main.Targets) != 0 || len(main.Parts) != 3 || main.Parts[2].Items != 500 {
		t.Fatalf("document: %d items, %d targets, parts %+v", len(main.Items), len(main.Targets), main.Parts)
	}
	if len(main.Waves) != 2 || main.Waves[0].Size != 1000 || main.Waves[1].Size != 500 || len(main.Waves[0].Nodes) != 0 {
		t.Fatalf("document waves %+v", main.Waves)
	}
	if main.Rollout.Status != fleetwave.RolloutActive {
		t.Fatalf("document rollout %+v", main.Rollout)
	}
	read := func(p string) ([]byte, bool) { b, ok := files[p]; return b, ok }
	back, err := ReadRollout(r.ID, files[RolloutPath(r.ID)], read)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Items) != len(items) || back.Parts != nil {
		t.Fatalf("read back %d items, parts %v", len(back.Items), back.Parts)
	}
	for i := range items {
		if back.Items[i] != items[i] {
			t.Fatalf("item %d read back %+v, want %+v", i, back.Items[i], items[i])
		}
	}
	if strings.Join(back.Targets, ",") != strings.Join(whole.Targets, ",") || len(back.Waves) != 2 || len(back.Waves[1].Nodes) != 500 {
		t.Fatalf("read back targets or waves differ: %d targets, waves %d", len(back.Targets), len(back.Waves))
	}

	// one item of the second part changes: only that part's bytes do
	items2 := append([]fleetwave.Item(nil), items...)
	items2[1700].Status, items2[1700].Wave = fleetwave.ItemInProgress, 2
	files2, err := RolloutFiles(NewRollout(r, items2))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range wantPaths[1:] {
		same := bytes.Equal(files[p], files2[p])
		if same != (p != "status/rollouts/web-g3/items-0002.yaml") {
			t.Errorf("%s: bytes unchanged = %v after item 1700 changed", p, same)
		}
	}

	// a small rollout is one document, as before
	small, err := RolloutFiles(NewRollout(r, items[:PartItems]))
	if err != nil || len(small) != 1 {
		t.Fatalf("a rollout of %d items: %d files, %v", PartItems, len(small), err)
	}

	// a part missing or of another rollout is an error, not fewer items
	delete(files, wantPaths[2])
	if _, err := ReadRollout(r.ID, files[RolloutPath(r.ID)], read); err == nil || !strings.Contains(err.Error(), "items-0002.yaml is missing") {
		t.Fatalf("part missing: %v", err)
	}
	files[wantPaths[2]] = files[wantPaths[3]]
	if _, err := ReadRollout(r.ID, files[RolloutPath(r.ID)], read); err == nil || !strings.Contains(err.Error(), "holds part 3") {
		t.Fatalf("part 3 in the place of part 2: %v", err)
	}
}
