package engine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/cronspec"
)

// ErrInvalidWindow: a maintenance window's cron expression, duration or
// time zone cannot be used.
var ErrInvalidWindow = errors.New("invalid maintenance window")

// windowDef is one window as stored in a window set (the name is left out:
// two windows with the same schedule are the same window).
type windowDef struct {
	Cron       string `json:"cron"`
	DurationMS int64  `json:"duration_ms"`
	Timezone   string `json:"tz,omitempty"`
	Required   bool   `json:"req,omitempty"`
}

// windowSet is the parsed form of a stored window set.
type windowSet struct {
	windows []parsedWindow
}

type parsedWindow struct {
	sched    cron.Schedule
	dur      time.Duration
	loc      *time.Location
	required bool
}

// windowSetOf returns the id and stored definition of the window set of an
// item: "" when the item is not bound by windows (none, or bypassed). The
// id is content-addressed, so every item with the same windows shares one
// set and Step computes it once.
func windowSetOf(it fleetwave.ItemSpec) (id, def string, err error) {
	if it.BypassWindows || len(it.Windows) == 0 {
		return "", "", nil
	}
	defs := make([]windowDef, 0, len(it.Windows))
	for _, w := range it.Windows {
		d := w.Duration
		if d == 0 && w.DurationText != "" {
			if d, err = time.ParseDuration(w.DurationText); err != nil {
				return "", "", fmt.Errorf("window %q: duration %q: %w", w.Name, w.DurationText, ErrInvalidWindow)
			}
		}
		if d <= 0 {
			return "", "", fmt.Errorf("window %q: duration must be positive: %w", w.Name, ErrInvalidWindow)
		}
		wd := windowDef{Cron: w.Cron, DurationMS: d.Milliseconds(), Timezone: w.Timezone, Required: w.Required}
		if _, err := parseWindow(wd); err != nil {
			return "", "", fmt.Errorf("window %q: %w", w.Name, err)
		}
		defs = append(defs, wd)
	}
	sort.Slice(defs, func(i, j int) bool {
		a, b := defs[i], defs[j]
		if a.Cron != b.Cron {
			return a.Cron < b.Cron
		}
		if a.DurationMS != b.DurationMS {
			return a.DurationMS < b.DurationMS
		}
		if a.Timezone != b.Timezone {
			return a.Timezone < b.Timezone
		}
		return !a.Required && b.Required
	})
	raw, err := json.Marshal(defs)
	if err != nil {
		return "", "", fmt.Errorf("encode windows: %w", err)
	}
	sum := sha1.Sum(raw)
	return hex.EncodeToString(sum[:8]), string(raw), nil
}

func parseWindow(wd windowDef) (parsedWindow, error) {
	s, err := cronspec.Parse(wd.Cron)
	if err != nil {
		return parsedWindow{}, fmt.Errorf("cron %q: %v: %w", wd.Cron, err, ErrInvalidWindow)
	}
	loc := time.UTC
	if wd.Timezone != "" {
		if loc, err = time.LoadLocation(wd.Timezone); err != nil {
			return parsedWindow{}, fmt.Errorf("time zone %q: %v: %w", wd.Timezone, err, ErrInvalidWindow)
		}
	}
	return parsedWindow{sched: s, dur: time.Duration(wd.DurationMS) * time.Millisecond, loc: loc, required: wd.Required}, nil
}

func parseWindowSet(def string) (*windowSet, error) {
	var defs []windowDef
	if err := json.Unmarshal([]byte(def), &defs); err != nil {
		return nil, fmt.Errorf("decode window set: %w", err)
	}
	ws := &windowSet{}
	for _, wd := range defs {
		pw, err := parseWindow(wd)
		if err != nil {
			return nil, err
		}
		ws.windows = append(ws.windows, pw)
	}
	return ws, nil
}

// open reports whether window w is open at t: a window opens at each tick T
// and is open during [T, T+duration), so it is open at t when the first
// tick after t-duration is not after t.
func (w parsedWindow) open(t time.Time) bool {
	tick := w.sched.Next(t.Add(-w.dur).In(w.loc))
	return !tick.IsZero() && !tick.After(t)
}

// openAt reports whether the set lets an item run at t: every required
// window (a trigger's) is open, and one of the others is when there are
// any.
func (ws *windowSet) openAt(t time.Time) bool {
	anyOpen, optional := false, false
	for _, w := range ws.windows {
		switch {
		case w.required:
			if !w.open(t) {
				return false
			}
		default:
			optional = true
			anyOpen = anyOpen || w.open(t)
		}
	}
	return anyOpen || !optional
}

// maxWindowSearch bounds the ticks state walks to find the next opening of
// a set whose windows must overlap (about a year of daily windows).
const maxWindowSearch = 512

// state reports whether the set lets an item run at now, and else when it
// next does (zero when not found within cron's horizon or maxWindowSearch
// ticks). The set can only become open when one of its windows opens, so
// the candidates are the windows' next ticks, in order.
func (ws *windowSet) state(now time.Time) (open bool, next time.Time) {
	if ws.openAt(now) {
		return true, time.Time{}
	}
	t := now
	for range maxWindowSearch {
		var soonest time.Time
		for _, w := range ws.windows {
			tick := w.sched.Next(t.In(w.loc))
			if !tick.IsZero() && (soonest.IsZero() || tick.Before(soonest)) {
				soonest = tick
			}
		}
		if soonest.IsZero() {
			return false, time.Time{}
		}
		if ws.openAt(soonest) {
			return false, soonest
		}
		t = soonest
	}
	return false, time.Time{}
}

// windowStates reads the stored window sets and returns, for each, its id,
// whether it is open at now and its next opening (ms, 0 = unknown), as
// records of the step script. Parsed sets are cached (they never change).
func (e *Engine) windowStates(ctx context.Context, now time.Time) ([]windowStateArg, error) {
	defs, err := e.rdb.HGetAll(ctx, e.key("wsets")).Result()
	if err != nil {
		return nil, fmt.Errorf("read window sets: %w", err)
	}
	states := make([]windowStateArg, 0, len(defs))
	e.wmu.Lock()
	defer e.wmu.Unlock()
	for id, def := range defs {
		ws, ok := e.wsets[id]
		if !ok {
			ws, err = parseWindowSet(def)
			if err != nil {
				// stored by CreateRollout after validation: cannot happen;
				// the items stay closed rather than ignore their windows
				e.log.Error().Err(err).Str("window_set", id).Msg("unusable window set")
				ws = &windowSet{}
			}
			e.wsets[id] = ws
		}
		open, next := ws.state(now)
		nextMS := int64(0)
		if !next.IsZero() {
			nextMS = next.UnixMilli()
		}
		states = append(states, windowStateArg{ID: id, Open: open, NextMS: nextMS})
	}
	return states, nil
}
