package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/examples"
)

// TestInitSeedsTheBuiltinAgentUpgrade: `fleetwave init` seeds the system
// BRC and the fleetwave-agent block of examples/fleet: the block's install
// and upgrade run the agent's built-in upgrade, the BRC targets the
// version of the binary that ran init and halts at the first failed agent.
func TestInitSeedsTheBuiltinAgentUpgrade(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	dir := filepath.Join(t.TempDir(), "config")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"init", dir}, &out, &errb); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, p := range agentBlockFiles {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		want, err := fs.ReadFile(examples.FS, "fleet/"+p)
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.Replace(want, []byte(`target_version: "0.1.0"`), []byte("target_version: "+strconv.Quote(fleetwave.Version)), 1)
		if !bytes.Equal(got, want) {
			t.Errorf("init wrote %s:\n%s\nwant the copy of examples/fleet:\n%s", p, got, want)
		}
	}
	block, _ := os.ReadFile(filepath.Join(dir, "blocks", "fleetwave-agent.cue"))
	for _, want := range []string{`install: command: "` + agent.BuiltinUpgrade + `"`, `upgrade: command: "` + agent.BuiltinUpgrade + `"`} {
		if !strings.Contains(string(block), want) {
			t.Errorf("the seeded block lacks %s:\n%s", want, block)
		}
	}
	brc, _ := os.ReadFile(filepath.Join(dir, "brc", "fleetwave-agent.cue"))
	for _, want := range []string{"target_version: " + strconv.Quote(fleetwave.Version), "failure_threshold: 1", `action_name:    "upgrade"`} {
		if !strings.Contains(string(brc), want) {
			t.Errorf("the seeded system BRC lacks %s:\n%s", want, brc)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"validate", dir}, &out, &errb); code != 0 {
		t.Fatalf("validate after init: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if st := gitOut(t, "-C", dir, "status", "--porcelain"); st != "" {
		t.Fatalf("init left a dirty work tree:\n%s", st)
	}
}
