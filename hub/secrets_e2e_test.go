package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// sealedPrefix starts every sealed credential (hub/seal.go).
const sealedPrefix = "fwsealed.v1."

// TestCredentialsNeverLeak: a template creates credentials (one of a
// node's own, one its workspace shares); the agents get them in their
// rendered config, and they appear nowhere else: not in Redis (its keys,
// its AOF and RDB files: the hub's managed server), the hub's data dir,
// any file or object of the repository (status commits included), the
// logs, the API or plan output. Redis holds the sealed form instead.
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
	// the credential plain, quoted, and inside a longer string
	files["brc/db.cue"] = `kind: "trigger"
name: "db"
block_name: "db"
target_version: "1"
max_concurrent: 3
block_config_template: """
	password: {{ credential_get_or_create("db-admin", length=24) }}
	quoted: "{{ credential_get_or_create("db-admin", length=24) }}"
	url: "postgres://admin:{{ credential_get_or_create("db-admin", length=24) }}@db:5432/app"
	backup: "{{ backup_schedule_cron(workspace.name) }}"
	"""
`
	// n1's credential is its own (scope node/n1); n2 and n3 share prod's
	files["workspaces/prod.cue"] = "kind: \"workspace\"\nname: \"prod\"\n"
	for _, n := range []string{"n2", "n3"} {
		files["nodes/"+n+".cue"] = fmt.Sprintf("kind: \"node\"\nname: %q\nworkspace: \"prod\"\nlabels: { tier: \"web\" }\n", n)
	}
	remote := gittest.NewRemote(t, files)
	const viewerToken = "viewer-token"
	f := startFleetCfg(t, remote, "managed", []string{"n1", "n2", "n3"}, nil, func(c *hub.Config) {
		c.Identities = []hub.Identity{{Name: "vera", Role: "viewer", TokenSHA256: hub.HashToken(viewerToken)}}
	})
	f.waitEveryAgent(t, "db-g1")
	waitFile(t, remote, "status/rollouts/db-g1.yaml", func(s string) bool { return strings.Contains(s, "status: completed") })

	// The agents received the values, never a marker, wherever the
	// template put them.
	values := map[string]string{}
	for _, n := range []string{"n1", "n2", "n3"} {
		rendered, err := os.ReadFile(filepath.Join(f.stateDir(n), "blocks", "db", "rendered.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(rendered), "fwsealed") {
			t.Fatalf("%s received a sealed credential", n)
		}
		var cfg struct{ Password, Quoted, URL string }
		if err := yaml.Unmarshal(rendered, &cfg); err != nil {
			t.Fatalf("%s: rendered config is not YAML: %v", n, err)
		}
		if len(cfg.Password) != 24 || !regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString(cfg.Password) ||
			cfg.Quoted != cfg.Password || cfg.URL != "postgres://admin:"+cfg.Password+"@db:5432/app" {
			t.Fatalf("%s: rendered config lacks a 24-character password in every place (%d bytes)", n, len(rendered))
		}
		values[n] = cfg.Password
	}
	if values["n2"] != values["n3"] || values["n1"] == values["n2"] {
		t.Fatal("n2 and n3 should share their workspace's credential, n1 have its own")
	}
	secrets := []string{values["n1"], values["n2"]}
	// leak reports where a credential is, naming it by its hash, never by
	// its value.
	leak := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("a credential (sha256 %x) is in %s", sha256.Sum256([]byte(s)), where)
			}
		}
	}

	// (a) every key of Redis, read by its type
	redisText, err := hub.RedisText(context.Background(), f.hub.RedisClient())
	if err != nil {
		t.Fatal(err)
	}
	leak("Redis", redisText)

	// (e) API answers, over HTTP and as the hub returns them
	for _, path := range []string{"/api/v1/summary", "/api/v1/rollouts", "/api/v1/rollouts/db-g1", "/", "/metrics"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+f.hub.Addr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+viewerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		leak("GET "+path, string(body))
	}
	s, _ := f.hub.Summary(context.Background())
	_, items, _ := f.hub.Rollout(context.Background(), "db-g1")
	leak("an API answer", toJSON(t, s)+toJSON(t, items))

	// Stopped, the hub's managed Redis has flushed its AOF and the logs
	// are complete.
	f.stop()

	// (b) every file of the hub's data dir: the Redis server's (AOF,
	// RDB, its log), the mirror, the credential store (encrypted)
	dataDir := filepath.Join(f.dir, "hub")
	sealedIn := 0
	_ = filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			return nil
		}
		rel, _ := filepath.Rel(dataDir, p)
		leak(rel, string(b))
		if strings.HasPrefix(rel, "redis"+string(filepath.Separator)) && strings.Contains(string(b), sealedPrefix) {
			sealedIn++
		}
		return nil
	})
	// The sealed form is what Redis stored: the AOF records the rendered
	// configs (item templates, queued attempts) as written, markers in
	// place of the values, so a value would have been found there too.
	if sealedIn == 0 {
		t.Error("no file of the managed Redis holds a sealed credential: the configs were not stored sealed, or not where this test looks")
	}

	// (c) the hub's and the agents' logs; nothing logs a config either
	logs := f.logs.String()
	leak("the logs", logs)
	if strings.Contains(logs, sealedPrefix) {
		t.Error("a sealed credential is in the logs: something logs a config")
	}
	if !strings.Contains(logs, `"credentials":3`) {
		t.Error("no delivery unsealed the config's three credentials")
	}

	// (d) every file at the tip and every object of the repository (status
	// commits included), and of the hub's mirror
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "-q", remote, work)
	_ = filepath.WalkDir(work, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		leak(p, string(b))
		return nil
	})
	for _, dir := range []string{work, filepath.Join(dataDir, "mirror")} {
		leak("the objects of "+filepath.Base(dir), catAllObjects(t, dir))
	}

	// plan output
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
	leak("plan output", sb.String()+toJSON(t, rep))
}

// catAllObjects returns the content of every object of the repository in
// dir (blobs decompressed), without printing it on failure.
func catAllObjects(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("git", "cat-file", "--batch-all-objects", "--batch", "--unordered")
	cmd.Dir, cmd.Env = dir, gittest.Env()
	out, err := cmd.Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("git cat-file in %s: %v (%d bytes)", dir, err, len(out))
	}
	return string(out)
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
