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
// long-polling, not engine logic) for one. Every script that queues an
// attempt also pushes a wake-up token to the node's wake key, and the poll
// script drops it once the queue is empty, so the token is there exactly
// while attempts are queued. A long Poll sends the blocking wait for the
// token (BLPOP, which returns at once when work is queued) and the poll
// script in one pipeline: Redis runs the script as soon as the wait ends,
// so a wake-up costs one round trip. It blocks at most one slice (wakeSlice,
// less when the client's read timeout is shorter) per call and takes the
// queue after each, so a token lost to a cancelled waiter costs at most
// one slice, and Poll returns with ctx.Err() soon after ctx ends even on a
// client without ContextTimeoutEnabled. A blocked Poll holds one
// connection of the client's pool; beyond WithBlockingPolls blocked at
// once, a Poll looks at its queue every fallbackPoll instead. An attempt
// whose deadline already passed is not delivered: Step treats it as
// undelivered.
func (e *Engine) Poll(ctx context.Context, node string, max int, wait time.Duration) ([]fleetwave.Attempt, error) {
	if max <= 0 {
		max = 1
	}
	var wall clock.Real
	end := wall.Now().Add(wait)
	for {
		var block time.Duration
		if left := end.Sub(wall.Now()); wait > 0 && left > 0 {
			block = min(left, e.slice)
		}
		rest, blocked, err := e.pollOnce(ctx, node, max, block)
		if err != nil {
			return nil, err
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
		if !blocked {
			t := time.NewTimer(min(left, fallbackPoll))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
	}
}

// pollOnce runs the poll script for node, after waiting up to block for
// the node's wake-up token when block > 0 and one of the WithBlockingPolls
// slots is free (it then reports blocked). The wait and the script go in
// one pipeline. It returns the script's attempts, and ctx.Err() once ctx
// ended.
func (e *Engine) pollOnce(ctx context.Context, node string, n int, block time.Duration) ([]any, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if block > 0 {
		// A blocked BLPOP holds a pooled connection: beyond the configured
		// number of blocking waiters, the caller re-checks instead, so
		// transitions never starve for a connection.
		select {
		case e.blockers <- struct{}{}:
			defer func() { <-e.blockers }()
		default:
			block = 0
		}
	}
	if block <= 0 {
		rest, err := e.pollScript(ctx, node, n)
		return rest, false, err
	}
	key := e.key("wake", node)
	pipe := e.rdb.Pipeline()
	var wake redis.Cmder
	if block%time.Second == 0 {
		wake = pipe.BLPop(ctx, block, key)
	} else {
		ms := max((block+time.Millisecond-1)/time.Millisecond, 1)
		wake = pipe.Do(ctx, "blpop", key, strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64))
	}
	script := pipe.EvalSha(ctx, e.scripts["poll"].Hash(), e.keys, e.keyBase, "", e.nowMS(), node, n, block.Milliseconds())
	_, _ = pipe.Exec(ctx)
	if err := script.Err(); err == nil {
		// attempts the script marked delivered are returned even when ctx
		// ended meanwhile: dropping them would leave them to expire as lost
		status, rest, err := scriptReply("poll", script.Val())
		if err == nil && status != "ok" {
			err = fmt.Errorf("poll: unexpected status %q", status)
		}
		if err != nil || len(rest) > 0 || ctx.Err() == nil {
			return rest, true, err
		}
	}
	if ctx.Err() != nil {
		return nil, true, ctx.Err()
	}
	if err := wake.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return nil, true, fmt.Errorf("wait for node %s: %w", node, err)
	}
	err := script.Err()
	if !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, true, fmt.Errorf("script poll: %w", err)
	}
	// scripts flushed (e.g. Redis restarted): run it the usual way, which
	// loads it
	rest, err := e.pollScript(ctx, node, n)
	return rest, true, err
}

// pollScript runs the poll script alone.
func (e *Engine) pollScript(ctx context.Context, node string, n int) ([]any, error) {
	status, rest, err := e.run(ctx, "poll", "", e.nowMS(), node, n, 0)
	if err != nil {
		return nil, err
	}
	if status != "ok" {
		return nil, fmt.Errorf("poll: unexpected status %q", status)
	}
	return rest, nil
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
// all its items are terminal. The result is one O(1) script; when it
// leaves its lane's current wave with nothing in flight, Complete starts
// the lane's next wave right after (one more script), as Step would start
// it, under the fence of the current lease (not when the lease expired,
// nor when the wave would hold an item bound by maintenance windows: Step
// decides those).
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
		instGen)
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
	if len(rest) >= 4 && asInt(rest[1]) == 1 {
		e.nextWave(ctx, asString(rest[2]), asString(rest[3]))
	}
	return nil
}

// nextWave starts the next wave of lane of rollout rid right after the
// result that emptied the current one (next_wave.lua). The result is
// already recorded: a failure here only delays the wave to the next Step,
// so it is logged, not returned.
func (e *Engine) nextWave(ctx context.Context, rid, lane string) {
	_, rest, err := e.run(ctx, "next_wave", "", e.nowMS(), rid, lane,
		e.grace.Milliseconds(), DefaultActionTimeout.Milliseconds(), batchLimit)
	if err != nil {
		e.log.Warn().Err(err).Str("rollout", rid).Str("lane", lane).Msg("next wave left to the next step")
		return
	}
	if len(rest) >= 3 {
		e.logEvents(rest[2])
	}
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
