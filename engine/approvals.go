package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// Sentinels of the approval steps.
var (
	// ErrApprovalState: the step does not apply in the approval's state
	// (e.g. approve a rejected or expired request); ApprovalStateError
	// says which state it is in.
	ErrApprovalState = errors.New("approval is not in a state for this step")
	// ErrSelfApproval: the submitter of a request cannot decide it.
	ErrSelfApproval = errors.New("the submitter cannot decide their own request")
)

// ApprovalStateError is the state an approval was in when a step did not
// apply to it.
type ApprovalStateError struct {
	ID    string
	State fleetwave.ApprovalState
}

func (e *ApprovalStateError) Error() string {
	return fmt.Sprintf("approval %s is %s", e.ID, e.State)
}

// Unwrap makes errors.Is(err, ErrApprovalState) hold.
func (e *ApprovalStateError) Unwrap() error { return ErrApprovalState }

// SubmitApproval records a submitted approval request, under fence. A
// request already known (the same id) is left as it is and returned: the
// first submission stands. Its SubmittedAt is set from the engine's clock
// when zero: the TTL counts from when the hub first saw the request.
func (e *Engine) SubmitApproval(ctx context.Context, fence int64, a fleetwave.Approval) (fleetwave.Approval, error) {
	if a.SubmittedAt.IsZero() {
		a.SubmittedAt = e.clock.Now().UTC()
	}
	b, err := json.Marshal(toRecord(a))
	if err != nil {
		return fleetwave.Approval{}, fmt.Errorf("encode approval: %w", err)
	}
	return e.approvalStep(ctx, fence, approvalArgs{Op: "submit", ID: a.ID, Record: string(b)})
}

// DecideApproval records actor's decision (approved or rejected) on the
// pending request id, under fence. ErrSelfApproval when actor submitted
// it; an *ApprovalStateError when it is not pending; ErrNotFound.
func (e *Engine) DecideApproval(ctx context.Context, fence int64, id, actor string, decision fleetwave.ApprovalState) (fleetwave.Approval, error) {
	if decision != fleetwave.ApprovalApproved && decision != fleetwave.ApprovalRejected {
		return fleetwave.Approval{}, fmt.Errorf("decision %q: want approved or rejected", decision)
	}
	return e.approvalStep(ctx, fence, approvalArgs{Op: "decide", ID: id, Actor: actor, Decision: string(decision)})
}

// ConsumeApproval records that the approved request id created rollout,
// under fence; calling it again with the same rollout changes nothing.
func (e *Engine) ConsumeApproval(ctx context.Context, fence int64, id, rollout string) (fleetwave.Approval, error) {
	return e.approvalStep(ctx, fence, approvalArgs{Op: "consume", ID: id, Rollout: rollout})
}

// ExpireApproval ends the pending request id as expired (its TTL passed),
// under fence.
func (e *Engine) ExpireApproval(ctx context.Context, fence int64, id, reason string) (fleetwave.Approval, error) {
	return e.approvalStep(ctx, fence, approvalArgs{Op: "expire", ID: id, Reason: reason})
}

// StaleApproval ends a pending or approved request id whose pinned version
// is no longer its BRC's (state stale, with reason), under fence.
func (e *Engine) StaleApproval(ctx context.Context, fence int64, id, reason string) (fleetwave.Approval, error) {
	return e.approvalStep(ctx, fence, approvalArgs{Op: "stale", ID: id, Reason: reason})
}

func (e *Engine) approvalStep(ctx context.Context, fence int64, args approvalArgs) (fleetwave.Approval, error) {
	op, id := args.Op, args.ID
	status, rest, err := e.run(ctx, "approval", fenceArg(fence), e.nowMS(), approvalStepRecord.append(nil, args)...)
	if err != nil {
		return fleetwave.Approval{}, err
	}
	switch status {
	case "ok":
		a, err := decodeApproval(asString(rest[0]))
		if err == nil && op != "submit" {
			e.log.Info().Str("approval", id).Str("step", op).Str("state", string(a.State)).Msg("approval changed")
		}
		return a, err
	case "stale_fence":
		return fleetwave.Approval{}, ErrStaleFence
	case "not_found":
		return fleetwave.Approval{}, fmt.Errorf("approval %s: %w", id, ErrNotFound)
	case "self":
		return fleetwave.Approval{}, fmt.Errorf("approval %s: %w", id, ErrSelfApproval)
	case "state":
		return fleetwave.Approval{}, &ApprovalStateError{ID: id, State: fleetwave.ApprovalState(asString(rest[0]))}
	}
	return fleetwave.Approval{}, fmt.Errorf("approval: unexpected status %q", status)
}

