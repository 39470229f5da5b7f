package agent

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave"
)

// Detecting block instances installed by hand (docs/contract.md#vocabulary).
//
// The hub hands the agent the detect commands of the blocks whose BRCs
// target its node (GET /api/v1/agent/nodes/{node}/detect). The agent runs
// them at registration and before every full report, for each block it
// does not manage itself (one that is not in state.json), with Shell -c in
// StateDir, in their own process group, with PATH, HOME, FLEETWAVE_NODE,
// FLEETWAVE_BLOCK, FLEETWAVE_ACTION=detect and FLEETWAVE_STATE_DIR (the
// block's instance directory, which may not exist). The protocol:
//
//	exit 0   the block is installed; the first line of stdout is its
//	         version (control characters dropped, at most 128 bytes)
//	exit 1   the block is not installed
//	other    unknown (another exit code, a timeout, a command that does
//	         not start): what the last answer said stands
//
// A block an attempt is working on is not detected meanwhile (what the
// last answer said stands), and an answer given while an attempt on the
// block started is dropped: a half-done install is no install by hand.
//
// An instance found is reported with managed_by cli and state installed,
// so BRCs skip it (cli_managed) until it is taken over. Report.Detected
// lists the blocks of the hub's list the report accounts for: the ones the
// agent manages and the ones whose command answered (exit 0 or 1); the
// hub does not install a block with a detect command on a node whose
// report does not account for it.
//
// A takeover attempt whose payload has no command is the built-in
// takeover: it succeeds when the agent manages the instance or detected
// it, and records it in state.json with the attempt's owner (managed_by),
// keeping the detected version; otherwise it fails (permanent), as
// nothing is there to take over. A block's own takeover command runs as
// any action, and its instance starts from the detected one too.

// maxDetectVersion caps the version a detect command prints.
const maxDetectVersion = 128

// registerDetectWait bounds how long the agent waits for the hub's detect
// commands before it registers (the hub answers 503 until it has read its
// config repository); it then registers without and detects with its
// next report.
const registerDetectWait = 10 * time.Second

// detector holds the hub's detect commands and what they found.
type detector struct {
	run sync.Mutex // one detection at a time

	mu       sync.Mutex
	commands []fleetwave.DetectCommand
	found    map[string]fleetwave.InstanceStatus // by block: installed by hand
	answered map[string]bool                     // blocks whose command answered
	// busy counts the attempts running per block, starts the attempts
	// started: a block an attempt works on is not detected (a half-done
	// install is no install by hand), and an answer given while an
	// attempt started is dropped.
	busy   map[string]int
	starts map[string]int64
}

func (c *client) detectCommands(ctx context.Context) ([]fleetwave.DetectCommand, error) {
	var out struct {
		Blocks []fleetwave.DetectCommand `json:"blocks"`
	}
	if err := c.do(ctx, http.MethodGet, c.nodePath("/detect"), nil, &out); err != nil {
		return nil, err
	}
	return out.Blocks, nil
}

