package agent

// The built-in upgrade of the fleetwave-agent block.
//
// The system BRC keeps the block fleetwave-agent at its target_version on
// every node. The block's install and upgrade actions have the command
// BuiltinUpgrade ("fleetwave:agent-upgrade"), which the agent runs itself
// instead of handing it to the shell (an agent that predates it runs it as
// a shell command, which fails: command not found). When the attempt's
// target version is the version the agent runs, the action only records
// the instance. Otherwise, when Config.SelfUpgrade is set (`fleetwave
// agent`), the agent:
//
//  1. downloads the build of the target version for its os/arch from the
//     hub over its authenticated channel (GET /api/v1/agent/nodes/{node}/
//     artifacts/{version}), to <binary>.new beside its own binary
//     (os.Executable), and checks its sha256 against the hub's
//     X-Fleetwave-Sha256 (the hub's SHA256SUMS): a mismatch fails the
//     attempt;
//  2. tries it: runs it with its own command line and ProbeEnv set, and
//     wants it to answer with the target version within probeTimeout (a
//     build that does not run here, exits, or is another version fails the
//     attempt, and nothing was replaced);
//  3. writes the marker StateDir/upgrade.json (phase "exec": the attempt,
//     the versions, the binary, the candidate, a deadline) and re-executes
//     itself into the candidate (syscall.Exec: same pid, same command line,
//     so the same state directory and token file);
//  4. the new process, at start, finds the marker naming its own version:
//     it sets it to "started", keeps the attempt in flight, and registers
//     with the hub, reporting its version (the full report shows the
//     fleetwave-agent instance at the version the agent runs, whatever was
//     recorded: the hub's health gate then sees the new version only when
//     the new build reports it);
//  5. once the hub took that report, it sets the marker to "reported",
//     switches the binaries (the previous one hard-linked to <binary>.prev,
//     then <binary>.new renamed over <binary>: the binary's path always
//     holds a complete build), records the attempt as a success (the
//     instance at the new version), removes the marker and sends the
//     result.
//
// Until step 5 the binary's path still holds the previous build, so a new
// build that does not come up is rolled back whichever way it fails:
//
//   - it exits or crashes: the service manager (systemd Restart=always, or
//     whatever restarts `fleetwave agent`) starts the binary's path again,
//     the previous build; it finds the marker naming another version than
//     its own, fails the attempt permanently (ReasonAgentUpgradeFailed),
//     removes the candidate and the marker, and reports its own version;
//   - it runs but has not reported by the marker's deadline
//     (Config.UpgradeTimeout, and never past the attempt's deadline), or
//     it starts a second time without having reported: it re-executes the
//     previous build, which does the same;
//   - the re-execution itself fails: the attempt fails at once and the
//     agent keeps running the previous build.
//
// Without a service manager an agent whose new build crashed stays down
// until it is started again, then rolls back as above: the probe of step
// 2 keeps builds that do not even start from getting that far.
//
// An agent embedded in another program (Config.SelfUpgrade off: the demo,
// tests) cannot replace itself: it records the target version and says
// so in the result's output.
//
// The built-in installs only the version of an attempt the hub dispatched:
// a downgrade is a BRC change like any other and goes through the hub's
// approval policy; the agent's own rollback only keeps the version it ran.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// BuiltinUpgrade is the command of the fleetwave-agent block's install and
// upgrade actions that the agent runs itself.
const BuiltinUpgrade = "fleetwave:agent-upgrade"

// ProbeEnv names the file a build tried by an upgrading agent writes its
// version to: Run, finding it set, writes fleetwave.Version there and
// returns at once, before it touches the state directory or the hub.
const ProbeEnv = "FLEETWAVE_AGENT_PROBE"

// DefaultUpgradeTimeout is how long a new build has, by default, to start
// and report to the hub before the previous build is restored.
const DefaultUpgradeTimeout = time.Minute

