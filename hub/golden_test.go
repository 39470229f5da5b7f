package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// TestReconcileGolden runs the reconciler the way the hub does on real
// config repositories: testdata/reconcile/<case>/repo is a directory as an
// operator writes it (fleetwave.cue, brc/, blocks/, nodes/, ...), loaded
// and validated by schema.(*Validator).LoadDir; observed.yaml holds the
// agents' full reports; case.yaml says what to run. want.golden is the
// expected result in a line format meant to be read and reviewed: it is an
// assertion about the rules of docs/contract.md, not a snapshot of whatever the
// code does. Refresh it with
//
//	go test ./hub -run TestReconcileGolden -update
//
// and review the diff line by line.
var updateReconcileGolden = flag.Bool("update", false, "rewrite testdata/reconcile/*/want.golden")

// reconcileCase is testdata/reconcile/<case>/case.yaml.
type reconcileCase struct {
	// Now is the time every operation is run at.
	Now time.Time `yaml:"now"`
	// Ops lists what to run, in order: plan (the hub's reconcile step:
	// reconciliation triggers), schedules (cron triggers, and the rollout
	// of each due one), manual (rollouts/<name> requests) and drift (what
	// observe mode shows). Default: plan.
	Ops []string `yaml:"ops"`
	// Scaffold starts from the files `fleetwave init` writes
	// (schema.Scaffold); repo/ is then laid over them, replacing files of
	// the same path.
	Scaffold bool `yaml:"scaffold"`
	// Generations sets object generations ("trigger/op": 3). LoadDir leaves
	// generations to gitsync, so every object of the case has generation 1
	// unless set here.
	Generations map[fleetwave.ObjectKey]int64 `yaml:"generations"`
	// Credentials backs credential_get_or_create with a deterministic fake;
	// false leaves the hub's answer without a credentials key (an error).
	Credentials bool `yaml:"credentials"`
	// LastFired is the stored last fire of each schedule trigger.
	LastFired map[string]time.Time `yaml:"last_fired"`
	// Requests are the manual requests to plan (default: every one of the
	// snapshot, in name order, as the hub does).
	Requests []string `yaml:"requests"`
	// StaleAfter is hub.yaml's stale_after for drift (default 2m).
	StaleAfter Duration `yaml:"stale_after"`
}

// goldenCommit is the commit every case's snapshot claims to be at.
const goldenCommit = "0000000000000000000000000000000000c0ffee"

// fakeCredentialPrefix starts every value the fake credential store returns;
// the test checks that it never reaches the golden output.
const fakeCredentialPrefix = "fakecred"

// fakeCredentials is a deterministic credential store: the value of a
// credential depends only on its scope and name (like the real store, whose
// values are stable once created), so config hashes are stable across runs:
// "fakecred-<first 8 hex of sha256(scope/name)>-xxx..." cut to length.
type fakeCredentials struct {
	mu     sync.Mutex
	values map[string]bool
}

func (f *fakeCredentials) get(scope, name string, length int) (string, error) {
	sum := sha256.Sum256([]byte(scope + "/" + name))
	v := fakeCredentialPrefix + "-" + hex.EncodeToString(sum[:4]) + "-"
	for len(v) < length {
		v += "x"
	}
	v = v[:length]
	f.mu.Lock()
	f.values[v] = true
	f.mu.Unlock()
	return v, nil
}

// observedReport is one node of observed.yaml: a fleetwave.Report (JSON
// field names) whose instances may give the rendered config they run
// instead of its hash (config: "..."), so that an "already equal" instance
// is written as the config the template must render.
type observedReport struct {
	fleetwave.Report
	Instances []observedInstance `json:"instances"`
}

type observedInstance struct {
	fleetwave.InstanceStatus
	Config *string `json:"config"`
}

func TestReconcileGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "reconcile", "*", "case.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases in testdata/reconcile (%v)", err)
	}
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cases {
		dir := filepath.Dir(f)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := runReconcileCase(t, v, dir)
			golden := filepath.Join(dir, "want.golden")
			if *updateReconcileGolden {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (create it with -update, then review it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (- want, + got); if the change is intended, run\n"+
					"\tgo test ./hub -run 'TestReconcileGolden/%s' -update\nand review the diff:\n%s",
					golden, filepath.Base(dir), lineDiff(string(want), got))
			}
		})
	}
}

