package fleetgen

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetwave/fleetwave/schema"
)

func TestGeneratedRepositoryValidates(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, 250, 12, 5, 7); err != nil {
		t.Fatal(err)
	}
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := v.LoadDir(dir)
	if err != nil {
		t.Fatalf("generated repository does not validate:\n%v", err)
	}
	if len(snap.Nodes) != 250 || len(snap.Triggers) != 12 || len(snap.Blocks) != 5 {
		t.Errorf("got %d nodes, %d triggers, %d blocks", len(snap.Nodes), len(snap.Triggers), len(snap.Blocks))
	}
	for _, ext := range []string{".cue", ".yaml", ".json"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "nodes", "*"+ext)); len(m) == 0 {
			t.Errorf("no %s node files", ext)
		}
	}
	again := t.TempDir()
	if err := Generate(again, 250, 12, 5, 7); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "nodes", "node-000042.cue"))
	b, _ := os.ReadFile(filepath.Join(again, "nodes", "node-000042.cue"))
	if len(a) == 0 || string(a) != string(b) {
		t.Error("the same seed must give the same files")
	}
}
