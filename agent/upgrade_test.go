package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// buildHub is a testHub that also serves agent builds.
type buildHub struct {
	*testHub
	builds map[string][]byte // version -> content
	sums   map[string]string // version -> the sha256 it claims, when not the true one
	asked  map[string]bool   // versions asked for
	refuse map[string]*api.Error
}

func (h *buildHub) AgentArtifact(_ context.Context, node, version, goos, goarch string) (*api.Artifact, error) {
	h.mu.Lock()
	h.asked[version] = true
	h.mu.Unlock()
	if e := h.refuse[version]; e != nil {
		return nil, e
	}
	b, ok := h.builds[version]
	if !ok || node != testNode || goos != runtime.GOOS || goarch != runtime.GOARCH {
		return nil, &api.Error{Status: http.StatusNotFound, Code: "unknown_artifact", Message: "no such build"}
	}
	sum := sha256.Sum256(b)
	s := hex.EncodeToString(sum[:])
	if claimed, ok := h.sums[version]; ok {
		s = claimed
	}
	return &api.Artifact{Name: "fleetwave-agent-" + version, SHA256: s, ModTime: time.Unix(0, 0), Content: nopCloser{bytes.NewReader(b)}}, nil
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// upgradeRig is a node whose agent binary is a script in bin/, a hub
// serving builds, and the seams of the upgrade replaced.
type upgradeRig struct {
	hub   *buildHub
	srv   *httptest.Server
	dir   string
	exe   string // the agent's binary
	execs chan execCall
	// running is what executable() answers (the binary the process runs).
	running string
}

type execCall struct {
	path string
	argv []string
}

// oldBuild is the content of the binary the node runs at the start.
const oldBuild = "#!/bin/sh\n# the previous build\nexit 0\n"

// build is a script that answers the upgrade probe as version and then
// exits with code.
func build(version string, code int) []byte {
	return []byte("#!/bin/sh\nif [ -n \"$" + ProbeEnv + "\" ]; then echo " + version + " > \"$" + ProbeEnv + "\"; exit 0; fi\nexit " + string(rune('0'+code)) + "\n")
}

func newUpgradeRig(t *testing.T, from string) *upgradeRig {
	t.Helper()
	r := &upgradeRig{
		hub:   &buildHub{testHub: newTestHub(), builds: map[string][]byte{}, sums: map[string]string{}, asked: map[string]bool{}, refuse: map[string]*api.Error{}},
		dir:   t.TempDir(),
		execs: make(chan execCall, 4),
	}
	r.srv = httptest.NewServer(api.New(r.hub, api.WithLogger(zerolog.New(zerolog.NewTestWriter(t)))))
	t.Cleanup(r.srv.Close)
	if err := os.MkdirAll(filepath.Join(r.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.exe = filepath.Join(r.dir, "bin", "fleetwave")
	if err := os.WriteFile(r.exe, []byte(oldBuild), 0o755); err != nil {
		t.Fatal(err)
	}
	r.running = r.exe
	oldVersion, oldExecve, oldExecutable := fleetwave.Version, execve, executable
	t.Cleanup(func() { fleetwave.Version, execve, executable = oldVersion, oldExecve, oldExecutable })
	fleetwave.Version = from
	executable = func() (string, error) { return r.running, nil }
	// By default a re-execution fails as a missing binary would.
	execve = func(path string, argv, _ []string) error {
		r.execs <- execCall{path, argv}
		return syscall.ENOENT
	}
	return r
}

func (r *upgradeRig) config(t *testing.T) Config {
	return Config{
		HubURL: r.srv.URL, Node: testNode, Token: testToken,
		StateDir: filepath.Join(r.dir, "state"), PollWait: time.Second, ReportInterval: time.Hour,
		Logger: zerolog.New(zerolog.NewTestWriter(t)), SelfUpgrade: true,
	}
}

// start runs Run (a process of the agent); stop cancels it.
func (r *upgradeRig) start(t *testing.T, edit func(*Config)) (stop func()) {
	t.Helper()
	cfg := r.config(t)
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func agentAttempt(id, version string) fleetwave.Attempt {
	return fleetwave.Attempt{
		ID: id, Item: "item-" + id, Rollout: "fleetwave-agent-g2", Node: testNode, Block: fleetwave.AgentBlock, Action: "upgrade",
		Generation: 2, TargetVersion: version, ConfigHash: "c0ffee", DesiredState: fleetwave.StateInstalled,
		ManagedBy: "fleetwave-system", Fence: 3, Deadline: time.Now().Add(time.Hour),
		Payload: fleetwave.AttemptPayload{Command: BuiltinUpgrade, Config: "node: edge-01\nagent_version: " + version + "\n"},
	}
}

// handOver runs att in an agent process of the rig's version, as handle
// does, up to its re-execution into the new build: the fake execve ends
// that "process" (its lock released, its goroutine gone), as exec would.
func (r *upgradeRig) handOver(t *testing.T, att fleetwave.Attempt, edit func(*Config)) execCall {
	t.Helper()
	cfg, err := r.config(t).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	st, err := openStore(cfg.StateDir, testNode, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cfg: cfg, log: cfg.Logger, client: &client{base: cfg.HubURL, node: testNode, token: testToken, http: http.DefaultClient}, store: st}
	st.st.MaxFence = att.Fence
	st.record(att.ID, &journalEntry{Status: journalStarted, Fence: att.Fence, StartedAt: time.Now()})
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	prev := execve
	defer func() { execve = prev }()
	execs := make(chan execCall, 1)
	execve = func(path string, argv, _ []string) error {
		st.close() // exec closes the lock's descriptor
		execs <- execCall{path, argv}
		runtime.Goexit()
		return nil
	}
	results := make(chan fleetwave.AttemptResult, 1)
	go func() {
		res, _ := a.agentUpgrade(context.Background(), att, a.log)
		st.close()
		results <- res
	}()
	select {
	case c := <-execs:
		return c
	case res := <-results:
		t.Fatalf("the agent did not hand over: %+v", res)
	case <-time.After(waitLimit):
		t.Fatal("no hand-over")
	}
	return execCall{}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestBuiltinUpgradeHandsOverAndTheNewBuildCompletesIt: the agent
// downloads and tries the new build, writes the marker and re-executes
// itself into it, with its own command line; the binary's path keeps the
// previous build until the new process reported. The new process
// registers (its report shows the agent block at its version), switches
// the binaries (the previous one kept as .prev) and sends the success.
func TestBuiltinUpgradeHandsOverAndTheNewBuildCompletesIt(t *testing.T) {
	r := newUpgradeRig(t, "1.0.0")
	r.hub.builds["2.0.0"] = build("2.0.0", 0)
	att := agentAttempt("att-up", "2.0.0")
	call := r.handOver(t, att, nil)

	candidate := r.exe + ".new"
	if call.path != candidate || strings.Join(call.argv, " ") != strings.Join(os.Args, " ") {
		t.Fatalf("exec %q %q, want %q with the agent's own command line", call.path, call.argv, candidate)
	}
	if got := readFile(t, candidate); got != string(build("2.0.0", 0)) {
		t.Fatalf("candidate = %q", got)
	}
	if fi, _ := os.Stat(candidate); fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("candidate mode %v is not executable", fi.Mode())
	}
	if readFile(t, r.exe) != oldBuild {
		t.Fatal("the binary's path changed before the new build reported")
	}
	m, err := readMarker(filepath.Join(r.dir, "state"))
	if err != nil || m.Phase != phaseExec || m.From != "1.0.0" || m.To != "2.0.0" || m.Exe != r.exe || m.Candidate != candidate ||
		m.Attempt.ID != "att-up" || m.Attempt.Payload.Config != "" || !m.Deadline.After(time.Now()) {
		t.Fatalf("marker = %+v (%v)", m, err)
	}

	// the new process
	fleetwave.Version, r.running = "2.0.0", candidate
	r.start(t, nil)
	reg := r.hub.registration(t)
	if reg.AgentVersion != "2.0.0" {
		t.Fatalf("registration = %+v", reg)
	}
	res := r.hub.result(t)
	if res.AttemptID != "att-up" || res.Fence != 3 || res.Class != fleetwave.ResultSuccess || !strings.Contains(res.Output, "upgraded from 1.0.0 to 2.0.0") {
		t.Fatalf("result = %+v", res)
	}
	if in := res.Instance; in == nil || in.Block != fleetwave.AgentBlock || in.Version != "2.0.0" || in.Generation != 2 || in.State != fleetwave.StateInstalled || in.ManagedBy != "fleetwave-system" {
		t.Fatalf("instance = %+v", res.Instance)
	}
	if readFile(t, r.exe) != string(build("2.0.0", 0)) || readFile(t, r.exe+".prev") != oldBuild || exists(candidate) {
		t.Fatal("binaries not switched: want the new build at the path, the previous one as .prev, no .new")
	}
	if exists(markerPath(filepath.Join(r.dir, "state"))) {
		t.Fatal("marker left after the upgrade")
	}
	if len(r.execs) != 0 {
		t.Fatal("the new build re-executed something")
	}
}

// TestBuiltinUpgradeRollsBackWhenTheNewBuildDoesNotComeUp: the new build
// died at start; the service manager starts the binary's path again, the
// previous build, which fails the attempt (agent_upgrade_failed), removes
// the new build and the marker, and runs on.
func TestBuiltinUpgradeRollsBackWhenTheNewBuildDoesNotComeUp(t *testing.T) {
	r := newUpgradeRig(t, "1.0.0")
	r.hub.builds["2.0.0"] = build("2.0.0", 1)
	r.handOver(t, agentAttempt("att-bad", "2.0.0"), nil)

	r.start(t, nil) // the previous build, restarted
	reg := r.hub.registration(t)
	res := r.hub.result(t)
	if reg.AgentVersion != "1.0.0" || res.AttemptID != "att-bad" || res.Class != fleetwave.ResultPermanent ||
		!strings.HasPrefix(res.Output, fleetwave.ReasonAgentUpgradeFailed+": fleetwave 2.0.0 did not start") || !strings.Contains(res.Output, "runs 1.0.0 again") {
		t.Fatalf("registration %s, result %+v", reg.AgentVersion, res)
	}
	if readFile(t, r.exe) != oldBuild || exists(r.exe+".new") || exists(r.exe+".prev") || exists(markerPath(filepath.Join(r.dir, "state"))) {
		t.Fatal("want the previous build in place, no .new, no .prev, no marker")
	}
}

// TestBuiltinUpgradeGivesBackWhenTheNewBuildDoesNotReportInTime: the new
// build runs but the hub does not take its report before the deadline:
// it re-executes the previous build. When even that fails, the attempt
// fails at once.
func TestBuiltinUpgradeGivesBackWhenTheNewBuildDoesNotReportInTime(t *testing.T) {
	r := newUpgradeRig(t, "1.0.0")
	r.hub.builds["2.0.0"] = build("2.0.0", 0)
	r.handOver(t, agentAttempt("att-slow", "2.0.0"), func(c *Config) { c.UpgradeTimeout = 300 * time.Millisecond })

	r.hub.failRegister = 3 // about a second of refused registrations at least
	fleetwave.Version, r.running = "2.0.0", r.exe+".new"
	r.start(t, nil)
	select {
	case c := <-r.execs:
		if c.path != r.exe {
			t.Fatalf("gave back to %q, want the previous build %q", c.path, r.exe)
		}
	case <-time.After(waitLimit):
		t.Fatal("the new build did not give the node back")
	}
	res := r.hub.result(t)
	if res.Class != fleetwave.ResultPermanent || !strings.HasPrefix(res.Output, fleetwave.ReasonAgentUpgradeFailed+": fleetwave 2.0.0 did not report to the hub by ") ||
		!strings.Contains(res.Output, "the previous build could not be executed") {
		t.Fatalf("result = %+v", res)
	}
	if readFile(t, r.exe) != oldBuild || exists(markerPath(filepath.Join(r.dir, "state"))) {
		t.Fatal("want the previous build at the path and no marker")
	}
}

// TestBuiltinUpgradeRefusals: what fails before anything is handed over
// leaves the binary alone, with a permanent agent_upgrade_failed (or a
// transient failure for a hub that cannot answer now); the attempt runs
// through the agent's loop like any other.
func TestBuiltinUpgradeRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*buildHub)
		class fleetwave.ResultClass
		out   string
	}{
		{"a build that exits at start fails its trial run", func(h *buildHub) {
			h.builds["2.0.0"] = []byte("#!/bin/sh\necho 'cannot start: missing library' >&2\nexit 1\n")
		}, fleetwave.ResultPermanent, "failed its trial run: exit status 1: cannot start: missing library"},
		{"a build of another version", func(h *buildHub) { h.builds["2.0.0"] = build("1.9.9", 0) },
			fleetwave.ResultPermanent, `it is version "1.9.9"`},
		{"no such build on the hub", func(*buildHub) {}, fleetwave.ResultPermanent, "the hub holds no build of fleetwave 2.0.0 for " + runtime.GOOS + "/" + runtime.GOARCH},
		{"a checksum mismatch", func(h *buildHub) {
			h.builds["2.0.0"] = build("2.0.0", 0)
			h.sums["2.0.0"] = strings.Repeat("ab", 32)
		}, fleetwave.ResultPermanent, "checksum mismatch"},
		{"a hub that cannot serve now is transient", func(h *buildHub) {
			h.refuse["2.0.0"] = &api.Error{Status: http.StatusServiceUnavailable, Code: "redis_unavailable", Message: "later"}
		}, fleetwave.ResultTransient, "download of fleetwave 2.0.0 failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newUpgradeRig(t, "1.0.0")
			tt.setup(r.hub)
			r.start(t, nil)
			r.hub.registration(t)
			r.hub.enqueue(agentAttempt("att-1", "2.0.0"))
			res := r.hub.result(t)
			if res.Class != tt.class || !strings.Contains(res.Output, tt.out) {
				t.Fatalf("result = %+v, want %s with %q", res, tt.class, tt.out)
			}
			if tt.class == fleetwave.ResultPermanent && !strings.HasPrefix(res.Output, fleetwave.ReasonAgentUpgradeFailed+": ") {
				t.Fatalf("output %q does not start with the reason", res.Output)
			}
			if readFile(t, r.exe) != oldBuild || exists(r.exe+".new") || exists(markerPath(filepath.Join(r.dir, "state"))) || len(r.execs) != 0 {
				t.Fatal("a refused upgrade touched the binary or re-executed")
			}
			if !r.hub.asked["2.0.0"] {
				t.Fatal("the agent did not ask the hub for the build")
			}
		})
	}
}