func runReconcileCase(t *testing.T, v *schema.Validator, dir string) string {
	t.Helper()
	c := readCase(t, filepath.Join(dir, "case.yaml"))
	snap := loadCaseRepo(t, v, dir, c)
	obs := readObserved(t, filepath.Join(dir, "observed.yaml"), c.Now)

	// The options the hub passes to every plan (schema.ValidateConfig, and
	// without a credentials key a credential function that fails), with a
	// fake store when asked for.
	h := &Hub{cfg: Config{StaleAfter: c.StaleAfter}}
	opts := h.reconcilerOptions()
	creds := &fakeCredentials{values: map[string]bool{}}
	if c.Credentials {
		opts.Credential = creds.get
	}

	var b strings.Builder
	for i, op := range c.Ops {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "== %s\n", op)
		n := b.Len()
		switch op {
		case "plan":
			// as reconcileStep: only nodes with a full report are planned
			ropts := opts
			ropts.RequireReport = true
			plan := reconciler.PlanWith(snap, obs, c.Now, ropts)
			writePlan(t, &b, plan, c.Now)
		case "schedules":
			// as dueSchedules
			for _, f := range reconciler.Schedules(snap, c.LastFired, c.Now) {
				writeFire(&b, f)
				if f.Due && f.Held == "" {
					spec, problems := reconciler.PlanSchedule(snap, obs, snap.Triggers[f.Trigger], f.Tick, opts)
					if len(spec.Items) == 0 {
						fmt.Fprintf(&b, "  no items\n")
					} else {
						writeRollout(t, &b, spec, c.Now)
					}
					writeProblems(&b, "problem", problems)
				}
			}
		case "manual":
			// as manualRequests
			names := c.Requests
			if len(names) == 0 {
				names = sortedKeys(snap.Rollouts)
			}
			for _, name := range names {
				req := snap.Rollouts[name]
				if req == nil {
					t.Fatalf("case.yaml: no request rollouts/%s in the repo", name)
				}
				spec, err := reconciler.PlanManual(snap, obs, req, opts)
				if err != nil {
					var re *reconciler.RequestError
					if !errors.As(err, &re) {
						t.Fatalf("manual %s: %T %v, want a *reconciler.RequestError", name, err, err)
					}
					fmt.Fprintf(&b, "manual %s: error %s: %s\n", name, re.Code, re.Message)
					continue
				}
				// the targets, resolved once and pinned in the rollout
				targets, err := reconciler.ResolveTargets(snap, req)
				if err != nil {
					t.Fatalf("manual %s planned, but its targets do not resolve: %v", name, err)
				}
				fmt.Fprintf(&b, "manual %s: targets=%s\n", name, strings.Join(targets, ","))
				writeRollout(t, &b, spec, c.Now)
			}
		case "drift":
			for _, d := range reconciler.Drift(snap, obs, c.Now, h.cfg.StaleAfter.D(), opts) {
				writeDrift(&b, d)
			}
		default:
			t.Fatalf("case.yaml: unknown op %q (want plan, schedules, manual or drift)", op)
		}
		if b.Len() == n {
			b.WriteString("(nothing)\n")
		}
	}
	out := b.String()
	if strings.Contains(out, fakeCredentialPrefix) {
		t.Errorf("a credential value reached the output:\n%s", out)
	}
	for v := range creds.values {
		if strings.Contains(out, v) {
			t.Errorf("credential value %q reached the output", v)
		}
	}
	if c.Credentials && len(creds.values) == 0 {
		t.Errorf("case.yaml asks for credentials but no template used credential_get_or_create")
	}
	return out
}

func readCase(t *testing.T, path string) reconcileCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c reconcileCase
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.Now.IsZero() {
		t.Fatalf("%s: now is required", path)
	}
	c.Now = c.Now.UTC()
	if len(c.Ops) == 0 {
		c.Ops = []string{"plan"}
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = Duration(2 * time.Minute) // hub.yaml's default
	}
	return c
}

