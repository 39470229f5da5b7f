package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave"
)

// Rollout state actions of SetRolloutState.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionCancel = "cancel"
)

// StateChange is one operator action on a rollout, as RolloutHistory
// returns it.
type StateChange struct {
	Action string                  `json:"action"`
	Actor  string                  `json:"actor"`
	At     time.Time               `json:"at"`
	From   fleetwave.RolloutStatus `json:"from"`
	To     fleetwave.RolloutStatus `json:"to"`
}

// SetRolloutState applies an operator action to rollout id, under fence:
//   - pause: an active or blocked rollout becomes paused (reason "paused"):
//     nothing new is dispatched, retries are held, attempts in flight finish;
//   - resume: a paused or blocked rollout becomes active again; the failure
//     threshold then counts only failures after the resume (over the items
//     not yet finished), so a rollout halted by it can progress; held
//     retries are put back;
//   - cancel: pending and retrying items become skipped (reason
//     "cancelled"), attempts in flight finish (an ambiguous item whose
//     report does not show its target is skipped too); the rollout becomes
//     cancelled (reason "cancelled").
//
// The action, actor and time are recorded in the rollout (Rollout.UpdatedAt)
// and appended to its history (RolloutHistory). A rollout already in the
// wanted state is left unchanged. Errors: ErrNotFound, ErrInvalidState
// (unknown action, or a completed or cancelled rollout, or resume of an
// active one), ErrStaleFence.
func (e *Engine) SetRolloutState(ctx context.Context, fence int64, id, action, actor string) error {
	switch action {
	case ActionPause, ActionResume, ActionCancel:
	default:
		return fmt.Errorf("action %q: %w", action, ErrInvalidState)
	}
	status, rest, err := e.run(ctx, "set_state", fenceArg(fence), e.nowMS(),
		setStateRecord.append(nil, setStateArgs{Rollout: id, Action: action, Actor: actor})...)
	if err != nil {
		return err
	}
	switch status {
	case "ok":
	case "stale_fence":
		return ErrStaleFence
	case "not_found":
		return fmt.Errorf("rollout %s: %w", id, ErrNotFound)
	case "invalid":
		return fmt.Errorf("%s rollout %s (%s): %w", action, id, asString(rest[0]), ErrInvalidState)
	default:
		return fmt.Errorf("set state: unexpected status %q", status)
	}
	if asInt(rest[1]) == 1 {
		e.log.Info().Str("rollout", id).Str("action", action).Str("actor", actor).
			Int64("skipped", asInt(rest[2])).Msg("rollout state changed")
	}
	return nil
}