// TestBuiltinUpgradeWithoutReplacing: the running version needs nothing; an
// embedded agent (no SelfUpgrade) records the version; the built-in serves
// only the agent block.
func TestBuiltinUpgradeWithoutReplacing(t *testing.T) {
	tests := []struct {
		name    string
		self    bool
		att     func() fleetwave.Attempt
		class   fleetwave.ResultClass
		out     string
		version string // of the instance in the result
	}{
		{"the version the agent runs", true, func() fleetwave.Attempt { return agentAttempt("a", "1.0.0") }, fleetwave.ResultSuccess, "the agent runs 1.0.0", "1.0.0"},
		{"an embedded agent records the version", false, func() fleetwave.Attempt { return agentAttempt("a", "2.0.0") }, fleetwave.ResultSuccess, "embedded in another program", "2.0.0"},
		{"another block", true, func() fleetwave.Attempt {
			a := agentAttempt("a", "2.0.0")
			a.Block = "web"
			return a
		}, fleetwave.ResultPermanent, "is the command of block fleetwave-agent only", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newUpgradeRig(t, "1.0.0")
			r.start(t, func(c *Config) { c.SelfUpgrade = tt.self })
			r.hub.registration(t)
			r.hub.enqueue(tt.att())
			res := r.hub.result(t)
			if res.Class != tt.class || !strings.Contains(res.Output, tt.out) {
				t.Fatalf("result = %+v", res)
			}
			if tt.version != "" && (res.Instance == nil || res.Instance.Version != tt.version) {
				t.Fatalf("instance = %+v, want version %s", res.Instance, tt.version)
			}
			if len(r.hub.asked) != 0 || readFile(t, r.exe) != oldBuild {
				t.Fatal("downloaded or replaced a build")
			}
		})
	}
}

