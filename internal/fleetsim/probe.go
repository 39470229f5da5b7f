package fleetsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
)

// The API latency of the scale report is read by a process of its own
// (`fleetwave dev probe`): read from the simulator's process, each request
// also waited for the thousands of simulated agents' goroutines, and the
// report counted the simulator's scheduling as the hub's latency (at
// 10,000 nodes a p50 of 17 ms against 2.3 ms read by curl beside it).

// ProbeSample is one read of Probe, written as a JSON line.
type ProbeSample struct {
	// Path is "summary" (GET /api/v1/summary) or "rollout" (GET
	// /api/v1/rollouts/{id}, its first page), read as the console reads
	// them (accepting an answer up to 2 s old when the fresh read is
	// slow: Cache-Control max-stale), or "summary-plain" and
	// "rollout-plain", the same read as a client that says nothing, or
	// "healthz" (GET /healthz, which answers "ok" and reads nothing: the
	// baseline the machine and the hub's HTTP server set, read beside the
	// others).
	Path string `json:"path"`
	// Seconds is the read's latency, from the request to the body's end.
	Seconds float64 `json:"seconds"`
	// Error says why the read failed; empty when it was answered 200.
	Error string `json:"error,omitempty"`
	// Status is the rollout's status, for "rollout".
	Status fleetwave.RolloutStatus `json:"status,omitempty"`
	// At is when the read started.
	At time.Time `json:"at"`
}

// Probe reads the summary and the rollout's page in turn, each as the
// console does and as a plain client, then /healthz, interval apart, until ctx ends, and
// writes every read to w as a JSON line. Until the rollout exists, as
// a console that is open when its push lands, it reads the summary only:
// a read of the rollout's page answered 404 before the page was ever
// found is no sample. It returns nil when ctx ended, or the error
// writing to w.
func Probe(ctx context.Context, hubURL, rollout string, interval time.Duration, w io.Writer) error {
	c := &http.Client{Timeout: 30 * time.Second}
	enc := json.NewEncoder(w)
	found := false // the rollout's page answered once
	for ctx.Err() == nil {
		for _, console := range []bool{true, false} {
			at := time.Now()
			d, err := timedGet(ctx, c, hubURL+"/api/v1/summary", console, nil)
			if ctx.Err() != nil {
				return nil // cancelled mid-read: not a sample
			}
			if err := enc.Encode(sampleOf(probePath("summary", console), at, d, err, "")); err != nil {
				return err
			}
			var page struct {
				Rollout fleetwave.Rollout `json:"rollout"`
			}
			at = time.Now()
			d, err = timedGet(ctx, c, hubURL+"/api/v1/rollouts/"+url.PathEscape(rollout), console, &page)
			if ctx.Err() != nil {
				return nil
			}
			var nf notFound
			if !found && errors.As(err, &nf) {
				continue // not created yet
			}
			found = found || err == nil
			if err := enc.Encode(sampleOf(probePath("rollout", console), at, d, err, page.Rollout.Status)); err != nil {
				return err
			}
		}
		at := time.Now()
		d, err := timedGet(ctx, c, hubURL+"/healthz", false, nil)
		if ctx.Err() != nil {
			return nil
		}
		if err := enc.Encode(sampleOf("healthz", at, d, err, "")); err != nil {
			return err
		}
		_ = sleep(ctx, interval)
	}
	return nil
}

// probePath is the sample's path of a read of what, as the console reads
// it or as a plain client.
func probePath(what string, console bool) string {
	if console {
		return what
	}
	return what + "-plain"
}

func sampleOf(path string, at time.Time, d time.Duration, err error, st fleetwave.RolloutStatus) ProbeSample {
	s := ProbeSample{Path: path, Seconds: d.Seconds(), Status: st, At: at}
	if err != nil {
		s.Seconds, s.Error = 0, err.Error()
	}
	return s
}

// probeSamples gathers the samples of a probe process. The reads counted
// are those started at or after from, once it is set (countFrom); the
// earlier ones keep the hub's answers warm, as an open console's do.
type probeSamples struct {
	mu               sync.Mutex
	from             time.Time
	samples          []ProbeSample // answered or failed, in order
	last             fleetwave.RolloutStatus
	malformed, lines int
}

// countFrom counts the reads started at t or later.
func (p *probeSamples) countFrom(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.from = t
}

// probePaths are the paths of a probe's samples.
var probePaths = []string{"summary", "summary-plain", "rollout", "rollout-plain", "healthz"}

func (p *probeSamples) add(s ProbeSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines++
	if !slices.Contains(probePaths, s.Path) || s.At.IsZero() {
		p.malformed++
		return
	}
	p.samples = append(p.samples, s)
	if s.Error == "" && strings.HasPrefix(s.Path, "rollout") {
		p.last = s.Status
	}
}

// state is the rollout's status as the probe last read it.
func (p *probeSamples) state() fleetwave.RolloutStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// read adds the JSON lines of r until it ends.
func (p *probeSamples) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var s ProbeSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			s = ProbeSample{}
		}
		p.add(s)
	}
}

// latency returns the figures of the reads of path.
func (p *probeSamples) latency(path string) Latency {
	p.mu.Lock()
	defer p.mu.Unlock()
	var took []time.Duration
	errs := 0
	for _, s := range p.samples {
		switch {
		case s.Path != path || s.At.Before(p.from):
		case s.Error != "":
			errs++
		default:
			took = append(took, time.Duration(s.Seconds*float64(time.Second)))
		}
	}
	return latencyOf(took, errs)
}

// probeProc is a running `fleetwave dev probe`.
type probeProc struct {
	cmd     *exec.Cmd
	samples *probeSamples
	done    chan struct{} // its output is read to the end
}

// startProbe runs `bin dev probe` against the hub's rollout.
func startProbe(ctx context.Context, bin, hubURL, rollout string) (*probeProc, error) {
	cmd, out, err := startChild(ctx, "the API probe", bin, "dev", "probe", "--hub", hubURL, "--rollout", rollout, "--interval", "200ms")
	if err != nil {
		return nil, err
	}
	p := &probeProc{cmd: cmd, samples: &probeSamples{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.samples.read(out)
	}()
	return p, nil
}

// startChild starts bin with args, what naming it in errors: interrupted
// when ctx ends, its standard error the caller's, its standard output to
// read from out.
func startChild(ctx context.Context, what, bin string, args ...string) (*exec.Cmd, io.Reader, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", what, err)
	}
	return cmd, out, nil
}

// stopChild interrupts cmd (started by startChild), waits until its
// output was read to the end (done closed) and for its exit.
func stopChild(cmd *exec.Cmd, done <-chan struct{}) error {
	_ = cmd.Process.Signal(os.Interrupt)
	<-done
	return cmd.Wait()
}

// stop ends the probe and waits for its last samples.
func (p *probeProc) stop() error {
	err := stopChild(p.cmd, p.done)
	if p.samples.malformed > 0 {
		return fmt.Errorf("API probe: %d of %d lines malformed", p.samples.malformed, p.samples.lines)
	}
	if err != nil {
		return fmt.Errorf("API probe: %w", err)
	}
	return nil
}