const (
	// probeTimeout bounds the trial run of a new build.
	probeTimeout = 30 * time.Second
	// downloadTimeout bounds the download of a build.
	downloadTimeout = 15 * time.Minute
	// maxBuild caps the size of a build.
	maxBuild = 1 << 30
	// resultMargin keeps the upgrade's deadline this far before the
	// attempt's, so that its result reaches the hub in time.
	resultMargin = 10 * time.Second
	// sha256Header carries the build's sha256 (api.ArtifactSHA256Header).
	sha256Header = "X-Fleetwave-Sha256"
	// markerFile is the upgrade marker in the state directory.
	markerFile = "upgrade.json"
)

// Phases of an upgrade marker.
const (
	phaseExec     = "exec"     // the previous build is about to re-execute into the new one
	phaseStarted  = "started"  // the new build runs and has not reported yet
	phaseReported = "reported" // the new build reported; the binaries are being switched
)

// Seams of the tests.
var (
	execve     = syscall.Exec
	executable = func() (string, error) {
		p, err := os.Executable()
		if err != nil {
			return "", err
		}
		return filepath.EvalSymlinks(p)
	}
)

// errChecksum is a download whose sha256 is not the hub's.
var errChecksum = errors.New("checksum mismatch")

// upgradeMarker is StateDir/upgrade.json: an upgrade handed over to a new
// build that has not completed yet.
type upgradeMarker struct {
	// Attempt is the upgrade's attempt, without its rendered config.
	Attempt   fleetwave.Attempt `json:"attempt"`
	From      string            `json:"from"`
	To        string            `json:"to"`
	Exe       string            `json:"exe"`       // the agent's binary, still the previous build
	Candidate string            `json:"candidate"` // the new build, beside it
	Phase     string            `json:"phase"`
	Deadline  time.Time         `json:"deadline"` // the new build must have reported by then
	Note      string            `json:"note,omitempty"`
}

func markerPath(stateDir string) string { return filepath.Join(stateDir, markerFile) }

func readMarker(stateDir string) (upgradeMarker, error) {
	var m upgradeMarker
	b, err := os.ReadFile(markerPath(stateDir))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", markerPath(stateDir), err)
	}
	if m.Attempt.ID == "" || m.To == "" || m.Exe == "" {
		return m, fmt.Errorf("%s: incomplete upgrade marker", markerPath(stateDir))
	}
	return m, nil
}

func writeMarker(stateDir string, m upgradeMarker) error {
	b, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(markerPath(stateDir), append(b, '\n'), 0o600)
}

