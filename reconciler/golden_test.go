package reconciler

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// goldenCase is testdata/<case>/case.json: which functions to run on the
// snapshot and observations of the case, with their other arguments.
type goldenCase struct {
	Ops         []string             `json:"ops"` // plan, schedules, plan_schedule, manual, drift
	Now         time.Time            `json:"now"`
	Credentials bool                 `json:"credentials"`
	LastFired   map[string]time.Time `json:"last_fired"`
	Trigger     string               `json:"trigger"`
	Requests    []string             `json:"requests"`
	StaleAfter  string               `json:"stale_after"`
}

// fakeCredential is deterministic: golden files must not change per run.
func fakeCredential(scope, name string, length int) (string, error) {
	v := "secret-" + scope + "-" + name
	for len(v) < length {
		v += "x"
	}
	return v[:length], nil
}

func loadJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// loadSnapshot reads a snapshot written as JSON and fills the durations the
// schema would have parsed.
func loadSnapshot(t testing.TB, path string) *fleetwave.Snapshot {
	t.Helper()
	var snap fleetwave.Snapshot
	loadJSON(t, path, &snap)
	for name, w := range snap.Config.MaintenanceWindows {
		d, err := time.ParseDuration(w.DurationText)
		if err != nil {
			t.Fatalf("window %s: %v", name, err)
		}
		w.Duration = d
		snap.Config.MaintenanceWindows[name] = w
	}
	for _, b := range snap.Blocks {
		for n, a := range b.Actions {
			if a.TimeoutText != "" {
				a.Timeout, _ = time.ParseDuration(a.TimeoutText)
			}
			b.Actions[n] = a
		}
	}
	return &snap
}

type manualResult struct {
	Spec  *fleetwave.RolloutSpec `json:"spec,omitempty"`
	Code  string                 `json:"code,omitempty"`
	Error string                 `json:"error,omitempty"`
}

func runCase(t testing.TB, dir string) map[string]any {
	var c goldenCase
	loadJSON(t, filepath.Join(dir, "case.json"), &c)
	snap := loadSnapshot(t, filepath.Join(dir, "snapshot.json"))
	var obs fleetwave.Observations
	loadJSON(t, filepath.Join(dir, "observed.json"), &obs)
	opts := Options{}
	if c.Credentials {
		opts.Credential = fakeCredential
	}
	out := map[string]any{}
	for _, op := range c.Ops {
		switch op {
		case "plan":
			out[op] = PlanWith(snap, obs, c.Now, opts)
		case "schedules":
			out[op] = Schedules(snap, c.LastFired, c.Now)
		case "plan_schedule":
			var tick time.Time
			for _, f := range Schedules(snap, c.LastFired, c.Now) {
				if f.Trigger == c.Trigger {
					tick = f.Tick
				}
			}
			spec, problems := PlanSchedule(snap, obs, snap.Triggers[c.Trigger], tick, opts)
			out[op] = map[string]any{"spec": spec, "problems": problems}
		case "manual":
			res := map[string]manualResult{}
			for _, name := range c.Requests {
				spec, err := PlanManual(snap, obs, snap.Rollouts[name], opts)
				var re *RequestError
				switch {
				case errors.As(err, &re):
					res[name] = manualResult{Code: re.Code, Error: err.Error()}
				case err != nil:
					t.Fatalf("%s: untyped error %v", name, err)
				default:
					res[name] = manualResult{Spec: &spec}
				}
			}
			out[op] = res
		case "drift":
			d, _ := time.ParseDuration(c.StaleAfter)
			out[op] = Drift(snap, obs, c.Now, d, opts)
		default:
			t.Fatalf("unknown op %q", op)
		}
	}
	return out
}

func TestGolden(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/*/case.json")
	if len(dirs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, f := range dirs {
		dir := filepath.Dir(f)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got, err := json.MarshalIndent(runCase(t, dir), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join(dir, "plan.golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from the plan (run with -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

// TestPlanOfOneTriggerIsItsPartOfTheWholePlan plans each trigger of every
// golden case alone (Options.Only, as the hub does for the BRCs a push
// changed), from the observations of its scope only, and compares it with
// the trigger's part of the whole plan.
func TestPlanOfOneTriggerIsItsPartOfTheWholePlan(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/*/case.json")
	checked := 0
	for _, f := range dirs {
		dir := filepath.Dir(f)
		snap := loadSnapshot(t, filepath.Join(dir, "snapshot.json"))
		var obs fleetwave.Observations
		loadJSON(t, filepath.Join(dir, "observed.json"), &obs)
		opts := Options{Credential: fakeCredential, RequireReport: true}
		whole := PlanWith(snap, obs, now, opts)
		for _, spec := range whole.Rollouts {
			name := spec.Source.Object.Name()
			scoped := fleetwave.Observations{}
			for _, id := range Scope(snap, snap.Triggers[name]) {
				if r, ok := obs[id]; ok {
					scoped[id] = r
				}
			}
			one := opts
			one.Only = map[string]bool{name: true}
			alone := PlanWith(snap, scoped, now, one)
			if len(alone.Rollouts) != 1 {
				t.Fatalf("%s/%s: %d rollouts planned alone, want 1", dir, name, len(alone.Rollouts))
			}
			a, _ := json.Marshal(alone.Rollouts[0])
			w, _ := json.Marshal(spec)
			if !bytes.Equal(a, w) {
				t.Errorf("%s/%s planned alone:\n%s\nin the whole plan:\n%s", dir, name, a, w)
			}
			checked++
		}
	}
	if checked < 5 {
		t.Fatalf("only %d triggers checked", checked)
	}
}
