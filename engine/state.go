package engine

import (
	"context"
	"encoding/json"
	"fmt"
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
	status, rest, err := e.run(ctx, "set_state", fenceArg(fence), e.nowMS(), id, action, actor)
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