// detect fetches the hub's detect commands and runs them. patient (at
// registration) retries the fetch for up to registerDetectWait; otherwise
// a failed fetch keeps the last list.
func (a *agent) detect(ctx context.Context, patient bool) {
	d := &a.det
	d.run.Lock()
	defer d.run.Unlock()
	var cmds []fleetwave.DetectCommand
	fetch := func(ctx context.Context) func() error {
		return func() error {
			var err error
			cmds, err = a.client.detectCommands(ctx)
			return err
		}
	}
	var err error
	if patient {
		wctx, cancel := context.WithTimeout(ctx, registerDetectWait)
		err = a.retry(wctx, "detect", fetch(wctx))
		cancel()
	} else {
		err = fetch(ctx)()
	}
	var he *hubError
	switch {
	case ctx.Err() != nil:
		return
	case errors.As(err, &he) && he.Status == http.StatusNotFound:
		cmds = nil // a hub without detect commands
	case err != nil:
		a.log.Warn().Err(err).Str("node", a.cfg.Node).Msg("detect commands not fetched; keeping the last ones")
		d.mu.Lock()
		cmds = slices.Clone(d.commands)
		d.mu.Unlock()
	}

	a.mu.Lock()
	managed := map[string]bool{}
	for _, c := range cmds {
		if _, ok := a.store.st.Instances[c.Block]; ok {
			managed[c.Block] = true
		}
	}
	a.mu.Unlock()
	d.mu.Lock()
	starts := maps.Clone(d.starts)
	busy := map[string]bool{}
	for b, n := range d.busy {
		busy[b] = n > 0
	}
	d.mu.Unlock()

	type answer struct {
		installed bool
		version   string
	}
	answers := map[string]answer{}
	for _, c := range cmds {
		if ctx.Err() != nil {
			return
		}
		if managed[c.Block] || busy[c.Block] || !blockName.MatchString(c.Block) || c.Command == "" {
			continue
		}
		installed, version, ok := a.runDetect(ctx, c)
		if ok {
			answers[c.Block] = answer{installed, version}
		}
	}

	now := time.Now().UTC()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.commands = cmds
	listed := map[string]bool{}
	for _, c := range cmds {
		listed[c.Block] = true
	}
	if d.found == nil {
		d.found = map[string]fleetwave.InstanceStatus{}
	}
	for b := range d.found {
		if !listed[b] || managed[b] {
			delete(d.found, b)
		}
	}
	answered := map[string]bool{}
	for b := range busy {
		if listed[b] && d.answered[b] {
			answered[b] = true // not run: what it said stands
		}
	}
	d.answered = answered
	for b, ans := range answers {
		if d.starts[b] != starts[b] || d.busy[b] > 0 {
			continue // an attempt started meanwhile: unknown
		}
		d.answered[b] = true
		if !ans.installed {
			delete(d.found, b)
			continue
		}
		in, seen := d.found[b]
		if !seen || in.Version != ans.version {
			in = fleetwave.InstanceStatus{Block: b, Version: ans.version, State: fleetwave.StateInstalled,
				ManagedBy: fleetwave.ManagedByCLI, UpdatedAt: now}
			a.log.Info().Str("node", a.cfg.Node).Str("block", b).Str("version", ans.version).Msg("instance installed by hand detected")
		}
		d.found[b] = in
	}
}

// runDetect runs one detect command; ok is false when its answer is
// unknown.
func (a *agent) runDetect(ctx context.Context, c fleetwave.DetectCommand) (installed bool, version string, ok bool) {
	log := a.log.With().Str("node", a.cfg.Node).Str("block", c.Block).Logger()
	timeout := fleetwave.DefaultDetectTimeout
	if c.TimeoutSeconds > 0 {
		timeout = time.Duration(c.TimeoutSeconds) * time.Second
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = a.cfg.StateDir
	}
	stdout := &headBuffer{max: 4 << 10}
	cmd := exec.Command(a.cfg.Shell, "-c", c.Command)
	cmd.Dir = a.cfg.StateDir
	cmd.Env = []string{
		"PATH=" + defaultPath,
		"HOME=" + home,
		"FLEETWAVE_NODE=" + a.cfg.Node,
		"FLEETWAVE_BLOCK=" + c.Block,
		"FLEETWAVE_ACTION=detect",
		"FLEETWAVE_STATE_DIR=" + filepath.Join(a.cfg.StateDir, "blocks", c.Block),
	}
	cmd.Stdout = stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		log.Warn().Err(err).Msg("detect command not started")
		return false, "", false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		killGroup(cmd.Process.Pid, done)
		log.Warn().Int64("timeout_ms", timeout.Milliseconds()).Msg("detect command timed out; its answer is unknown")
		return false, "", false
	case <-ctx.Done():
		killGroup(cmd.Process.Pid, done)
		return false, "", false
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		log.Warn().Err(err).Msg("detect command failed; its answer is unknown")
		return false, "", false
	}
	switch code {
	case 0:
		return true, detectedVersion(stdout.Bytes()), true
	case 1:
		return false, "", true
	}
	log.Warn().Int("exit_code", code).Msg("detect command exited neither 0 nor 1; its answer is unknown")
	return false, "", false
}

