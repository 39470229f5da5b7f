package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// watchEvent is one line of `rollout watch -o json`: the rollout as it is
// after a change.
type watchEvent struct {
	Rollout  string                  `json:"rollout"`
	Status   fleetwave.RolloutStatus `json:"status"`
	Reason   string                  `json:"reason,omitempty"`
	Hold     string                  `json:"hold,omitempty"`
	Wave     int                     `json:"wave"`
	Counters fleetwave.Counters      `json:"counters"`
	Time     time.Time               `json:"time"`
}

// same reports whether two events say the same but for their time.
func (e watchEvent) same(o watchEvent) bool {
	e.Time, o.Time = time.Time{}, time.Time{}
	return e == o
}

// rolloutFinished reports whether a rollout of status s can change no more.
func rolloutFinished(s fleetwave.RolloutStatus) bool {
	return s == fleetwave.RolloutCompleted || s == fleetwave.RolloutCancelled || s == fleetwave.RolloutSuperseded
}

// Watch tolerances: how long a rollout may be missing before it first
// shows (a request the hub has not synced yet), and how long the hub may
// be unreachable or unable to answer in the middle of a watch.
var (
	watchAppearWait = 30 * time.Second
	watchOutage     = 60 * time.Second
)

func watchCmd(stdout io.Writer, f *clientFlags) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a rollout until it is finished: a progress bar on a terminal, a line per change otherwise",
		Long: `Follow a rollout until it is completed, cancelled or superseded, polling the
hub every --interval. On a terminal it draws a progress bar; otherwise it
prints a line each time the rollout changes; with -o json it prints one JSON
object per line per change:

  {"rollout":"app-g1","status":"active","wave":1,"counters":{"total":4,"done":1,
   "in_progress":1,"pending":2,"failed":0,"skipped":0},"time":"..."}

The exit code is 0 when the rollout completed, 1 when it was cancelled or
superseded (or the hub could not be asked), 130 when interrupted. A rollout
not there yet (a request the hub has not synced) is waited for up to 30s.`,
		Example: `  fleetwave rollout watch app-g1
  fleetwave rollout watch manual-restart-web -o json | jq -c .counters`,
		Args:              idArg("rollout", "fleetwave rollout watch app-g1"),
		ValidArgsFunction: completeRolloutIDs(f, nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch f.output {
			case "", "table", "json":
			default:
				return usageError{fmt.Sprintf("--output %q: watch prints a table (the default) or json lines", f.output), "-o json"}
			}
			if interval <= 0 {
				return usageError{fmt.Sprintf("--interval %s: want a positive duration", interval), "--interval 2s"}
			}
			mode := watchLines
			switch {
			case f.output == "json":
				mode = watchJSON
			case isTerminal(stdout):
				mode = watchBar
			}
			return watchRollout(cmd, f, args[0], interval, mode, stdout)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to ask the hub")
	return cmd
}

type watchMode int

const (
	watchLines watchMode = iota
	watchBar
	watchJSON
)

