package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// maxOutput is how much of a command's combined output a result carries
// (the tail).
const maxOutput = 8 << 10

// killGrace is how long a timed-out command's process group has between
// SIGTERM and SIGKILL.
const killGrace = 5 * time.Second

// pipeGrace bounds the wait for output pipes held open by background
// children after the command itself exited (a "start" action may leave a
// daemon behind; the agent does not kill it).
const pipeGrace = 2 * time.Second

// defaultPath is the PATH of block commands.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// execute runs the attempt's command and classifies its outcome. interrupted
// is true when ctx ended the run (the agent is stopping): no result then.
func (a *agent) execute(ctx context.Context, att fleetwave.Attempt, log zerolog.Logger) (res fleetwave.AttemptResult, interrupted bool) {
	if res, ok := a.builtinTakeover(att); ok {
		return res, false
	}
	res = fleetwave.AttemptResult{AttemptID: att.ID, Fence: att.Fence}
	if isBuiltinUpgrade(att) {
		return a.agentUpgrade(ctx, att, log)
	}
	dir := filepath.Join(a.cfg.StateDir, "blocks", att.Block)
	// The rendered config lives beside the instance directory, not in it, so
	// that a block's own files never collide with it.
	cfgPath := filepath.Join(a.cfg.StateDir, "configs", att.Block+".yaml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o700); err != nil {
		log.Error().Err(err).Msg("config dir not created")
		res.Class, res.ExitCode, res.Output = fleetwave.ResultTransient, -1, "agent could not create the config directory"
		return res, false
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Error().Err(err).Msg("instance dir not created")
		res.Class, res.ExitCode, res.Output = fleetwave.ResultTransient, -1, "agent could not create the instance directory"
		return res, false
	}
	if err := writeFileAtomic(cfgPath, []byte(att.Payload.Config), 0o600); err != nil {
		log.Error().Err(err).Msg("config not written")
		res.Class, res.ExitCode, res.Output = fleetwave.ResultTransient, -1, "agent could not write the block config"
		return res, false
	}

	timeout := DefaultTimeout
	if att.Payload.TimeoutSeconds > 0 {
		timeout = time.Duration(att.Payload.TimeoutSeconds) * time.Second
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = dir
	}
	out := &tailBuffer{max: maxOutput}
	cmd := exec.Command(a.cfg.Shell, "-c", att.Payload.Command)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + defaultPath,
		"HOME=" + home,
		"FLEETWAVE_NODE=" + a.cfg.Node,
		"FLEETWAVE_BLOCK=" + att.Block,
		"FLEETWAVE_ACTION=" + att.Action,
		"FLEETWAVE_VERSION=" + att.TargetVersion,
		"FLEETWAVE_GENERATION=" + strconv.FormatInt(att.Generation, 10),
		"FLEETWAVE_ATTEMPT=" + att.ID,
		"FLEETWAVE_CONFIG=" + cfgPath,
		"FLEETWAVE_STATE_DIR=" + dir,
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		log.Error().Err(err).Str("shell", a.cfg.Shell).Msg("command not started")
		res.Class, res.ExitCode, res.Output = fleetwave.ResultTransient, -1, "agent could not start the command: "+err.Error()
		return res, false
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	timedOut := false
	select {
	case waitErr = <-done:
	case <-timer.C:
		timedOut = true
		log.Warn().Int64("timeout_ms", timeout.Milliseconds()).Msg("command timed out; killing its process group")
		killGroup(pgid, done)
	case <-ctx.Done():
		log.Warn().Msg("agent stopping; killing the running command")
		killGroup(pgid, done)
		return res, true
	}

	res.Output = out.String()
	switch {
	case timedOut:
		res.Class, res.ExitCode = fleetwave.ResultTransient, -1
		res.Output = appendNote(res.Output, fmt.Sprintf("fleetwave: command timed out after %s; its process group was killed", timeout))
	case waitErr == nil:
		res.ExitCode = 0
		res.Class = fleetwave.ClassifyExit(0)
	default:
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) && ee.Exited() {
			res.ExitCode = ee.ExitCode()
			res.Class = fleetwave.ClassifyExit(res.ExitCode)
		} else if errors.As(waitErr, &ee) {
			// Killed by a signal from outside the agent.
			res.ExitCode, res.Class = -1, fleetwave.ResultPermanent
			res.Output = appendNote(res.Output, "fleetwave: command ended by "+ee.String())
		} else if errors.Is(waitErr, exec.ErrWaitDelay) {
			// Exited 0 but a background child kept the output open.
			res.ExitCode, res.Class = 0, fleetwave.ResultSuccess
		} else {
			res.ExitCode, res.Class = -1, fleetwave.ResultTransient
			res.Output = appendNote(res.Output, "fleetwave: "+waitErr.Error())
		}
	}
	res.Output = redact(res.Output, att.Payload.Config)
	return res, false
}

// killGroup terminates the process group pgid: SIGTERM, then SIGKILL once
// the leader exited or after killGrace, so children that outlive the shell
// die too. It waits for the leader's Wait to return.
func killGroup(pgid int, done <-chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-done:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
}

func appendNote(out, note string) string {
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + note
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.max {
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		b.truncated = true
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.truncated = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns the tail as valid UTF-8 (a cut may split a character).
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf
	if b.truncated {
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return strings.ToValidUTF8(string(s), "\uFFFD")
}