func removeMarker(stateDir string) error {
	if err := os.Remove(markerPath(stateDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(stateDir)
}

// isBuiltinUpgrade reports whether att asks for the built-in upgrade.
func isBuiltinUpgrade(att fleetwave.Attempt) bool {
	return strings.TrimSpace(att.Payload.Command) == BuiltinUpgrade
}

// answerProbe answers the trial run of an upgrading agent (ProbeEnv set):
// done says Run must return err at once.
func answerProbe() (done bool, err error) {
	p := os.Getenv(ProbeEnv)
	if p == "" {
		return false, nil
	}
	if err := os.WriteFile(p, []byte(fleetwave.Version+"\n"), 0o600); err != nil {
		return true, fmt.Errorf("answer the upgrade probe: %w", err)
	}
	return true, nil
}

// observedSelf returns the instance as the agent observes it: with
// SelfUpgrade, the fleetwave-agent block is at the version this agent
// runs, whatever an earlier attempt recorded.
func (a *agent) observedSelf(in fleetwave.InstanceStatus) fleetwave.InstanceStatus {
	if a.cfg.SelfUpgrade && in.Block == fleetwave.AgentBlock {
		in.Version = fleetwave.Version
	}
	return in
}

// agentUpgrade runs the built-in upgrade. On success it does not return:
// the process becomes the new build, which completes the attempt. It
// returns the attempt's result when nothing was handed over.
func (a *agent) agentUpgrade(ctx context.Context, att fleetwave.Attempt, log zerolog.Logger) (fleetwave.AttemptResult, bool) {
	res := fleetwave.AttemptResult{AttemptID: att.ID, Fence: att.Fence}
	done := func(class fleetwave.ResultClass, out string) (fleetwave.AttemptResult, bool) {
		res.Class, res.Output = class, out
		if class != fleetwave.ResultSuccess {
			res.ExitCode = -1
		}
		return res, false
	}
	failed := func(format string, args ...any) (fleetwave.AttemptResult, bool) {
		msg := fmt.Sprintf(format, args...)
		log.Warn().Str("reason", fleetwave.ReasonAgentUpgradeFailed).Str("why", msg).Msg("agent upgrade failed")
		res.Reason = fleetwave.ReasonAgentUpgradeFailed
		return done(fleetwave.ResultPermanent, fleetwave.ReasonAgentUpgradeFailed+": "+msg)
	}
	target := att.TargetVersion
	switch {
	case att.Block != fleetwave.AgentBlock:
		return done(fleetwave.ResultPermanent, "fleetwave: "+BuiltinUpgrade+" is the command of block "+fleetwave.AgentBlock+" only")
	case target == "" || target == fleetwave.Version:
		return done(fleetwave.ResultSuccess, "fleetwave: the agent runs "+fleetwave.Version)
	case !a.cfg.SelfUpgrade:
		log.Warn().Str("target_version", target).Str("agent_version", fleetwave.Version).Msg("embedded agent cannot replace itself; version recorded only")
		return done(fleetwave.ResultSuccess, "fleetwave: this agent is embedded in another program and cannot replace itself; version "+target+" recorded, the agent runs "+fleetwave.Version)
	case !validBuildVersion(target):
		return failed("version %q cannot name a build", target)
	}
	exe, err := executable()
	if err != nil {
		return failed("cannot find the agent's binary: %v", err)
	}
	candidate := exe + ".new"
	log = log.With().Str("from", fleetwave.Version).Str("to", target).Logger()
	log.Info().Msg("agent upgrade: downloading the new build")

	if err := a.downloadBuild(ctx, target, candidate); err != nil {
		var he *hubError
		switch {
		case ctx.Err() != nil:
			return res, true
		case errors.As(err, &he) && he.Status == http.StatusNotFound:
			return failed("the hub holds no build of fleetwave %s for %s/%s", target, runtime.GOOS, runtime.GOARCH)
		case errors.As(err, &he) && !retryable(err):
			return failed("the hub refused the download of fleetwave %s: %v", target, err)
		case errors.Is(err, errChecksum):
			return failed("the build of fleetwave %s: %v", target, err)
		case errors.Is(err, fs.ErrPermission):
			return failed("cannot write beside the agent's binary: %v", err)
		}
		log.Warn().Err(err).Msg("agent upgrade: download failed; the hub may retry")
		return done(fleetwave.ResultTransient, fmt.Sprintf("fleetwave: download of fleetwave %s failed: %v", target, err))
	}
	if err := a.probeBuild(ctx, candidate, target, att.Payload.Config); err != nil {
		_ = os.Remove(candidate)
		if ctx.Err() != nil {
			return res, true
		}
		return failed("the build of fleetwave %s failed its trial run: %v", target, err)
	}

	deadline := time.Now().Add(a.upgradeTimeout())
	if !att.Deadline.IsZero() {
		if d := att.Deadline.Add(-resultMargin); d.Before(deadline) {
			deadline = d
		}
	}
	marked := att
	marked.Payload.Config = "" // the rendered config stays out of the marker
	m := upgradeMarker{Attempt: marked, From: fleetwave.Version, To: target, Exe: exe, Candidate: candidate, Phase: phaseExec, Deadline: deadline.UTC()}
	// Nothing else writes the state from here: the process is replaced
	// with a.mu held.
	a.mu.Lock()
	if err := writeMarker(a.cfg.StateDir, m); err != nil {
		a.mu.Unlock()
		_ = os.Remove(candidate)
		log.Error().Err(err).Msg("agent upgrade: marker not written")
		return done(fleetwave.ResultTransient, "fleetwave: the agent could not write its upgrade marker")
	}
	log.Info().Time("deadline", deadline).Msg("agent upgrade: re-executing into the new build")
	err = whileTextBusy(func() error { return execve(candidate, os.Args, os.Environ()) })
	// only when the new build could not be executed
	_ = removeMarker(a.cfg.StateDir)
	a.mu.Unlock()
	_ = os.Remove(candidate)
	return failed("fleetwave %s could not be executed: %v", target, err)
}

func (a *agent) upgradeTimeout() time.Duration {
	if a.cfg.UpgradeTimeout > 0 {
		return a.cfg.UpgradeTimeout
	}
	return DefaultUpgradeTimeout
}

// validBuildVersion accepts the versions the hub can serve (the API's rule).
func validBuildVersion(v string) bool {
	if v == "" || len(v) > 64 || strings.Contains(v, "..") || strings.HasPrefix(v, ".") {
		return false
	}
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '.', r == '_', r == '+', r == '-':
		default:
			return false
		}
	}
	return true
}