// watchRollout polls rollout id until it is finished and prints each
// change in mode.
func watchRollout(cmd *cobra.Command, f *clientFlags, id string, interval time.Duration, mode watchMode, stdout io.Writer) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	if ctx == nil {
		ctx = context.Background()
	}
	c := f.client()
	path := "/api/v1/rollouts/" + url.PathEscape(id) + "?limit=1" // the rollout and its counters; not its items
	var last watchEvent
	seen, drawn, warned := false, false, false
	var failingSince time.Time
	start := time.Now()
	endBar := func() {
		if drawn {
			fmt.Fprintln(stdout)
			drawn = false
		}
	}
	defer endBar()
	for {
		var a api.RolloutAnswer
		err := send(ctx, c, "GET", path, nil, &a)
		now := time.Now()
		switch {
		case err == nil:
			failingSince, warned = time.Time{}, false
		case ctx.Err() != nil:
			endBar()
			fmt.Fprintf(stderr, "interrupted: rollout %s is %s\n", id, dash(string(last.Status)))
			return exitError{130}
		case !seen && isCode(err, "not_found") && now.Sub(start) < watchAppearWait:
			if !warned {
				fmt.Fprintf(stderr, "rollout %s not found yet: waiting up to %s for the hub to create it\n", id, watchAppearWait)
				warned = true
			}
		case seen && transient(err):
			if failingSince.IsZero() {
				failingSince = now
			}
			if now.Sub(failingSince) >= watchOutage {
				endBar()
				return reportClientError(cmd, c, err, rolloutHint)
			}
			if !warned {
				endBar()
				fmt.Fprintf(stderr, "cannot ask the hub (%v): retrying for up to %s\n", shortErr(err), watchOutage)
				warned = true
			}
		default:
			endBar()
			return reportClientError(cmd, c, err, rolloutHint)
		}
		if err == nil {
			r := a.Rollout
			ev := watchEvent{Rollout: cmp.Or(r.ID, id), Status: r.Status, Reason: r.Reason, Hold: r.Hold, Wave: r.Wave, Counters: r.Counters, Time: now.UTC()}
			if !seen || !ev.same(last) {
				switch mode {
				case watchJSON:
					line, jerr := json.Marshal(ev)
					if jerr != nil {
						return jerr
					}
					if _, werr := fmt.Fprintf(stdout, "%s\n", line); werr != nil {
						return werr
					}
				case watchBar:
					fmt.Fprintf(stdout, "\r\x1b[K%s", progressBar(ev, 30))
					drawn = true
				default:
					fmt.Fprintln(stdout, watchLine(ev))
				}
				last, seen = ev, true
			}
			if rolloutFinished(r.Status) {
				endBar()
				if r.Status == fleetwave.RolloutCompleted {
					return nil
				}
				reason := ""
				if r.Reason != "" {
					reason = ": " + r.Reason
				}
				fmt.Fprintf(stderr, "rollout %s was %s%s\n", ev.Rollout, r.Status, reason)
				return exitError{1}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// isCode reports whether err is an API answer with code.
func isCode(err error, code string) bool {
	var fail *apiFailure
	return errors.As(err, &fail) && fail.body.Error.Code == code
}

// transient reports whether err may pass by itself: the hub unreachable,
// restarting, busy or unable to reach Redis.
func transient(err error) bool {
	var fail *apiFailure
	var uerr *url.Error
	switch {
	case errors.As(err, &fail):
		return fail.status >= 500 || fail.status == 429
	case errors.As(err, &uerr):
		return true
	}
	return false
}

func shortErr(err error) string {
	var fail *apiFailure
	var uerr *url.Error
	switch {
	case errors.As(err, &fail):
		return fmt.Sprintf("%s: %s", fail.body.Error.Code, fail.body.Error.Message)
	case errors.As(err, &uerr):
		return uerr.Err.Error()
	}
	return err.Error()
}

// watchLine is the plain form of an event: a line with the time.
func watchLine(e watchEvent) string {
	c := e.Counters
	line := fmt.Sprintf("%s  %s %s wave %d  total=%d done=%d in_progress=%d pending=%d failed=%d skipped=%d",
		e.Time.Local().Format(time.TimeOnly), e.Rollout, e.Status, e.Wave, c.Total, c.Done, c.InProgress, c.Pending, c.Failed, c.Skipped)
	if e.Hold != "" {
		line += " hold=" + e.Hold
	}
	if e.Reason != "" {
		line += "  " + e.Reason
	}
	return line
}

// progressBar is the terminal form of an event: a bar of width cells,
// filled with the finished items (done, skipped and failed), then the
// counts.
func progressBar(e watchEvent, width int) string {
	c := e.Counters
	finished := c.Done + c.Skipped + c.Failed
	filled := 0
	if c.Total > 0 {
		filled = int(min(finished, c.Total) * int64(width) / c.Total)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s%s] %d/%d done", e.Rollout, strings.Repeat("#", filled), strings.Repeat("-", width-filled), c.Done, c.Total)
	if c.Skipped > 0 {
		fmt.Fprintf(&b, ", %d skipped", c.Skipped)
	}
	fmt.Fprintf(&b, ", %d failed, %d in progress, wave %d, %s", c.Failed, c.InProgress, e.Wave, e.Status)
	if e.Reason != "" && e.Status != fleetwave.RolloutActive {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	return b.String()
}