// loadCaseRepo loads repo/ (over the scaffold when asked) with the real
// loader and sets deterministic generations.
func loadCaseRepo(t *testing.T, v *schema.Validator, dir string, c reconcileCase) *fleetwave.Snapshot {
	t.Helper()
	repo := filepath.Join(dir, "repo")
	if c.Scaffold {
		tmp := t.TempDir()
		// the scaffold's system BRC targets the running binary's version:
		// pin it so the golden file does not change with each release
		defer func(v string) { fleetwave.Version = v }(fleetwave.Version)
		fleetwave.Version = "0.1.0"
		if err := schema.Scaffold(tmp); err != nil {
			t.Fatal(err)
		}
		copyTree(t, repo, tmp)
		repo = tmp
	}
	snap, err := v.LoadDir(repo)
	if err != nil {
		t.Fatalf("load %s: %v", repo, err)
	}
	snap.Commit = goldenCommit
	snap.Generations = map[fleetwave.ObjectKey]int64{}
	for k := range snap.Objects {
		snap.Generations[k] = 1
	}
	for k, g := range c.Generations {
		if _, ok := snap.Objects[k]; !ok {
			t.Fatalf("case.yaml: generations: no object %s in the repo", k)
		}
		snap.Generations[k] = g
	}
	return snap
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readObserved reads observed.yaml (missing = no node reported). A report
// without a time is taken as just received (at now).
func readObserved(t *testing.T, path string, now time.Time) fleetwave.Observations {
	t.Helper()
	obs := fleetwave.Observations{}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return obs
	}
	if err != nil {
		t.Fatal(err)
	}
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if raw == nil {
		return obs
	}
	js, err := json.Marshal(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var reports map[string]*observedReport
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&reports); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for node, or := range reports {
		if or == nil {
			or = &observedReport{}
		}
		r := or.Report
		if r.Node == "" {
			r.Node = node
		}
		if r.Node != node {
			t.Fatalf("%s: report %s says node %s", path, node, r.Node)
		}
		if r.SentAt.IsZero() && r.ReceivedAt.IsZero() {
			r.ReceivedAt = now
		}
		r.Instances = []fleetwave.InstanceStatus{}
		for _, in := range or.Instances {
			if in.Config != nil {
				if in.ConfigHash != "" {
					t.Fatalf("%s: %s/%s: give config or config_hash, not both", path, node, in.Block)
				}
				in.ConfigHash = reconciler.ConfigHash(*in.Config)
			}
			r.Instances = append(r.Instances, in.InstanceStatus)
		}
		obs[node] = &r
	}
	return obs
}

func writePlan(t *testing.T, b *strings.Builder, plan reconciler.Plan, now time.Time) {
	t.Helper()
	// every block instance is planned at most once: one item or one hold
	seen := map[fleetwave.InstanceKey]string{}
	once := func(k fleetwave.InstanceKey, what string) {
		if prev, dup := seen[k]; dup {
			t.Errorf("%s planned twice: %s and %s", k, prev, what)
		}
		seen[k] = what
	}
	for _, spec := range plan.Rollouts {
		for _, it := range spec.Items {
			once(it.Instance(), spec.BaseID+" "+it.Action)
		}
	}
	for _, h := range plan.Holds {
		if h.Block != "" {
			once(fleetwave.InstanceKey{Node: h.Node, Block: h.Block}, "hold "+h.Reason)
		}
	}
	for _, spec := range plan.WithItems() {
		writeRollout(t, b, spec, now)
	}
	for _, name := range sortedKeys(plan.Held) {
		fmt.Fprintf(b, "held %s %s\n", name, plan.Held[name])
	}
	writeProblems(b, "hold", plan.Holds)
	writeProblems(b, "problem", plan.Problems)
}

