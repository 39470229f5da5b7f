package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/agent"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
)

// TestLogLinesAreJSONWithEachKeyOnce runs a hub (managed redis-server, a
// real git remote) and three agents through a rollout that retries an
// item, blocks one, waits for a window and halts, then a rejected commit
// and a shutdown, all logging JSON to one buffer as in production (the
// agents' logger is given as is: they name their node themselves). Every
// line is a JSON object with each key once; hub lines carry the hub id
// and one component; durations carry their unit; ids use one key and one
// type everywhere.
func TestLogLinesAreJSONWithEachKeyOnce(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	remote := gittest.NewRemote(t, troubleFleet())
	clk := troubleClock()
	logs := &lockedBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	h, stop := startLoggedFleet(t, remote, []string{"n1", "n2", "n3"}, clk, log)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	ctx := context.Background()

	waitUntil(t, "three agents reported", func() bool {
		obs, err := h.Engine().Observations(ctx)
		return err == nil && len(obs) == 3
	})
	waitUntil(t, "db waits out its quiescence", func() bool {
		s, err := h.Summary(ctx)
		return err == nil && s.Waiting["db"].Reason == fleetwave.ReasonQuiescence
	})
	advance(clk, 3*time.Second) // past quiescence_seconds
	waitUntil(t, "n2 retries", func() bool {
		_, items, _ := h.Engine().Rollout(ctx, "db-g1")
		for _, it := range items {
			if it.Node == "n2" && it.Status == fleetwave.ItemRetrying {
				return true
			}
		}
		return false
	})
	advance(clk, 11*time.Second) // past the backoff
	waitUntil(t, "the rollout halts", func() bool {
		r, err := h.Engine().RolloutRecord(ctx, "db-g1")
		return err == nil && r.Status == fleetwave.RolloutBlocked
	})
	gittest.Push(t, remote, map[string]string{"nodes/n5.cue": "kind: \"node\"\nname: \"n5\"\ncriticality: \"urgent\"\n"}, nil, "Add n5")
	waitUntil(t, "the commit is rejected", func() bool { return h.SyncState().Result == "rejected" })
	stop()

	out := logs.String()
	components := map[string]int{}
	messages := map[string]bool{}
	agentLines := 0
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		fields, err := decodeOnce(line)
		if err != nil {
			t.Errorf("line %d: %v\n%s", i+1, err, line)
			continue
		}
		if msg, ok := fields["message"].(string); ok {
			messages[msg] = true
			// the steps of a sync, of a push's plan and of a status write are timed
			for step, keys := range map[string][]string{
				"snapshot applied": {"fetch_ms", "read_ms", "validate_ms", "generations_ms", "took_ms", "commit"},
				"push planned":     {"scope_ms", "observe_ms", "plan_ms", "create_ms", "took_ms", "commit"},
				"status committed": {"read_ms", "nodes_ms", "fetch_ms", "edit_ms", "encode_ms", "push_ms", "took_ms", "commit"},
			} {
				for _, k := range keys {
					if _, ok := fields[k]; msg == step && !ok {
						t.Errorf("line %d: %q without %s: %s", i+1, msg, k, line)
					}
				}
			}
		}
		if _, ok := fields["level"].(string); !ok {
			t.Errorf("line %d has no level: %s", i+1, line)
		}
		if c, ok := fields["component"].(string); ok {
			components[c]++
		}
		if _, ok := fields["hub"]; ok {
			if fields["hub"] != "log-hub" {
				t.Errorf("line %d: hub = %v, want log-hub: %s", i+1, fields["hub"], line)
			}
			if _, ok := fields["component"]; !ok {
				t.Errorf("hub line %d has no component: %s", i+1, line)
			}
		} else {
			agentLines++
		}
		checkKeys(t, i+1, line, fields)
	}
	for _, c := range []string{"hub", "engine", "gitsync", "redis"} {
		if components[c] == 0 {
			t.Errorf("no line of component %s: %v", c, components)
		}
	}
	for c := range components {
		if !map[string]bool{"hub": true, "api": true, "http": true, "debug": true, "engine": true, "gitsync": true, "redis": true}[c] {
			t.Errorf("unknown component %q", c)
		}
	}
	for _, m := range []string{"attempt finished", "attempt result", "snapshot applied", "status committed", "commit rejected", "hub stopped", "agent stopped"} {
		if !messages[m] {
			t.Errorf("no line %q", m)
		}
	}
	if agentLines == 0 {
		t.Error("no agent line")
	}
}

