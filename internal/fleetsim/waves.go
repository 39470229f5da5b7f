package fleetsim

import (
	"slices"
	"time"
)

// Waves splits a rollout's makespan into its waves, as the fleet saw them:
// where the time above the ideal goes. Every figure is a median over the
// waves, with the largest beside it.
type Waves struct {
	Count int
	// Spread is a wave's first attempt received -> its last one received:
	// how long the hub took to hand the whole wave out.
	Spread, SpreadMax time.Duration
	// Tail is a wave's first attempt received -> its last result answered,
	// less the action's duration: the spread plus the slowest result's
	// way back (negative if every result came early, with a jittered
	// action).
	Tail, TailMax time.Duration
	// Gap is a wave's last result answered -> the next wave's first
	// attempt received: the hub starting the next wave. It can be
	// negative: the hub starts the next wave as it commits the last
	// result, before that result's answer reaches its agent.
	Gap, GapMax time.Duration
}

// splitWaves groups the attempts into waves and times them. waveOf, when
// not nil, gives an attempt's wave as the rollout numbered it (0: not
// known): the attempts of one wave are grouped, whenever they were
// received (a retry in its wave, a hand-out that took seconds). Attempts
// it does not know, or all without it, are grouped by when their agents
// received them: a wave starts with the first attempt received at least
// half an action's duration after the previous wave's first (no wave
// starts before the one before it has run), which cuts a wave whose
// hand-out took longer in two. received and answered are keyed by
// attempt id; an attempt without an answer counts by its receipt only.
func splitWaves(received, answered map[string]time.Time, action time.Duration, waveOf func(attempt string) int) Waves {
	type att struct {
		in, out time.Time
		wave    int
	}
	all := make([]att, 0, len(received))
	for id, in := range received {
		a := att{in: in, out: answered[id]}
		if waveOf != nil {
			a.wave = waveOf(id)
		}
		all = append(all, a)
	}
	if len(all) == 0 {
		return Waves{}
	}
	slices.SortFunc(all, func(a, b att) int { return a.in.Compare(b.in) })
	type wave struct{ first, last, done time.Time }
	// in the order of their first attempts, as all are taken by receipt
	var ws []wave
	numbered := map[int]int{} // the rollout's wave -> its index in ws
	for _, a := range all {
		var w *wave
		if i, ok := numbered[a.wave]; ok && a.wave > 0 {
			w = &ws[i]
		} else {
			if a.wave > 0 || len(ws) == 0 || a.in.Sub(ws[len(ws)-1].first) >= action/2 {
				ws = append(ws, wave{first: a.in})
				if a.wave > 0 {
					numbered[a.wave] = len(ws) - 1
				}
			}
			w = &ws[len(ws)-1]
		}
		w.last = a.in // sorted by receipt: the latest so far
		if a.out.After(w.done) {
			w.done = a.out
		}
	}
	var spread, tail, gap []time.Duration
	for i, w := range ws {
		spread = append(spread, w.last.Sub(w.first))
		if !w.done.IsZero() {
			tail = append(tail, w.done.Sub(w.first)-action)
			if i+1 < len(ws) {
				gap = append(gap, ws[i+1].first.Sub(w.done))
			}
		}
	}
	return Waves{Count: len(ws),
		Spread: median(spread), SpreadMax: maxOf(spread),
		Tail: median(tail), TailMax: maxOf(tail),
		Gap: median(gap), GapMax: maxOf(gap)}
}

func maxOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}
