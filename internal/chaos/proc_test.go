package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process in its own process group, its output appended
// to a log file (restarts append to the same file).
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time

	mu     sync.Mutex
	paused bool
}

func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== chaos: %s start %s %s\n", time.Now().Format(time.RFC3339Nano), filepath.Base(bin), strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if !p.alive() {
		return fmt.Errorf("%s is not running", p.name)
	}
	return syscall.Kill(-p.pid(), sig)
}

func (p *proc) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.paused = true
	return nil
}

func (p *proc) cont() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	return p.signal(syscall.SIGCONT)
}

func (p *proc) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// kill SIGKILLs the process group and waits until the process was reaped.
func (p *proc) kill() {
	if p.alive() { // never signal a reaped pid: it may be reused
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
	}
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// crash SIGKILLs the process alone, as a crash does (the OOM killer, a
// panic-free abort): its children see their parent vanish and finish on
// their own (a git receive-pack completes or aborts cleanly and releases
// its locks; a managed redis-server gets its parent-death signal). It
// returns when the process was reaped.
func (p *proc) crash() {
	if p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
	}
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
}

// children lists the pids whose parent is pid (from /proc).
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// killWithChildren kills a process as a node crash would: the process is
// frozen first (it starts nothing more), its children's process groups
// (an agent runs each command in a group of its own) and the process
// itself are SIGKILLed. It returns when the process was reaped.
func (p *proc) killWithChildren() {
	if p.alive() {
		_ = syscall.Kill(p.pid(), syscall.SIGSTOP)
		// the children first: the stopped parent cannot reap them, so
		// their pids cannot be reused meanwhile
		for _, k := range children(p.pid()) {
			_ = syscall.Kill(-k, syscall.SIGKILL)
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	p.kill()
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
