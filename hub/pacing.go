package hub

import (
	"context"
	"time"
)

// A paced loop runs one step at a time on three cues: at once when kicked
// on now (a new snapshot, an operator's decision, a request, a lease won,
// a wait that ended); and, every interval or when kicked on soon (the flow
// of reports and results), no sooner than spacing after the end of the
// previous step. (The interval's tick used to run at once: a status write
// of 5 s with an interval of 2 s found a tick waiting when it ended, and
// the writes ran back to back, a core of a 2-core hub at 100,000 nodes.)
// At ten thousand nodes reports and results arrive hundreds of times a
// second: each one used to start a reconcile of the whole fleet or a status
// commit, back to back, and a push then waited behind them.
type pacedLoop struct {
	every time.Duration
	// spacing is the least time between the end of a step and a step
	// started by soon or a tick, given how long that step took.
	spacing func(took time.Duration) time.Duration
	now     <-chan struct{}
	soon    <-chan struct{}
	step    func(context.Context)
}

// pacer decides when a step kicked on soon may run. It reads no clock.
type pacer struct {
	spacing func(took time.Duration) time.Duration
	lastEnd time.Time
	took    time.Duration
}

// wait returns how long a step asked for on soon at t must wait (<= 0:
// run now).
func (p *pacer) wait(t time.Time) time.Duration {
	if p.lastEnd.IsZero() {
		return 0
	}
	return p.lastEnd.Add(p.spacing(p.took)).Sub(t)
}

// ran records a step that ran from start to end.
func (p *pacer) ran(start, end time.Time) {
	p.lastEnd, p.took = end, end.Sub(start)
}

func (h *Hub) runPaced(ctx context.Context, l pacedLoop) {
	t := time.NewTicker(l.every)
	defer t.Stop()
	p := pacer{spacing: l.spacing}
	var later *time.Timer // armed by soon or a tick while the spacing lasts
	var laterC <-chan time.Time
	// wait says whether a step asked for now must wait for the spacing
	// (and arms later for it)
	wait := func() bool {
		w := p.wait(time.Now())
		if w > 0 && later == nil {
			later = time.NewTimer(w)
			laterC = later.C
		}
		return w > 0
	}
	for {
		select {
		case <-ctx.Done():
			if later != nil {
				later.Stop()
			}
			return
		case <-l.now:
		case <-laterC:
		case <-t.C:
			if wait() {
				continue
			}
		case <-l.soon:
			if wait() {
				continue
			}
		}
		if later != nil { // this step covers what soon asked for
			later.Stop()
			later, laterC = nil, nil
		}
		start := time.Now()
		h.runStep(ctx, l.step)
		p.ran(start, time.Now())
	}
}

// reconcileSpacing: a reconcile asked for by observations waits at least
// as long as the previous one took (the planner gets at most half of a
// core from them) and at least a second (or the reconcile interval, when
// shorter).
func (h *Hub) reconcileSpacing(took time.Duration) time.Duration {
	return max(took, min(time.Second, h.cfg.ReconcileInterval.D()))
}

// statusSpacing: results are written at most every status.interval, and
// no sooner than the previous status write took (building the documents,
// committing and pushing them): at 100,000 nodes a write took longer than
// the interval, and the writes, back to back, took a quarter of the hub's
// CPU. What an operator or a claimed request waits for is written at once
// (statusNow).
func (h *Hub) statusSpacing(took time.Duration) time.Duration {
	return max(took, h.cfg.Status.Interval.D())
}