// TestReportShowsTheAgentBlockAtTheRunningVersion: with SelfUpgrade the
// agent block's instance is reported at the version the agent runs, not
// the one an attempt recorded; without, as recorded.
func TestReportShowsTheAgentBlockAtTheRunningVersion(t *testing.T) {
	newUpgradeRig(t, "1.0.0") // the agent runs 1.0.0
	a := &agent{cfg: Config{Node: testNode, SelfUpgrade: true}, store: &store{st: state{
		Instances: map[string]fleetwave.InstanceStatus{
			fleetwave.AgentBlock: {Block: fleetwave.AgentBlock, Version: "2.0.0", Generation: 2},
			"web":                {Block: "web", Version: "2.0.0"},
		}, Journal: map[string]*journalEntry{}}}}
	for _, self := range []bool{true, false} {
		a.cfg.SelfUpgrade = self
		rep := a.fullReport()
		want := map[bool]string{true: "1.0.0", false: "2.0.0"}[self]
		if len(rep.Instances) != 2 || rep.Instances[0].Block != fleetwave.AgentBlock || rep.Instances[0].Version != want || rep.Instances[1].Version != "2.0.0" {
			t.Fatalf("self upgrade %v: instances %+v, want the agent block at %s", self, rep.Instances, want)
		}
	}
}