// downloadBuild fetches the build of version for this os/arch into dst
// (mode 0755, fsync'd) when its sha256 is the one the hub sent.
func (a *agent) downloadBuild(ctx context.Context, version, dst string) error {
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	u := a.client.nodePath("/artifacts/"+url.PathEscape(version)) + "?" + url.Values{"os": {runtime.GOOS}, "arch": {runtime.GOARCH}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+a.client.token)
	req.Header.Set("User-Agent", "fleetwave-agent/"+fleetwave.Version)
	resp, err := a.client.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	want := strings.ToLower(strings.TrimSpace(resp.Header.Get(sha256Header)))
	if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: the hub sent no sha256", errChecksum)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, maxBuild+1))
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if n > maxBuild {
		return fmt.Errorf("%w: the build is larger than %d bytes", errChecksum, maxBuild)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: sha256 %s, the hub lists %s", errChecksum, got, want)
	}
	if err := f.Chmod(0o755); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	ok = true
	return syncDir(filepath.Dir(dst))
}

// answerError turns a hub's error answer into a *hubError.
func answerError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	he := &hubError{Status: resp.StatusCode}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		he.Code, he.Message = e.Error.Code, e.Error.Message
	} else {
		he.Message = strings.TrimSpace(string(b[:min(len(b), 200)]))
	}
	return he
}

// probeBuild runs candidate with the agent's command line and ProbeEnv: it
// must write want to the probe file and exit 0 within probeTimeout.
func (a *agent) probeBuild(ctx context.Context, candidate, want, config string) error {
	answer := filepath.Join(a.cfg.StateDir, "upgrade-probe")
	_ = os.Remove(answer)
	defer os.Remove(answer)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out := &tailBuffer{max: 1024}
	var cmd *exec.Cmd
	start := func() error { // a Cmd starts once: each try gets its own
		cmd = exec.CommandContext(ctx, candidate, os.Args[1:]...)
		cmd.Env = append(os.Environ(), ProbeEnv+"="+answer)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c := cmd
		cmd.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = pipeGrace
		return cmd.Start()
	}
	if err := whileTextBusy(start); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		if tail := lastLine(redact(out.String(), config)); tail != "" {
			return fmt.Errorf("%v: %s", err, tail)
		}
		return err
	}
	b, err := os.ReadFile(answer)
	if err != nil {
		return errors.New("it exited without saying its version")
	}
	if got := strings.TrimSpace(string(b)); got != want {
		return fmt.Errorf("it is version %q", got)
	}
	return nil
}

// lastLine is the last non-empty line of s, at most 200 bytes.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[len(s)-200:]
	}
	return strings.ToValidUTF8(s, "")
}

// pendingUpgrade is an upgrade the new build completes once it reported.
type pendingUpgrade struct {
	a    *agent
	log  zerolog.Logger
	mu   sync.Mutex
	m    upgradeMarker
	done bool
	stop chan struct{}
}