// detectedVersion is the first line of a detect command's stdout, without
// surrounding space and control characters, cut to maxDetectVersion bytes.
func detectedVersion(out []byte) string {
	line, _, _ := bytes.Cut(out, []byte("\n"))
	v := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, string(line))
	v = strings.TrimSpace(v)
	for len(v) > maxDetectVersion {
		_, size := utf8.DecodeLastRuneInString(v)
		v = v[:len(v)-size]
	}
	return v
}

// detectedInto adds to a full report what detection found: the instances
// installed by hand of blocks the agent does not manage, and the blocks
// the report accounts for (Report.Detected). The caller holds a.mu.
func (a *agent) detectedInto(r *fleetwave.Report) {
	d := &a.det
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.commands {
		_, managed := a.store.st.Instances[c.Block]
		if !managed && !d.answered[c.Block] {
			continue
		}
		if !slices.Contains(r.Detected, c.Block) {
			r.Detected = append(r.Detected, c.Block)
		}
	}
	slices.Sort(r.Detected)
	for b, in := range d.found {
		if _, managed := a.store.st.Instances[b]; !managed {
			r.Instances = append(r.Instances, in)
		}
	}
	slices.SortFunc(r.Instances, func(x, y fleetwave.InstanceStatus) int { return strings.Compare(x.Block, y.Block) })
}

// detectedInstance returns the instance of block installed by hand, as
// last detected.
func (a *agent) detectedInstance(block string) (fleetwave.InstanceStatus, bool) {
	a.det.mu.Lock()
	defer a.det.mu.Unlock()
	in, ok := a.det.found[block]
	return in, ok
}

// adoptDetected gives a successful takeover of an instance the agent does
// not manage yet the instance it detected as its starting point (its
// version and state stay; the attempt sets the owner and generation). The
// caller holds a.mu.
func (a *agent) adoptDetected(att fleetwave.Attempt, success bool, cur fleetwave.InstanceStatus, exists bool) (fleetwave.InstanceStatus, bool) {
	a.det.mu.Lock()
	if a.det.busy[att.Block] > 0 {
		a.det.busy[att.Block]-- // the attempt ran (execute counted it)
	}
	a.det.mu.Unlock()
	if exists || !success || att.Action != fleetwave.ActionTakeover {
		return cur, exists
	}
	if in, ok := a.detectedInstance(att.Block); ok {
		in.ManagedBy = ""
		return in, true
	}
	return cur, exists
}

// builtinTakeover marks the attempt's block busy for detection (until
// adoptDetected) and runs the built-in takeover (a takeover attempt
// without a command); ok is false for any other attempt.
func (a *agent) builtinTakeover(att fleetwave.Attempt) (res fleetwave.AttemptResult, ok bool) {
	a.det.mu.Lock()
	if a.det.busy == nil {
		a.det.busy, a.det.starts = map[string]int{}, map[string]int64{}
	}
	a.det.busy[att.Block]++
	a.det.starts[att.Block]++
	a.det.mu.Unlock()
	if att.Action != fleetwave.ActionTakeover || strings.TrimSpace(att.Payload.Command) != "" {
		return res, false
	}
	res = fleetwave.AttemptResult{AttemptID: att.ID, Fence: att.Fence}
	a.mu.Lock()
	_, managed := a.store.st.Instances[att.Block]
	a.mu.Unlock()
	in, found := a.detectedInstance(att.Block)
	switch {
	case managed:
		res.Class, res.Output = fleetwave.ResultSuccess, "fleetwave: built-in takeover: the instance is already managed by fleetwave"
	case found:
		res.Class, res.Output = fleetwave.ResultSuccess, "fleetwave: built-in takeover: the instance installed by hand (version "+in.Version+") is now managed by fleetwave"
	default:
		res.Class, res.ExitCode = fleetwave.ResultPermanent, -1
		res.Output = "fleetwave: built-in takeover: nothing to take over: no instance of block " + att.Block + " was detected on this node"
	}
	return res, true
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *headBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}