// TestRunAnswersTheUpgradeProbe: with ProbeEnv set, Run writes its version
// and returns before it locks or creates the state directory.
func TestRunAnswersTheUpgradeProbe(t *testing.T) {
	r := newUpgradeRig(t, "3.1.4")
	answer := filepath.Join(r.dir, "answer")
	t.Setenv(ProbeEnv, answer)
	cfg := r.config(t)
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, answer); got != "3.1.4\n" {
		t.Fatalf("probe answer %q", got)
	}
	if exists(cfg.StateDir) {
		t.Fatal("the probe touched the state directory")
	}
	cfg.Node = ""
	if err := Run(context.Background(), cfg); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a probe with an incomplete config: %v, want the config error", err)
	}
}

func TestWhileTextBusyRetriesOnlyABusyFile(t *testing.T) {
	tries := 0
	err := whileTextBusy(func() error {
		tries++
		if tries < 3 {
			return &os.PathError{Op: "fork/exec", Path: "fleetwave", Err: syscall.ETXTBSY}
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("err %v after %d tries, want success at the third", err, tries)
	}
	tries = 0
	err = whileTextBusy(func() error { tries++; return os.ErrPermission })
	if !errors.Is(err, os.ErrPermission) || tries != 1 {
		t.Fatalf("err %v after %d tries, want the first error at once", err, tries)
	}
}
