// Package laps times the steps of one operation, in order: a sync, a push's
// plan, a status write and the commit inside it. A step timed twice (a
// retried push) adds up, so each step appears once.
package laps

import "time"

// Step is the time one named step took.
type Step struct {
	Name string
	Took time.Duration
}

// Laps are the steps of one operation begun at Start. A nil *Laps times
// nothing.
type Laps struct {
	Start time.Time
	last  time.Time
	Steps []Step
}

// Begin starts the laps of an operation begun at start.
func Begin(start time.Time) *Laps { return &Laps{Start: start, last: start} }

// Lap records step as having taken the time since the previous lap.
func (l *Laps) Lap(step string) {
	if l == nil {
		return
	}
	now := time.Now()
	l.Add(step, now.Sub(l.last))
	l.last = now
}

// Add records step as having taken took, without moving the next lap's
// start.
func (l *Laps) Add(step string, took time.Duration) {
	if l == nil {
		return
	}
	for i := range l.Steps {
		if l.Steps[i].Name == step {
			l.Steps[i].Took += took
			return
		}
	}
	l.Steps = append(l.Steps, Step{step, took})
}

// Took records steps timed elsewhere (an operation this one called), in
// their order; the next lap starts now.
func (l *Laps) Took(steps []Step) {
	if l == nil {
		return
	}
	for _, s := range steps {
		l.Add(s.Name, s.Took)
	}
	l.last = time.Now()
}

// Total is the time step took (0 when it was not timed).
func (l *Laps) Total(step string) time.Duration {
	if l == nil {
		return 0
	}
	for _, s := range l.Steps {
		if s.Name == step {
			return s.Took
		}
	}
	return 0
}
