package fleetsim

import (
	"fmt"
	"testing"
	"time"
)

// TestSplitWaves: three waves of four attempts, received over 40 ms each,
// answered 500-590 ms later, the next wave 10 ms after a wave's last
// result. It fails when a wave is cut inside its spread, or a figure is
// counted from the wrong end.
func TestSplitWaves(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	received, answered := map[string]time.Time{}, map[string]time.Time{}
	start := t0
	var lastEnd, third time.Time
	for w := range 3 {
		third = start
		for i := range 4 {
			id := fmt.Sprintf("r.%d.1", w*4+i)
			received[id] = start.Add(ms(10 * i))                // spread 30 ms
			answered[id] = start.Add(ms(10*i + 500 + 20*(w+1))) // tail: 30 + 20(w+1) ms
			lastEnd = answered[id]
		}
		start = lastEnd.Add(ms(10 * (w + 1))) // gaps 10, 20 ms
	}
	// an attempt of the third wave whose result never came counts by its
	// receipt: that wave's spread grows to 45 ms
	received["late"] = third.Add(ms(45))
	w := splitWaves(received, answered, ms(500), nil)
	want := Waves{Count: 3, Spread: ms(30), SpreadMax: ms(45), Tail: ms(70), TailMax: ms(90), Gap: ms(20), GapMax: ms(20)}
	if w != want {
		t.Fatalf("waves %+v, want %+v", w, want)
	}
	if got := splitWaves(nil, nil, ms(500), nil); got.Count != 0 {
		t.Fatalf("no attempts: %+v", got)
	}
	// the hub starts the next wave as it commits the last result, before
	// that result's answer reaches its agent: the report shows the gap
	// negative, not as a histogram's "above its largest bound"
	w = splitWaves(map[string]time.Time{"a": t0, "b": t0.Add(ms(580))},
		map[string]time.Time{"a": t0.Add(ms(600)), "b": t0.Add(ms(1100))}, ms(500), nil)
	if w.Count != 2 || w.Gap != -ms(20) {
		t.Fatalf("a next wave received 20 ms before the last answer: %+v, want 2 waves and a gap of -20ms", w)
	}
	// by the rollout's own numbers: a wave handed out over 400 ms, more
	// than half the action, is one wave, not two, and a retry received
	// after the next wave began stays in its own (spread 700 ms, its
	// answer the wave's last); an attempt not numbered goes by its receipt
	waves := map[string]int{"w1a": 1, "w1b": 1, "w1retry": 1, "w2a": 2}
	received = map[string]time.Time{"w1a": t0, "w1b": t0.Add(ms(400)), "w2a": t0.Add(ms(1000)),
		"w1retry": t0.Add(ms(700)), "other": t0.Add(ms(3000))}
	answered = map[string]time.Time{"w1a": t0.Add(ms(600)), "w1b": t0.Add(ms(950)), "w2a": t0.Add(ms(1600)),
		"w1retry": t0.Add(ms(1300)), "other": t0.Add(ms(3600))}
	w = splitWaves(received, answered, ms(500), func(id string) int { return waves[id] })
	want = Waves{Count: 3, Spread: ms(0), SpreadMax: ms(700), Tail: ms(100), TailMax: ms(800), Gap: ms(1400), GapMax: ms(1400)}
	if w != want {
		t.Fatalf("numbered waves %+v, want %+v", w, want)
	}
	row := Row{Unit: unitDuration, Signed: true}
	if got := row.format(-0.36); got != "-360 ms" {
		t.Fatalf("signed -0.36 s printed %q", got)
	}
}