// checkKeys checks the keys of one line: durations with a unit, ids under
// one key each, of one type.
func checkKeys(t *testing.T, n int, line string, fields map[string]any) {
	t.Helper()
	for k, v := range fields {
		switch k {
		case "took", "retry_in", "backoff", "timeout", "poll_interval", "elapsed", "duration", "wait",
			"rollout_id", "item_id", "attempt_id", "node_id", "gen", "sha", "commit_id", "component_name":
			t.Errorf("line %d: key %q (durations end in _ms, ids are rollout, item, attempt, node, generation, commit): %s", n, k, line)
		}
		if strings.HasSuffix(k, "_ms") {
			if _, ok := v.(float64); !ok {
				t.Errorf("line %d: %s is not a number: %s", n, k, line)
			}
		}
		switch k {
		case "rollout", "item", "attempt", "node", "commit", "hub", "component", "brc", "approval":
			if _, ok := v.(string); !ok {
				t.Errorf("line %d: %s is not a string: %s", n, k, line)
			}
		case "generation", "fence":
			if _, ok := v.(float64); !ok {
				t.Errorf("line %d: %s is not a number: %s", n, k, line)
			}
		}
	}
}

// decodeOnce decodes one JSON object, failing on a key that appears twice
// in any object of it (encoding/json would keep the last silently).
func decodeOnce(line string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	if err := objectOnce(dec, ""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("more than one value on the line")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// objectOnce reads an object's members after its '{', up to its '}'.
func objectOnce(dec *json.Decoder, path string) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q twice", path+key)
		}
		seen[key] = true
		if err := valueOnce(dec, path+key+"."); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

func valueOnce(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return objectOnce(dec, path)
	case json.Delim('['):
		for dec.More() {
			if err := valueOnce(dec, path); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

// startLoggedFleet runs a hub with managed Redis and agents for nodes, all
// logging to log, until stop (idempotent; also at cleanup).
func startLoggedFleet(t *testing.T, remote string, nodes []string, clk clock.Clock, log zerolog.Logger) (*hub.Hub, func()) {
	t.Helper()
	dir := t.TempDir()
	tokens := map[string]string{}
	for _, n := range nodes {
		tokens[n] = hub.HashToken("token-" + n)
	}
	keyFile := filepath.Join(dir, "credentials.key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte("ab"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := hub.Config{
		CredentialsKeyFile: keyFile,
		Repo:               hub.RepoConfig{URL: remote, Branch: "main", PollInterval: hub.Duration(100 * time.Millisecond)},
		Redis:              "managed",
		Listen:             "127.0.0.1:0",
		DataDir:            filepath.Join(dir, "hub"),
		Status:             hub.StatusConfig{Interval: hub.Duration(200 * time.Millisecond)},
		Agents:             hub.AgentsConfig{Tokens: tokens},
		StepInterval:       hub.Duration(50 * time.Millisecond),
		HubID:              "log-hub",
	}
	troubleConfig(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := hub.New(ctx, cfg, hub.WithLogger(log), hub.WithClock(clk))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.Run(ctx); err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	for _, n := range nodes {
		wg.Go(func() {
			err := agent.Run(ctx, agent.Config{
				HubURL: "http://" + h.Addr(), Node: n, Token: "token-" + n,
				StateDir: filepath.Join(dir, n), PollWait: time.Second, ReportInterval: 2 * time.Second,
				Logger: log,
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("agent %s: %v", n, err)
			}
		})
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait(); h.Close() }) }
	t.Cleanup(stop)
	return h, stop
}
