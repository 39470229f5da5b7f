package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// Kinds of OutboxEvent.
const (
	// OutboxRollout: a rollout was created (Status "active", Reason
	// "created") or changed status (completed, blocked, paused, active
	// after a resume, cancelled).
	OutboxRollout = "rollout"
	// OutboxItem: an item reached a terminal status (completed, failed,
	// blocked, skipped), or was created in one.
	OutboxItem = "item"
)

// OutboxEvent is one transition that Git status must reflect, recorded by
// the same script as the transition itself.
type OutboxEvent struct {
	// ID is the entry's stream id: pass it to AckOutbox once delivered.
	// IDs grow in the order the transitions happened.
	ID   string
	Kind string // OutboxRollout or OutboxItem
	// Rollout is the rollout of the event; Item, Node, Block and
	// Generation are set for OutboxItem.
	Rollout    string
	Item       string
	Node       string
	Block      string
	Generation int64
	Status     string // the new status
	Reason     string // why (for a rollout change: the operator action, or "created")
	At         time.Time
}

// OutboxLen returns the number of undelivered outbox events (O(1)).
func (e *Engine) OutboxLen(ctx context.Context) (int64, error) {
	n, err := e.rdb.XLen(ctx, e.key("outbox")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("outbox length: %w", err)
	}
	return n, nil
}

// ReadOutbox returns up to n (at least 1) undelivered outbox events,
// oldest first. An event stays undelivered until AckOutbox acknowledges
// it: reading twice without acknowledging returns the same events again,
// also from another Engine (after a restart or a failover), so delivery is
// at least once; the consumer must tolerate repeats (status commits are
// idempotent). It returns nil when nothing is waiting.
func (e *Engine) ReadOutbox(ctx context.Context, n int) ([]OutboxEvent, error) {
	msgs, err := e.rdb.XRangeN(ctx, e.key("outbox"), "-", "+", int64(max(n, 1))).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	out := make([]OutboxEvent, 0, len(msgs))
	for _, m := range msgs {
		f := func(k string) string { s, _ := m.Values[k].(string); return s }
		out = append(out, OutboxEvent{
			ID: m.ID, Kind: f("kind"), Rollout: f("rollout"), Item: f("item"),
			Node: f("node"), Block: f("block"), Generation: atoi(f("generation")),
			Status: f("status"), Reason: f("reason"), At: msTime(atoi(f("at"))),
		})
	}
	return out, nil
}

// AckOutbox acknowledges delivered outbox events by their IDs, under fence:
// they are deleted, so the outbox holds only undelivered events and stays
// bounded. It returns how many were deleted (IDs already acknowledged or
// unknown are ignored). ErrStaleFence when fence is not the current
// leader's: the events stay for the next leader.
func (e *Engine) AckOutbox(ctx context.Context, fence int64, ids ...string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	status, rest, err := e.run(ctx, "ack_outbox", fenceArg(fence), e.nowMS(), anys(ids)...)
	if err != nil {
		return 0, err
	}
	if status != "ok" {
		return 0, ErrStaleFence
	}
	n := int(asInt(rest[0]))
	e.log.Debug().Int("events", n).Int64("fence", fence).Msg("outbox acknowledged")
	return n, nil
}

// RecordStatusTip records commit as the status commit the leader (fence)
// pushed last, once it landed. ErrStaleFence when fence is not the current
// leader's.
func (e *Engine) RecordStatusTip(ctx context.Context, fence int64, commit string) error {
	status, _, err := e.run(ctx, "status_tip", fenceArg(fence), e.nowMS(), commit)
	if err != nil {
		return err
	}
	if status != "ok" {
		return ErrStaleFence
	}
	return nil
}

// StatusTip returns the status commit recorded last (RecordStatusTip), ""
// when none: when the status branch is still at it, Redis holds what every
// status commit recorded.
func (e *Engine) StatusTip(ctx context.Context) (string, error) {
	v, err := e.rdb.Get(ctx, e.key("statustip")).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read status tip: %w", err)
	}
	return v, nil
}

// LaneDepth is the queue depth of one lane (an item's managed_by) over
// every rollout.
type LaneDepth struct {
	Pending  int64 // items waiting to be dispatched (in a lane's pending set)
	InFlight int64 // items in progress, retrying or ambiguous
}

// LaneDepths returns the depth of every lane that ever held an item, keyed
// by lane name ("" is the default lane), from counters the scripts keep
// with the lanes' sets: one read of one small hash, whatever the number of
// rollouts or items. Lanes with nothing pending or in flight are included
// with zero depths.
func (e *Engine) LaneDepths(ctx context.Context) (map[string]LaneDepth, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("lanedepth")).Result()
	if err != nil {
		return nil, fmt.Errorf("read lane depths: %w", err)
	}
	out := make(map[string]LaneDepth, len(m)/2)
	for k, v := range m {
		kind, lane, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		d := out[lane]
		switch kind {
		case "p":
			d.Pending = atoi(v)
		case "f":
			d.InFlight = atoi(v)
		}
		out[lane] = d
	}
	return out, nil
}

// LaneCounters returns the item counters of every lane that ever held an
// item, over every rollout (Total is the sum of the buckets, which the
// scripts keep exact in the same step as every transition): one read of one
// small hash.
func (e *Engine) LaneCounters(ctx context.Context) (map[string]fleetwave.Counters, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("lanecount")).Result()
	if err != nil {
		return nil, fmt.Errorf("read lane counters: %w", err)
	}
	out := map[string]fleetwave.Counters{}
	for k, v := range m {
		bucket, lane, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		c := out[lane]
		n := atoi(v)
		switch bucket {
		case "done":
			c.Done = n
		case "in_progress":
			c.InProgress = n
		case "pending":
			c.Pending = n
		case "failed":
			c.Failed = n
		case "skipped":
			c.Skipped = n
		default:
			continue
		}
		c.Total = c.Done + c.InProgress + c.Pending + c.Failed + c.Skipped
		out[lane] = c
	}
	return out, nil
}
