package hub

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/status"
)

// TestGenerationMarksHaveTheirOwnDocument: the generation marks are
// written to status/generation_marks.yaml when one changed and only then
// (the summary no longer carries them), and a hub whose mirror is lost
// restores them from that document, or from the summary of a status
// branch written by an older hub (real redis-server, real mirrors, a bare
// remote).
func TestGenerationMarksHaveTheirOwnDocument(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{"nodes/a.json": `{"v":1}`})
	h, _, _ := statusHub(t, url)
	ctx := context.Background()
	outer := t // the mirrors opened in the subtests outlive them
	generations := func(r *gitsync.Repo) {
		t.Helper()
		head, _, err := r.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Generations(ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	// write builds a status write and commits it, as statusStep does
	write := func(step string) map[string][]byte {
		t.Helper()
		b, err := h.statusFiles(ctx, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if _, err := h.repo.WriteStatus(ctx, b.files, "Status: "+step); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for _, p := range b.rendered {
			h.rendered[p].data = nil // landed
		}
		if strings.Contains(string(b.files[status.SummaryPath]), "generation_marks") {
			t.Fatalf("%s: the summary carries the marks:\n%s", step, b.files[status.SummaryPath])
		}
		return b.files
	}
	marksIn := func(files map[string][]byte) map[fleetwave.ObjectKey]int64 {
		t.Helper()
		data, ok := files[status.GenerationMarksPath]
		if !ok {
			return nil
		}
		doc, err := status.DecodeGenerationMarks(data)
		if err != nil {
			t.Fatal(err)
		}
		return doc.Marks
	}

	if got := marksIn(write("no marks yet")); got != nil {
		t.Fatalf("marks written before any generation: %v", got)
	}
	generations(h.repo)
	if got, want := marksIn(write("first generations")), map[fleetwave.ObjectKey]int64{"nodes/a": 1}; !maps.Equal(got, want) {
		t.Fatalf("first generations: marks %v, want %v", got, want)
	}
	generations(h.repo)
	if files := write("nothing new"); files[status.GenerationMarksPath] != nil {
		t.Fatal("marks written again while none changed")
	}
	gittest.Push(t, url, map[string]string{"nodes/a.json": `{"v":2}`, "nodes/b.json": `{"v":1}`}, nil, "a2, b")
	generations(h.repo)
	want := map[fleetwave.ObjectKey]int64{"nodes/a": 2, "nodes/b": 1}
	if got := marksIn(write("a changed, b added")); !maps.Equal(got, want) {
		t.Fatalf("after a change: marks %v, want %v", got, want)
	}

	t.Run("a hub whose mirror is lost restores them", func(t *testing.T) {
		h.repo = openMirror(outer, url)
		if err := h.restoreMarks(ctx); err != nil {
			t.Fatal(err)
		}
		if got := h.repo.HighWater(); !maps.Equal(got, want) {
			t.Fatalf("restored %v, want %v", got, want)
		}
	})

	t.Run("from the summary an older hub wrote", func(t *testing.T) {
		legacy := map[fleetwave.ObjectKey]int64{"nodes/a": 7, "nodes/b": 3}
		sum, err := status.EncodeSummary(status.Summary{GenerationMarks: legacy, Lanes: map[string]fleetwave.Counters{}})
		if err != nil {
			t.Fatal(err)
		}
		// the status branch as an older hub leaves it: no marks document
		if _, err := h.repo.WriteStatus(ctx, map[string][]byte{status.SummaryPath: sum, status.GenerationMarksPath: nil}, "Status: older hub"); err != nil {
			t.Fatal(err)
		}
		h.repo = openMirror(outer, url)
		if err := h.restoreMarks(ctx); err != nil {
			t.Fatal(err)
		}
		if got := h.repo.HighWater(); !maps.Equal(got, legacy) {
			t.Fatalf("restored %v, want %v", got, legacy)
		}
	})
}
