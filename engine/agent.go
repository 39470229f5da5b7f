package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// Poll returns up to max attempts queued for node and marks them delivered.
// When none is queued it waits up to wait (real time: this is network
// long-polling, not engine logic) for one: the script that queues an
// attempt also pushes a wake-up token to the node's wake key, on which Poll
// blocks (BLPOP) before it looks at the queue again. It blocks at most
// wakeSlice per call, so it returns with ctx.Err() soon after ctx ends even
// on a client without ContextTimeoutEnabled. A waiting Poll holds one
// connection of the client's pool. A token left over (its attempt already
// taken, or a second waiter on the node) only costs one more look at the
// queue. An attempt whose deadline already passed is not delivered: Step
// treats it as undelivered.
func (e *Engine) Poll(ctx context.Context, node string, max int, wait time.Duration) ([]fleetwave.Attempt, error) {
	if max <= 0 {
		max = 1
	}
	var wall clock.Real
	end := wall.Now().Add(wait)
	for {
		status, rest, err := e.run(ctx, "poll", "", e.nowMS(), node, max)
		if err != nil {
			return nil, err
		}
		if status != "ok" {
			return nil, fmt.Errorf("poll: unexpected status %q", status)
		}
		if len(rest) > 0 {
			out := make([]fleetwave.Attempt, 0, len(rest))
			for _, v := range rest {
				a, err := decodeAttempt(pairs(v))
				if err != nil {
					return nil, err
				}
				e.log.Debug().Str("node", node).Str("attempt", a.ID).Str("item", a.Item).
					Str("rollout", a.Rollout).Msg("attempt delivered")
				out = append(out, a)
			}
			return out, nil
		}
		left := end.Sub(wall.Now())
		if wait <= 0 || left <= 0 {
			return nil, nil
		}
		if err := e.awaitWake(ctx, node, min(left, wakeSlice)); err != nil {
			return nil, err
		}
	}
}

// awaitWake blocks until node's wake-up token arrives or d passes, and
// returns ctx.Err() once ctx ended. Whole seconds go through BLPop (go-redis
// then extends the read deadline by the block); a shorter rest is sent with
// millisecond precision, within the client's ordinary read timeout.
func (e *Engine) awaitWake(ctx context.Context, node string, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A blocked BLPOP holds a pooled connection: beyond the configured
	// number of blocking waiters, wait by re-checking instead, so
	// transitions never starve for a connection.
	select {
	case e.blockers <- struct{}{}:
		defer func() { <-e.blockers }()
	default:
		t := time.NewTimer(min(d, fallbackPoll))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	key := e.key("wake", node)
	var err error
	if d%time.Second == 0 {
		err = e.rdb.BLPop(ctx, d, key).Err()
	} else {
		ms := max((d+time.Millisecond-1)/time.Millisecond, 1)
		err = e.rdb.Do(ctx, "blpop", key, strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)).Err()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("wait for node %s: %w", node, err)
	}
	return nil
}

// Complete applies an agent's result for one of its attempts:
//   - success: the item is completed and res.Instance (when set) becomes the
//     observed instance of node/block;
//   - transient: retrying with retry_after = now + backoff*2^retry_count
//     (with jitter), or failed once retry_count reached the rollout's
//     max_retries;
//   - permanent: blocked (reason "permanent_failure"; the output is never
//     stored).
//
// Errors: ErrUnknownAttempt, ErrWrongNode (the attempt of another node),
// ErrStaleAttempt (not the item's current attempt, item no longer in
// progress, or another fence), ErrInvalidResult. The rollout completes when
// all its items are terminal. When the result leaves its lane's current
// wave with nothing in flight, the lane's next wave starts in the same
// script, as Step would start it, under the fence of the current lease (not
// when the lease expired, nor when the wave would hold an item bound by
// maintenance windows: Step decides those).
func (e *Engine) Complete(ctx context.Context, node string, res fleetwave.AttemptResult) error {
	switch res.Class {
	case fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent:
	default:
		return fmt.Errorf("class %q: %w", res.Class, ErrInvalidResult)
	}
	inst, instAt, instGen := "", int64(0), int64(-1)
	if res.Class == fleetwave.ResultSuccess && res.Instance != nil {
		b, err := json.Marshal(res.Instance)
		if err != nil {
			return fmt.Errorf("encode instance: %w", err)
		}
		inst, instAt, instGen = string(b), res.Instance.UpdatedAt.UnixMilli(), res.Instance.Generation
	}
	status, rest, err := e.run(ctx, "complete", "", e.nowMS(), node, res.AttemptID, fenceArg(res.Fence),
		string(res.Class), res.ExitCode, e.base.Milliseconds(), e.max.Milliseconds(), e.jitter(), inst, max(instAt, 0),
		e.grace.Milliseconds(), DefaultActionTimeout.Milliseconds(), batchLimit, instGen)
	if err != nil {
		return err
	}
	switch status {
	case "ok":
	case "unknown_attempt":
		return fmt.Errorf("attempt %s: %w", res.AttemptID, ErrUnknownAttempt)
	case "wrong_node":
		return fmt.Errorf("attempt %s: %w", res.AttemptID, ErrWrongNode)
	case "stale_attempt":
		return fmt.Errorf("attempt %s: %w", res.AttemptID, ErrStaleAttempt)
	default:
		return fmt.Errorf("complete: unexpected status %q", status)
	}
	ev := e.log.Info()
	if res.Class != fleetwave.ResultSuccess {
		ev = e.log.Warn()
	}
	ev.Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).
		Int("exit_code", res.ExitCode).Msg("attempt finished")
	if len(rest) > 1 {
		if n := asInt(rest[1]); n > 0 {
			e.log.Info().Str("attempt", res.AttemptID).Int64("dispatched", n).Msg("next wave started")
		}
	}
	return nil
}

// Report stores r as node r.Node's observation and resolves its ambiguous
// items: when r was sent after the attempt's dispatch and shows the instance
// at the item's generation (or newer) and config hash (or, for desired state
// absent, no longer shows it) the item is completed; otherwise it becomes
// pending again for a new attempt, unless its action is one-shot (then it is
// blocked with reason "ambiguous_one_shot"). A report sent before the
// dispatch leaves the item ambiguous. ReceivedAt is set from the clock when
// zero.
func (e *Engine) Report(ctx context.Context, r fleetwave.Report) error {
	if r.Node == "" {
		return fmt.Errorf("report without node")
	}
	now := e.nowMS()
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = msTime(now)
	}
	head := r
	head.Instances = nil
	hb, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	args := []any{r.Node, string(hb), r.SentAt.UnixMilli(), len(r.Instances)}
	for _, in := range r.Instances {
		ib, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode instance %s: %w", in.Block, err)
		}
		args = append(args, in.Block, in.Generation, in.ConfigHash, string(in.State), string(ib))
	}
	status, rest, err := e.run(ctx, "report", "", now, args...)
	if err != nil {
		return err
	}
	if status != "ok" {
		return fmt.Errorf("report: unexpected status %q", status)
	}
	if n := asInt(rest[0]); n > 0 {
		e.log.Info().Str("node", r.Node).Int64("items", n).Msg("ambiguous items resolved")
	}
	return nil
}