// resumeUpgrade looks, at start, for an upgrade handed over to a new build
// (the marker). The previous build (or any other version) finding it
// fails the attempt; the new build's first start returns the pending
// upgrade, which reported completes, and watches its deadline.
func (a *agent) resumeUpgrade(ctx context.Context) (*pendingUpgrade, error) {
	m, err := readMarker(a.cfg.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		// it names no attempt to settle: set it aside for the operator
		a.log.Error().Err(err).Str("node", a.cfg.Node).Msg("upgrade marker unreadable; set aside")
		return nil, os.Rename(markerPath(a.cfg.StateDir), markerPath(a.cfg.StateDir)+".bad")
	}
	log := a.log.With().Str("node", a.cfg.Node).Str("attempt", m.Attempt.ID).Str("from", m.From).Str("to", m.To).Str("phase", m.Phase).Logger()
	if m.To != fleetwave.Version {
		why := m.Note
		if why == "" {
			switch m.Phase {
			case phaseExec:
				why = fmt.Sprintf("fleetwave %s did not start", m.To)
			case phaseStarted:
				why = fmt.Sprintf("fleetwave %s stopped before it reported to the hub", m.To)
			default:
				why = fmt.Sprintf("fleetwave %s stopped while its binary replaced the previous one", m.To)
			}
		}
		return nil, a.failUpgrade(m, fmt.Sprintf("%s; the agent runs %s again", why, fleetwave.Version), log)
	}
	u := &pendingUpgrade{a: a, log: log, m: m, stop: make(chan struct{})}
	switch m.Phase {
	case phaseReported:
		// it reported, then stopped before the switch was complete
		u.done = true
		u.commit()
		return nil, nil
	case phaseStarted:
		u.done = true
		u.m.Note = fmt.Sprintf("fleetwave %s started again without having reported to the hub", m.To)
		u.giveBack()
		return nil, nil
	}
	u.m.Phase = phaseStarted
	if err := writeMarker(a.cfg.StateDir, u.m); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if e := a.store.st.Journal[m.Attempt.ID]; e != nil && e.Status == journalDone && !e.Delivered {
		// openStore closed it as lost: it is still running
		e.Status, e.Result, e.DoneAt = journalStarted, nil, time.Time{}
		err = a.store.save()
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	log.Info().Time("deadline", m.Deadline).Msg("agent upgrade: new build started; reporting to the hub")
	go u.watch(ctx)
	return u, nil
}

// watch gives the node back to the previous build when the new one has
// not reported by the marker's deadline.
func (u *pendingUpgrade) watch(ctx context.Context) {
	t := time.NewTimer(time.Until(u.m.Deadline))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-u.stop:
		return
	case <-t.C:
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	u.done = true
	u.m.Note = fmt.Sprintf("fleetwave %s did not report to the hub by %s", u.m.To, u.m.Deadline.Format(time.RFC3339))
	u.giveBack()
}

// reported completes the upgrade once the hub took the new build's
// report. It is nil-safe.
func (u *pendingUpgrade) reported() {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	u.done = true
	close(u.stop)
	u.m.Phase = phaseReported
	if err := writeMarker(u.a.cfg.StateDir, u.m); err != nil {
		u.log.Error().Err(err).Msg("agent upgrade: marker not updated")
	}
	u.commit()
}

// commit switches the binaries and records the attempt's success.
func (u *pendingUpgrade) commit() {
	a, m := u.a, u.m
	if err := switchBuild(m.Exe, m.Candidate); err != nil {
		u.m.Phase = phaseStarted
		u.m.Note = fmt.Sprintf("fleetwave %s reported, but could not replace the previous build: %v", m.To, err)
		u.giveBack()
		return
	}
	a.mu.Lock()
	err := a.settleUpgrade(m.Attempt, true, fmt.Sprintf("fleetwave: agent upgraded from %s to %s; the previous build is kept beside it (.prev)", m.From, m.To))
	a.mu.Unlock()
	if err != nil {
		u.log.Error().Err(err).Msg("state not saved")
		return // the marker stays: the next start completes it
	}
	if err := removeMarker(a.cfg.StateDir); err != nil {
		u.log.Error().Err(err).Msg("agent upgrade: marker not removed")
	}
	u.log.Info().Msg("agent upgraded")
}

// giveBack re-executes the previous build, which fails the attempt. When
// that is impossible the attempt fails here and this build keeps running
// (the binary's path still holds the previous build).
func (u *pendingUpgrade) giveBack() {
	a := u.a
	if err := writeMarker(a.cfg.StateDir, u.m); err != nil {
		u.log.Error().Err(err).Msg("agent upgrade: marker not updated")
	}
	u.log.Warn().Str("why", u.m.Note).Msg("agent upgrade: giving the node back to the previous build")
	a.mu.Lock()
	err := whileTextBusy(func() error { return execve(u.m.Exe, os.Args, os.Environ()) })
	a.mu.Unlock()
	u.log.Error().Err(err).Msg("agent upgrade: the previous build could not be executed")
	if err := a.failUpgrade(u.m, fmt.Sprintf("%s; the previous build could not be executed: %v", u.m.Note, err), u.log); err != nil {
		u.log.Error().Err(err).Msg("state not saved")
	}
}

// failUpgrade records the attempt of marker m as a permanent failure
// (ReasonAgentUpgradeFailed), removes the new build unless it is the
// running one, and removes the marker.
func (a *agent) failUpgrade(m upgradeMarker, why string, log zerolog.Logger) error {
	if running, err := executable(); m.Candidate != "" && (err != nil || running != m.Candidate) {
		_ = os.Remove(m.Candidate)
	}
	a.mu.Lock()
	err := a.settleUpgrade(m.Attempt, false, fleetwave.ReasonAgentUpgradeFailed+": "+why)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	log.Warn().Str("reason", fleetwave.ReasonAgentUpgradeFailed).Str("why", why).Msg("agent upgrade failed; the previous build runs")
	return removeMarker(a.cfg.StateDir)
}

// settleUpgrade records the result of the upgrade attempt att (done, to
// deliver) and, on success, its instance; the caller holds a.mu.
func (a *agent) settleUpgrade(att fleetwave.Attempt, success bool, out string) error {
	now := time.Now().UTC()
	e := a.store.st.Journal[att.ID]
	if e == nil {
		e = &journalEntry{Fence: att.Fence, StartedAt: now}
		a.store.record(att.ID, e)
	}
	res := fleetwave.AttemptResult{AttemptID: att.ID, Fence: e.Fence, Class: fleetwave.ResultSuccess, Output: out}
	if !success {
		res.Class, res.ExitCode, res.Reason = fleetwave.ResultPermanent, -1, fleetwave.ReasonAgentUpgradeFailed
	}
	res.Instance, _ = a.applyInstance(att, success, now)
	e.Status, e.DoneAt, e.Result, e.Delivered = journalDone, now, &res, false
	return a.store.save()
}

// switchBuild puts candidate at exe, keeping the previous build as
// exe.prev (a hard link, else a copy): exe always holds a complete build.
// A candidate already gone was switched before.
func switchBuild(exe, candidate string) error {
	if _, err := os.Lstat(candidate); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	prev := exe + ".prev"
	if _, err := os.Lstat(exe); err == nil {
		if err := os.Remove(prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Link(exe, prev); err != nil {
			if err := copyFile(exe, prev); err != nil {
				return fmt.Errorf("keep the previous build: %w", err)
			}
		}
	}
	if err := os.Rename(candidate, exe); err != nil {
		return err
	}
	return syncDir(filepath.Dir(exe))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// whileTextBusy runs start again while it fails with ETXTBSY, for up to two
// seconds. A build written moments ago can be busy for a while after its
// file was closed: a child this process forked meanwhile (a block's
// command) holds the write descriptor until it executes its own program.
func whileTextBusy(start func() error) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := start()
		if !errors.Is(err, syscall.ETXTBSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
