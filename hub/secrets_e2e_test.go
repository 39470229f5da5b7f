package hub_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// TestCredentialsNeverLeak: a template creates a credential; the agents get
// it in their rendered config, and it appears nowhere else: not in any file
// of the repository (status included), the logs, the API or plan output.
func TestCredentialsNeverLeak(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := dbFleet()
	files["blocks/db.cue"] = `kind: "block"
name: "db"
actions: {
	install: command: "cp \"$FLEETWAVE_CONFIG\" rendered.yaml; echo \"config is $(cat $FLEETWAVE_CONFIG)\""
	upgrade: command: "cp \"$FLEETWAVE_CONFIG\" rendered.yaml"
}
`
	files["brc/db.cue"] = `kind: "trigger"
name: "db"
block_name: "db"
target_version: "1"
max_concurrent: 3
block_config_template: """
	password: {{ credential_get_or_create("db-admin", length=24) }}
	backup: "{{ backup_schedule_cron(workspace.name) }}"
	"""
`
	remote := gittest.NewRemote(t, files)
	f := startFleet(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"})
	f.waitRollout(t, "db-g1", fleetwave.RolloutCompleted)
	rendered, err := os.ReadFile(filepath.Join(f.stateDir("n1"), "blocks", "db", "rendered.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(string(rendered))
	if m == nil || len(m[1]) != 24 {
		t.Fatalf("rendered config = %q, want a 24-character password", rendered)
	}
	secret := m[1]
	waitFile(t, remote, "status/rollouts/db-g1.yaml", func(s string) bool { return strings.Contains(s, "status: completed") })

	// every file of the repository at its tip
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "-q", remote, work)
	_ = filepath.WalkDir(work, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			t.Errorf("the credential is in %s", p)
		}
		return nil
	})
	if log := gittest.Git(t, work, "log", "-p", "--all"); strings.Contains(log, secret) {
		t.Error("the credential is in the repository history")
	}
	if strings.Contains(f.logs.String(), secret) {
		t.Error("the credential is in the logs")
	}
	s, _ := f.hub.Summary(context.Background())
	_, items, _ := f.hub.Rollout(context.Background(), "db-g1")
	if strings.Contains(toJSON(t, s)+toJSON(t, items), secret) {
		t.Error("the credential is in an API answer")
	}
	if err := os.WriteFile(filepath.Join(work, "brc", "db.cue"), []byte(strings.Replace(files["brc/db.cue"], `"1"`, `"2"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "commit", "-q", "-am", "db 2")
	rep, err := hub.Plan(context.Background(), hub.PlanRequest{Dir: work, Branch: "main", Base: "", Head: "", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteText(&sb, true)
	if strings.Contains(sb.String()+toJSON(t, rep), secret) {
		t.Error("the credential is in plan output")
	}
	// the store survives: the same value after the next render
	if !strings.Contains(string(rendered), secret) {
		t.Fatal("unreachable")
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