// Approvals returns every approval record, sorted by id.
func (e *Engine) Approvals(ctx context.Context) ([]fleetwave.Approval, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("approvals")).Result()
	if err != nil {
		return nil, fmt.Errorf("read approvals: %w", err)
	}
	out := make([]fleetwave.Approval, 0, len(m))
	for _, v := range m {
		a, err := decodeApproval(v)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Approval returns one approval record; ErrNotFound.
func (e *Engine) Approval(ctx context.Context, id string) (fleetwave.Approval, error) {
	v, err := e.rdb.HGet(ctx, e.key("approvals"), id).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return fleetwave.Approval{}, fmt.Errorf("approval %s: %w", id, ErrNotFound)
		}
		return fleetwave.Approval{}, fmt.Errorf("read approval %s: %w", id, err)
	}
	return decodeApproval(v)
}

// approvalRecord is an Approval as approval.lua keeps it: times in unix
// ms (the script stamps decided_at, consumed_at, ended_at with now_ms).
type approvalRecord struct {
	ID            string   `json:"id"`
	BRC           string   `json:"brc"`
	TargetVersion string   `json:"target_version"`
	Generation    int64    `json:"generation,omitempty"`
	Nodes         []string `json:"nodes"`
	Selector      string   `json:"selector,omitempty"`
	BatchSize     int      `json:"batch_size,omitempty"`
	State         string   `json:"state"`
	Reason        string   `json:"reason,omitempty"`
	Message       string   `json:"message,omitempty"`
	SubmittedBy   string   `json:"submitted_by,omitempty"`
	SubmittedVia  string   `json:"submitted_via,omitempty"`
	SubmittedAt   int64    `json:"submitted_at"`
	DecidedBy     string   `json:"decided_by,omitempty"`
	DecidedAt     int64    `json:"decided_at,omitempty"`
	Rollout       string   `json:"rollout,omitempty"`
	ConsumedAt    int64    `json:"consumed_at,omitempty"`
	EndedAt       int64    `json:"ended_at,omitempty"`
}

func toRecord(a fleetwave.Approval) approvalRecord {
	return approvalRecord{ID: a.ID, BRC: a.BRC, TargetVersion: a.TargetVersion, Generation: a.Generation,
		Nodes: a.Nodes, Selector: a.Selector, BatchSize: a.BatchSize, State: string(a.State), Reason: a.Reason,
		Message: a.Message, SubmittedBy: a.SubmittedBy, SubmittedVia: a.SubmittedVia,
		SubmittedAt: msOf(a.SubmittedAt), DecidedBy: a.DecidedBy, DecidedAt: msOf(a.DecidedAt),
		Rollout: a.Rollout, ConsumedAt: msOf(a.ConsumedAt), EndedAt: msOf(a.EndedAt)}
}

func decodeApproval(v string) (fleetwave.Approval, error) {
	var r approvalRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return fleetwave.Approval{}, fmt.Errorf("decode approval: %w", err)
	}
	return fleetwave.Approval{ID: r.ID, BRC: r.BRC, TargetVersion: r.TargetVersion, Generation: r.Generation,
		Nodes: r.Nodes, Selector: r.Selector, BatchSize: r.BatchSize, State: fleetwave.ApprovalState(r.State),
		Reason: r.Reason, Message: r.Message, SubmittedBy: r.SubmittedBy, SubmittedVia: r.SubmittedVia,
		SubmittedAt: msTime(r.SubmittedAt), DecidedBy: r.DecidedBy, DecidedAt: msTime(r.DecidedAt),
		Rollout: r.Rollout, ConsumedAt: msTime(r.ConsumedAt), EndedAt: msTime(r.EndedAt)}, nil
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