// RolloutHistory returns the operator actions on rollout id, oldest first;
// ErrNotFound when there is no such rollout.
func (e *Engine) RolloutHistory(ctx context.Context, id string) ([]StateChange, error) {
	n, err := e.rdb.Exists(ctx, e.key("r", id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read rollout %s: %w", id, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("rollout %s: %w", id, ErrNotFound)
	}
	raw, err := e.rdb.LRange(ctx, e.key("r", id)+":history", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read history of %s: %w", id, err)
	}
	out := make([]StateChange, 0, len(raw))
	for _, s := range raw {
		var h struct {
			Action, Actor, At, From, To string
		}
		if err := json.Unmarshal([]byte(s), &h); err != nil {
			return nil, fmt.Errorf("decode history of %s: %w", id, err)
		}
		out = append(out, StateChange{Action: h.Action, Actor: h.Actor, At: msTime(atoi(h.At)),
			From: fleetwave.RolloutStatus(h.From), To: fleetwave.RolloutStatus(h.To)})
	}
	return out, nil
}

// SetDrained replaces the set of draining nodes, under fence. Drain changes
// availability, not intent: nothing new is dispatched to a draining node
// (its items, pending or retrying, wait with reason node_draining, and
// attempts already running finish), and its items go on once it is no
// longer draining. Returns whether the set changed; ErrStaleFence when
// fence is not the current leader's.
func (e *Engine) SetDrained(ctx context.Context, fence int64, nodes []string) (bool, error) {
	args := make([]any, 0, len(nodes))
	for _, n := range nodes {
		args = append(args, n)
	}
	status, rest, err := e.run(ctx, "set_drain", fenceArg(fence), e.nowMS(), args...)
	if err != nil {
		return false, err
	}
	if status != "ok" {
		return false, ErrStaleFence
	}
	changed := asInt(rest[0]) == 1
	if changed {
		e.log.Info().Int("nodes", len(nodes)).Msg("draining nodes changed")
	}
	return changed, nil
}

// Release lifts hold (e.g. fleetwave.ReasonClaim) from rollout id, under
// fence: a rollout created with RolloutSpec.Hold dispatches nothing until
// then. A rollout not held for that reason is left alone (false).
// ErrNotFound, ErrStaleFence.
func (e *Engine) Release(ctx context.Context, fence int64, id, hold string) (bool, error) {
	status, rest, err := e.run(ctx, "release", fenceArg(fence), e.nowMS(), releaseRecord.append(nil, releaseArgs{Rollout: id, Hold: hold})...)
	if err != nil {
		return false, err
	}
	switch status {
	case "ok":
	case "not_found":
		return false, fmt.Errorf("rollout %s: %w", id, ErrNotFound)
	default:
		return false, ErrStaleFence
	}
	released := asInt(rest[0]) == 1
	if released {
		e.log.Info().Str("rollout", id).Str("hold", hold).Msg("rollout released")
	}
	return released, nil
}

// RequestOutcome is what became of a one-shot request (a manual
// rollouts/<name> request) that created no rollout: its error code and
// message (e.g. no_matching_nodes).
type RequestOutcome struct {
	Code    string    `json:"code"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// RecordRequest records, under fence, that request name was handled
// without a rollout; the first record stays (a request is handled once).
// Returns whether this call recorded it. ErrStaleFence.
func (e *Engine) RecordRequest(ctx context.Context, fence int64, name string, o RequestOutcome) (bool, error) {
	if o.At.IsZero() {
		o.At = e.clock.Now().UTC()
	}
	b, err := json.Marshal(o)
	if err != nil {
		return false, fmt.Errorf("encode request outcome: %w", err)
	}
	return e.record(ctx, fence, "requests", name, string(b), "nx")
}

// record writes field of the hub's record table under fence (record.lua).
func (e *Engine) record(ctx context.Context, fence int64, table, field, value, mode string) (bool, error) {
	status, rest, err := e.run(ctx, "record", fenceArg(fence), e.nowMS(),
		recordTableRecord.append(nil, recordArgs{Table: table, Field: field, Value: value, Mode: mode})...)
	if err != nil {
		return false, err
	}
	switch status {
	case "ok":
		return asInt(rest[0]) == 1, nil
	case "stale_fence":
		return false, ErrStaleFence
	}
	return false, fmt.Errorf("record %s: unexpected status %q", table, status)
}

// RecordScheduleFire records, under fence, the last tick schedule trigger
// fired for (so a tick fires once, and one missed while no hub led fires
// once). ErrStaleFence.
func (e *Engine) RecordScheduleFire(ctx context.Context, fence int64, trigger string, tick time.Time) error {
	_, err := e.record(ctx, fence, "sched", trigger, strconv.FormatInt(tick.UnixMilli(), 10), "set")
	return err
}

// ScheduleFires returns the last recorded tick of each schedule trigger.
func (e *Engine) ScheduleFires(ctx context.Context) (map[string]time.Time, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("sched")).Result()
	if err != nil {
		return nil, fmt.Errorf("read schedule fires: %w", err)
	}
	out := make(map[string]time.Time, len(m))
	for name, v := range m {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[name] = time.UnixMilli(ms).UTC()
		}
	}
	return out, nil
}

// RequestOutcomes returns the recorded outcomes of requests handled without
// a rollout, by name.
func (e *Engine) RequestOutcomes(ctx context.Context) (map[string]RequestOutcome, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("requests")).Result()
	if err != nil {
		return nil, fmt.Errorf("read request outcomes: %w", err)
	}
	out := make(map[string]RequestOutcome, len(m))
	for name, v := range m {
		var o RequestOutcome
		if err := json.Unmarshal([]byte(v), &o); err != nil {
			return nil, fmt.Errorf("decode outcome of request %s: %w", name, err)
		}
		out[name] = o
	}
	return out, nil
}

// SourceGenerations returns, per source object, the highest generation a
// CreateRollout was asked for: an event the engine already knows.
func (e *Engine) SourceGenerations(ctx context.Context) (map[fleetwave.ObjectKey]int64, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("srcgen")).Result()
	if err != nil {
		return nil, fmt.Errorf("read source generations: %w", err)
	}
	out := make(map[fleetwave.ObjectKey]int64, len(m))
	for k, v := range m {
		out[fleetwave.ObjectKey(k)] = atoi(v)
	}
	return out, nil
}
