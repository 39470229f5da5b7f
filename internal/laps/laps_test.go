package laps

import (
	"strings"
	"testing"
	"time"
)

// TestStepsInOrderEachOnce: laps come out in the order first timed, a step
// timed again adds up, steps taken from elsewhere keep their times and the
// next lap starts after them, and a nil Laps times nothing.
func TestStepsInOrderEachOnce(t *testing.T) {
	l := Begin(time.Now().Add(-time.Second))
	l.Lap("fetch")
	if got := l.Total("fetch"); got < time.Second {
		t.Fatalf("fetch = %v, want the second since the start", got)
	}
	l.Add("push", 3*time.Millisecond)
	l.Add("push", 4*time.Millisecond)
	l.Took([]Step{{"edit", time.Hour}, {"push", time.Millisecond}})
	l.Lap("ack")
	var names []string
	for _, s := range l.Steps {
		names = append(names, s.Name)
	}
	if want := "fetch push edit ack"; strings.Join(names, " ") != want {
		t.Fatalf("steps %v, want %s", names, want)
	}
	if got := l.Total("push"); got != 8*time.Millisecond {
		t.Fatalf("push = %v, want 8ms", got)
	}
	if got := l.Total("ack"); got >= time.Second {
		t.Fatalf("ack = %v: the lap counted the steps taken from elsewhere", got)
	}
	var none *Laps
	none.Lap("x")
	none.Add("x", time.Second)
	none.Took([]Step{{"x", 1}})
	if none.Total("x") != 0 {
		t.Fatal("a nil Laps timed something")
	}
}
