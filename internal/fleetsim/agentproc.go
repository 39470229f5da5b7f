package fleetsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
)

// The probe pushes' node runs its agent in a process of its own
// (`fleetwave dev probe-agent`), as the API's reads do (Probe): in the
// simulator's process the agent's answer waited for the scheduling of the
// 100,000 other simulated agents, and push -> first dispatch counted it as
// the hub's (attempt 120: 350 ms between the hub's written answer and the
// simulated agent's read of it, 1-18 ms for the other probes). A real
// agent runs on its own node.

// AgentEvent is one line of `fleetwave dev probe-agent`: its agents all
// registered, an attempt received, or a result posted (Error empty: the
// hub took it). An attempt is written without its payload.
type AgentEvent struct {
	Event   string                `json:"event"` // "registered", "attempt" or "result"
	Attempt *fleetwave.Attempt    `json:"attempt,omitempty"`
	Class   fleetwave.ResultClass `json:"class,omitempty"`
	Error   string                `json:"error,omitempty"`
	At      time.Time             `json:"at"`
}

// RunAgents runs opts' agents until ctx ends, writing an AgentEvent line
// to w once they are all registered and for each attempt and result
// (opts.OnAttempt and OnResult are its own). It returns nil when ctx
// ended, or the error writing to w.
func RunAgents(ctx context.Context, opts Options, w io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	var werr error
	emit := func(ev AgentEvent) {
		mu.Lock()
		defer mu.Unlock()
		if werr == nil {
			werr = enc.Encode(ev)
		}
	}
	opts.OnAttempt = func(a fleetwave.Attempt, at time.Time) {
		emit(attemptEvent("attempt", a, at))
	}
	opts.OnResult = func(a fleetwave.Attempt, res fleetwave.AttemptResult, err error, at time.Time) {
		ev := attemptEvent("result", a, at)
		ev.Class = res.Class
		if err != nil {
			ev.Error = err.Error()
		}
		emit(ev)
	}
	f, err := New(opts)
	if err != nil {
		return err
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for f.Stats().Registered < int64(len(opts.Nodes)) {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
		}
		emit(AgentEvent{Event: "registered", At: time.Now()})
	}()
	_ = f.Run(fctx)
	mu.Lock()
	defer mu.Unlock()
	return werr
}

// attemptEvent is the event of a at at, without a's payload (a config
// may hold anything).
func attemptEvent(kind string, a fleetwave.Attempt, at time.Time) AgentEvent {
	a.Payload = fleetwave.AttemptPayload{}
	return AgentEvent{Event: kind, Attempt: &a, At: at}
}

// agentProc is a running `fleetwave dev probe-agent`, its events handed to
// the scenario's tracker as the simulator's own agents' are.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{} // its output is read to the end

	mu         sync.Mutex
	registered bool
	successes  map[string]int // item -> success results the hub took
	malformed  int            // read's own until done is closed
}

// startAgentProc runs `bin dev probe-agent` for node (its token written
// to a file of dir only the owner reads), its attempts and results passed
// to onAttempt and onResult.
func startAgentProc(ctx context.Context, bin, dir, hubURL string, node Node, duration, wait, reportEvery time.Duration, seed int64,
	onAttempt func(fleetwave.Attempt, time.Time), onResult func(fleetwave.Attempt, fleetwave.AttemptResult, error, time.Time)) (*agentProc, error) {
	tokens := filepath.Join(dir, "probe-agent.tokens")
	if err := os.WriteFile(tokens, []byte(node.ID+" "+node.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd, out, err := startChild(ctx, "the probe's agent", bin, "dev", "probe-agent", "--hub", hubURL, "--tokens", tokens,
		"--duration", duration.String(), "--wait", wait.String(), "--report-every", reportEvery.String(), "--seed", fmt.Sprint(seed))
	if err != nil {
		return nil, err
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{}), successes: map[string]int{}}
	go func() {
		defer close(p.done)
		p.read(out, onAttempt, onResult)
	}()
	return p, nil
}

// read hands each event of r to the callbacks until r ends.
func (p *agentProc) read(r io.Reader, onAttempt func(fleetwave.Attempt, time.Time), onResult func(fleetwave.Attempt, fleetwave.AttemptResult, error, time.Time)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var ev AgentEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || (ev.Event != "registered" && ev.Attempt == nil) {
			p.malformed++
			continue
		}
		switch ev.Event {
		case "registered":
			p.mu.Lock()
			p.registered = true
			p.mu.Unlock()
		case "attempt":
			onAttempt(*ev.Attempt, ev.At)
		case "result":
			var err error
			if ev.Error != "" {
				err = fmt.Errorf("%s", ev.Error)
			} else if ev.Class == fleetwave.ResultSuccess {
				p.mu.Lock()
				p.successes[ev.Attempt.Item]++
				p.mu.Unlock()
			}
			onResult(*ev.Attempt, fleetwave.AttemptResult{AttemptID: ev.Attempt.ID, Class: ev.Class}, err, ev.At)
		default:
			p.malformed++
		}
	}
}

// ready reports whether the agents all registered.
func (p *agentProc) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered
}

// addSuccesses adds the success results the hub took from these agents
// to succ (item -> count).
func (p *agentProc) addSuccesses(succ map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for item, n := range p.successes {
		succ[item] += n
	}
}

// stop ends the agent process and waits for its last events.
func (p *agentProc) stop() error {
	err := stopChild(p.cmd, p.done)
	if p.malformed > 0 {
		return fmt.Errorf("probe's agent: %d lines malformed", p.malformed)
	}
	if err != nil {
		return fmt.Errorf("probe's agent: %w", err)
	}
	return nil
}