// writeRollout prints a rollout and its items in order, one line each:
//
//	rollout <id> source=<kind> object=<key> gen=<n> max_concurrent=<n> ...
//	  <#> <node> <block> <action> version= config=<hash prefix> state= lane= crit= ...
//
// and checks what no golden line can show: the payload matches the config
// hash, and items created skipped or blocked carry no payload.
func writeRollout(t *testing.T, b *strings.Builder, spec fleetwave.RolloutSpec, now time.Time) {
	t.Helper()
	fmt.Fprintf(b, "rollout %s source=%s object=%s gen=%d max_concurrent=%d failure_threshold=%g%% max_retries=%d items=%d\n",
		spec.BaseID, spec.Source.Kind, spec.Source.Object, spec.Source.Generation, spec.MaxConcurrent,
		spec.FailureThresholdPercent, spec.MaxRetries, len(spec.Items))
	if spec.Source.Commit != goldenCommit {
		t.Errorf("rollout %s: commit %q, want the snapshot's", spec.BaseID, spec.Source.Commit)
	}
	for i, it := range spec.Items {
		f := []string{fmt.Sprintf("  %d %s %s %s", i+1, it.Node, it.Block, it.Action)}
		add := func(k, v string) {
			if v != "" {
				f = append(f, k+"="+v)
			}
		}
		add("version", it.TargetVersion)
		add("config", shortHash(it.ConfigHash))
		add("state", string(it.DesiredState))
		add("lane", it.ManagedBy)
		add("crit", string(it.Criticality))
		if it.Generation != spec.Source.Generation {
			add("gen", fmt.Sprint(it.Generation))
		}
		if len(it.Windows) > 0 {
			names := make([]string, len(it.Windows))
			for j, w := range it.Windows {
				names[j] = w.Name
			}
			add("windows", strings.Join(names, ","))
		}
		switch open, next, err := engine.WindowState(it, now); {
		case it.BypassWindows:
			f = append(f, "bypass")
		case err != nil:
			add("window_error", err.Error())
		case len(it.Windows) == 0:
		case open:
			f = append(f, "window=open")
		case next.IsZero():
			add("waits_until", "never") // the windows never overlap within the search horizon
		default:
			add("waits_until", next.UTC().Format(time.RFC3339))
		}
		for _, w := range it.Windows {
			if w.Required {
				add("trigger_window", w.Name)
			}
		}
		add("group", it.Group)
		add("requires", strings.Join(it.Requires, ","))
		p := it.Payload
		if p == (fleetwave.AttemptPayload{}) {
			f = append(f, "payload=none")
		} else {
			f = append(f, fmt.Sprintf("cmd=%q", p.Command), fmt.Sprintf("timeout=%ds", p.TimeoutSeconds))
			if p.OneShot {
				f = append(f, "one_shot")
			}
			if p.Config != "" && reconciler.ConfigHash(p.Config) != it.ConfigHash {
				if it.ConfigHash != "" {
					t.Errorf("%s: payload config hash %s, item config_hash %s", it.Instance(), reconciler.ConfigHash(p.Config), it.ConfigHash)
				}
				add("payload_config", shortHash(reconciler.ConfigHash(p.Config)))
			}
		}
		if (it.SkipReason != "" || it.BlockReason != "") && p != (fleetwave.AttemptPayload{}) {
			t.Errorf("%s: created %s%s but carries a payload", it.Instance(), it.SkipReason, it.BlockReason)
		}
		if it.BlockReason != "" && it.BlockMessage == "" {
			t.Errorf("%s: blocked %s without a message", it.Instance(), it.BlockReason)
		}
		add("skipped", it.SkipReason)
		if it.BlockReason != "" {
			f = append(f, "blocked="+it.BlockReason+": "+it.BlockMessage)
		}
		b.WriteString(strings.Join(f, " ") + "\n")
	}
}

// writeProblems prints holds and problems:
//
//	hold <node> <block|-> [brc=<trigger>] <reason>: <message>
func writeProblems(b *strings.Builder, kind string, ps []reconciler.Problem) {
	for _, p := range ps {
		block := p.Block
		if block == "" {
			block = "-"
		}
		node := p.Node
		if node == "" {
			node = "-"
		}
		line := fmt.Sprintf("%s %s %s", kind, node, block)
		if p.Trigger != "" {
			line += " brc=" + p.Trigger
		}
		fmt.Fprintf(b, "%s %s: %s\n", line, p.Reason, p.Message)
	}
}

func writeFire(b *strings.Builder, f reconciler.Fire) {
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	line := "schedule " + f.Trigger
	if f.Due {
		line += " due tick=" + ts(f.Tick)
	} else {
		line += " not-due"
	}
	if !f.Record.IsZero() {
		line += " record=" + ts(f.Record)
	}
	if !f.NextFireAt.IsZero() {
		line += " next=" + ts(f.NextFireAt)
	}
	if f.Held != "" {
		line += " held=" + f.Held
	}
	if f.Error != "" {
		line += " error=" + f.Error
	}
	b.WriteString(line + "\n")
}

// writeDrift prints one drift entry; config hashes are shortened.
func writeDrift(b *strings.Builder, d reconciler.DriftEntry) {
	f := []string{"drift", d.Node}
	if d.Block != "" {
		f = append(f, d.Block)
	}
	if d.Trigger != "" {
		f = append(f, "brc="+d.Trigger)
	}
	f = append(f, d.Kind)
	want, got := d.Desired, d.Observed
	if d.Kind == reconciler.DriftConfig {
		want, got = shortHash(want), shortHash(got)
	}
	if want != "" {
		f = append(f, "desired="+want)
	}
	if got != "" {
		f = append(f, "observed="+got)
	}
	b.WriteString(strings.Join(f, " ") + "\n")
}

// lineDiff is a small line diff (longest common subsequence) of two texts,
// "-" for lines only in a, "+" for lines only in b, "  " for common ones.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			out = append(out, "  "+x[i])
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+x[i])
			i++
		default:
			out = append(out, "+ "+y[j])
			j++
		}
	}
	return strings.Join(out, "\n")
}
