package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave"
)

// rolloutHeader is the part of a RolloutSpec create_rollout.lua reads as
// one JSON document (cjson): named fields, not positions.
type rolloutHeader struct {
	Base          string `json:"base"`
	Source        string `json:"source"` // the RolloutSource, JSON
	Object        string `json:"object"`
	Generation    int64  `json:"generation"`
	Kind          string `json:"kind"`
	Actor         string `json:"actor"`
	MaxConcurrent int    `json:"max_concurrent"`
	FTP           string `json:"ftp"` // failure_threshold_percent
	FTC           int    `json:"ftc"` // failure_threshold (a count)
	MaxRetries    int    `json:"max_retries"`
	BackoffMS     int64  `json:"backoff_ms"` // 0 = the engine's base
	Observed      int64  `json:"observed"`
	Budget        string `json:"budget"`
	BudgetCap     int    `json:"budget_cap"`
	Supersede     bool   `json:"supersede"`
	Once          bool   `json:"once"`
	Hold          string `json:"hold"`
	Items         int    `json:"items"`
	// More is how many items of the spec later chunks carry: while they
	// come, the rollout fills (fillGrace), FillMS the grace in ms.
	More   int   `json:"more"`
	FillMS int64 `json:"fill_ms"`
	// Token names this one creation (Engine.token): the same creation sent
	// again by the Redis client answers what the first sending created.
	Token string `json:"token"`
}

// CreateOutcome says what CreateRollout did with a spec's event.
type CreateOutcome string

// Outcomes of CreateRollout.
const (
	// OutcomeCreated: the event's rollout was created.
	OutcomeCreated CreateOutcome = "created"
	// OutcomeJoined: new items joined the event's existing rollout.
	OutcomeJoined CreateOutcome = "joined"
	// OutcomeNone: no item to create (none needed, or all covered).
	OutcomeNone CreateOutcome = "none"
	// OutcomeStaleGeneration: a newer generation of the source object was
	// already seen; the spec changed nothing.
	OutcomeStaleGeneration CreateOutcome = "stale_generation"
	// OutcomeCancelled, OutcomeSuperseded: the event's rollout ended that
	// way and takes no more items.
	OutcomeCancelled  CreateOutcome = "cancelled"
	OutcomeSuperseded CreateOutcome = "superseded"
)

// CreateRollout records the items of one trigger event in one atomic
// script, under fence, and returns the rollout id and the new item ids
// ("" and none when no item was created). CreateRolloutOutcome also says
// why.
func (e *Engine) CreateRollout(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) (string, []string, error) {
	id, items, _, err := e.CreateRolloutOutcome(ctx, fence, spec)
	return id, items, err
}

// CreateRolloutOutcome records the items of one trigger event in one
// atomic script, under fence. One event, one rollout: the first spec of an
// event creates its rollout (id spec.BaseID, or BaseID-2, -3, ... when
// another event holds it); later specs of the same event (same BaseID,
// source object, generation and kind: nodes that reported later or became
// eligible later) join it as new items, dispatched in later waves, and
// reopen it when it had completed; a cancelled or superseded rollout takes
// no more items. A spec of an older generation than one already seen for
// its source object creates nothing (OutcomeStaleGeneration). With
// spec.Supersede, rollouts of older generations of the same object that
// are active, paused or blocked end as superseded first. Items are
// dispatched in the order given (the caller sorts them by priority).
//
// Per block instance (node+block):
//   - a spec is skipped when the instance already has an active item
//     (pending, in_progress, retrying, ambiguous) of a generation >= its own;
//   - a pending item of a lower generation is superseded (skipped, reason
//     "superseded"); an older item already in flight is left to finish and
//     the spec is skipped for now;
//   - a spec is skipped when the instance's last finished item was blocked
//     or failed at the same generation and config hash (it needs a newer
//     generation);
//   - a spec is skipped when an item of the instance (of any generation)
//     finished after spec.ObservedVersion: the observations behind the
//     plan predate that result (an install of generation 1 that ends
//     while generation 2 is planned makes generation 2 an upgrade);
//   - a spec with a BlockReason is created as blocked (never dispatched)
//     unless the instance's last item was already blocked at the same
//     generation and config hash;
//   - an operational spec (Payload.Operational: backup, restart, ...) is
//     created only when the instance has no active item; it supersedes
//     nothing, a converging spec waits for it, and its outcome is not
//     recorded on the instance (the health gate and a report's resolution
//     of an ambiguous item do not apply to it either);
//   - the specs of one split group (ItemSpec.Group, within the rollout) are
//     created all or none: when one of them is skipped by the rules above,
//     all are (a spec with a SkipReason is recorded but takes no part in
//     its group's dispatch).
//
// A one-shot event (spec.Once: a manual request, a schedule tick) differs:
// each instance gets at most one item in the event's rollout, ever; an
// item whose instance is held by another active item is created all the
// same and waits behind it (reason instance_busy), taking the instance
// when it is dispatched; and the "needs a newer generation" and stale-plan
// rules do not apply (the request is explicit).
//
// Items with a Group or Requires are placed by Step (see placement_rejected
// in the package doc). ErrStaleFence when fence is not the current
// leader's.
func (e *Engine) CreateRolloutOutcome(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) (string, []string, CreateOutcome, error) {
	r, err := e.CreateRolloutResult(ctx, fence, spec)
	return r.ID, r.Items, r.Outcome, err
}

// CreateResult is what CreateRolloutResult did.
type CreateResult struct {
	ID string // the event's rollout ("" when the spec took no effect)
	// Rollout is the event's rollout whenever it exists: ID, or the
	// rollout that already holds the event when the spec added nothing.
	Rollout string
	Items   []string
	Created []int // for each of Items, the index of its spec in RolloutSpec.Items
	Outcome CreateOutcome
}

// CreateRolloutResult is CreateRolloutOutcome that also says which specs
// became the items created.
//
// A spec of more than CreateChunk items is created CreateChunk items per
// script: the first creates the rollout, the others join it (a script
// holds every other Redis client while it runs, and one of 100,000 items
// ran for seconds: leases failed to renew, agents' polls timed out). A
// spec with split groups is created in one script (a group is created
// whole or not at all). The items each chunk created are read into the
// ones the Engine keeps, in the background (warm).
func (e *Engine) CreateRolloutResult(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) (CreateResult, error) {
	if len(spec.Items) <= CreateChunk || hasGroups(spec.Items) {
		return e.createChunk(ctx, fence, spec, 0)
	}
	var out CreateResult
	all := spec.Items
	for lo := 0; lo < len(all); lo += CreateChunk {
		hi := min(lo+CreateChunk, len(all))
		spec.Items = all[lo:hi]
		r, err := e.createChunk(ctx, fence, spec, len(all)-hi)
		if err != nil {
			return out, err
		}
		if r.Rollout != "" {
			e.warm(ctx, r.Rollout)
		}
		if e.afterChunk != nil {
			e.afterChunk(hi)
		}
		if lo == 0 || out.Outcome == OutcomeNone {
			out.ID, out.Outcome = r.ID, r.Outcome
		}
		if out.Rollout == "" {
			out.Rollout = r.Rollout
		}
		out.Items = append(out.Items, r.Items...)
		for _, i := range r.Created {
			out.Created = append(out.Created, lo+i)
		}
		switch r.Outcome {
		case OutcomeStaleGeneration, OutcomeCancelled, OutcomeSuperseded:
			return out, nil // the event takes no more items
		}
	}
	return out, nil
}

// CreateChunk is the most items one create script takes.
const CreateChunk = 2000

// fillGrace is how long a rollout created in chunks waits for its next
// chunk before a wave below max_concurrent starts anyway.
//
// A rollout fills while its chunks come: the first creates it, each one
// after it marks it filling for fillGrace more, the last ends the fill.
// Meanwhile a wave that would start with fewer items than max_concurrent
// (the room its budget leaves) waits for more, so a large rollout's first
// wave is as wide as its BRC allows: at 100,000 items a Step between the
// first chunk and the second started a wave of 2,000 where max_concurrent
// was 5,000, and the rollout ran one wave more than it needed. A creation
// that stops midway (the leader lost, an error) holds its rollout at most
// fillGrace.
const fillGrace = 10 * time.Second

func hasGroups(items []fleetwave.ItemSpec) bool {
	for _, it := range items {
		if it.Group != "" {
			return true
		}
	}
	return false
}

// createChunk runs one create script of spec's items; more is how many
// items of the event later chunks carry (0: the last or only one).
func (e *Engine) createChunk(ctx context.Context, fence int64, spec fleetwave.RolloutSpec, more int) (CreateResult, error) {
	src, err := json.Marshal(spec.Source)
	if err != nil {
		return CreateResult{}, fmt.Errorf("encode rollout source: %w", err)
	}
	var sets []windowSetArg
	seen := map[string]bool{}
	itemArgs := make([]any, 0, len(itemRecord.names)*len(spec.Items))
	for _, it := range spec.Items {
		// what an attempt of the item carries except its id, fence and
		// deadline: the dispatch queues it as it is (see deliveryOf)
		payload, err := json.Marshal(fleetwave.Attempt{Node: it.Node, Block: it.Block, Action: it.Action,
			Generation: it.Generation, TargetVersion: it.TargetVersion, ConfigHash: it.ConfigHash,
			DesiredState: it.DesiredState, ManagedBy: it.ManagedBy, Payload: it.Payload})
		if err != nil {
			return CreateResult{}, fmt.Errorf("encode payload of %s: %w", it.Instance(), err)
		}
		wsID := ""
		reason, blocked := it.SkipReason, ""
		if it.BlockReason != "" {
			reason, blocked = it.BlockReason, it.BlockMessage
			if blocked == "" {
				blocked = it.BlockReason
			}
		}
		if reason == "" {
			id, def, err := windowSetOf(it)
			if err != nil {
				return CreateResult{}, fmt.Errorf("item %s: %w", it.Instance(), err)
			}
			if id != "" && !seen[id] {
				seen[id] = true
				sets = append(sets, windowSetArg{ID: id, Def: def})
			}
			wsID = id
		}
		itemArgs = itemRecord.append(itemArgs, itemArg{Node: it.Node, Block: it.Block,
			Action: string(it.Action), Generation: it.Generation, TargetVersion: it.TargetVersion,
			ConfigHash: it.ConfigHash, DesiredState: string(it.DesiredState), ManagedBy: it.ManagedBy,
			Criticality: string(it.Criticality), OneShot: it.Payload.OneShot,
			TimeoutMS: int64(it.Payload.TimeoutSeconds) * 1000, Payload: string(payload), WindowSet: wsID,
			Reason: reason, Group: it.Group, Requires: strings.Join(it.Requires, "\n"), Blocked: blocked,
			Operational: it.Payload.Operational})
	}
	head, err := json.Marshal(rolloutHeader{
		Base: spec.BaseID, Source: string(src), Object: string(spec.Source.Object),
		Generation: spec.Source.Generation, Kind: string(spec.Source.Kind), Actor: spec.Source.Actor,
		MaxConcurrent: spec.MaxConcurrent, FTP: strconv.FormatFloat(spec.FailureThresholdPercent, 'f', -1, 64),
		FTC:        spec.FailureThreshold,
		MaxRetries: spec.MaxRetries, BackoffMS: spec.Backoff.Milliseconds(), Observed: max(spec.ObservedVersion, 0),
		Budget: spec.Budget, BudgetCap: spec.BudgetCap, Supersede: spec.Supersede, Once: spec.Once,
		Hold: spec.Hold, Items: len(spec.Items), More: more, FillMS: fillGrace.Milliseconds(),
		Token: e.token(),
	})
	if err != nil {
		return CreateResult{}, fmt.Errorf("encode rollout header: %w", err)
	}
	args := createHeadRecord.append(make([]any, 0, 2+2*len(sets)+len(itemArgs)),
		createHead{Header: string(head), WindowSets: len(sets)})
	for _, ws := range sets {
		args = windowSetRecord.append(args, ws)
	}
	args = append(args, itemArgs...)
	status, rest, err := e.run(ctx, "create_rollout", fenceArg(fence), e.nowMS(), args...)
	if err != nil {
		return CreateResult{}, err
	}
	if status != "ok" || len(rest) < 2 {
		return CreateResult{}, ErrStaleFence
	}
	id, outcome := asString(rest[0]), CreateOutcome(asString(rest[1]))
	items := make([]string, 0, (len(rest)-2)/2)
	created := make([]int, 0, (len(rest)-2)/2)
	for i := 2; i+1 < len(rest); i += 2 { // item id, index of its spec
		items = append(items, asString(rest[i]))
		created = append(created, int(asInt(rest[i+1])))
	}
	log := e.log.With().Str("rollout", cmp.Or(id, spec.BaseID)).Int("items", len(items)).Int64("fence", fence).
		Str("object", string(spec.Source.Object)).Int64("generation", spec.Source.Generation).Logger()
	switch outcome {
	case OutcomeCreated:
		log.Info().Msg("rollout created")
	case OutcomeJoined:
		log.Info().Msg("items joined their rollout")
	case OutcomeStaleGeneration, OutcomeCancelled, OutcomeSuperseded:
		log.Debug().Str("outcome", string(outcome)).Msg("spec takes no effect")
	default:
		log.Debug().Msg("rollout has no new item")
	}
	res := CreateResult{ID: id, Rollout: id, Items: items, Created: created, Outcome: outcome}
	if outcome == OutcomeNone {
		res.ID = "" // the spec took no effect; its event's rollout exists
	}
	return res, nil
}

// StepResult counts what one Step did, for logging and metrics.
type StepResult struct {
	Dispatched int // attempts created (new waves and retries)
	Expired    int // attempts past their deadline handled
	Completed  int // rollouts completed
	// AwaitingReport are the nodes an item of which this Step made
	// ambiguous (a node once per such item): only a full report the node sends from now on settles
	// it, so the caller may ask the node for one rather than wait for its
	// next periodic report.
	AwaitingReport []string
}

// Step advances every rollout by one level-based pass, under fence:
//  1. attempts past their deadline: never delivered -> transient failure
//     (the agent is offline: retry with backoff); delivered without a
//     result -> the item is ambiguous (reason awaiting_report);
//  2. retrying items whose retry_after passed get a new attempt;
//  3. every active rollout whose current wave has nothing in flight either
//     completes (every item terminal), halts (failure threshold exceeded)
//     or starts its next wave of up to max_concurrent pending items.
//
// Step is re-entrant: calling it again with nothing due changes nothing.
// ErrStaleFence when fence is not the current leader's.
func (e *Engine) Step(ctx context.Context, fence int64) (StepResult, error) {
	now := e.clock.Now()
	wsets, err := e.windowStates(ctx, now)
	if err != nil {
		return StepResult{}, err
	}
	args := stepHeadRecord.append(make([]any, 0, len(stepHeadRecord.names)+jitterCount+len(windowStateRecord.names)*len(wsets)),
		stepHead{Grace: e.grace.Milliseconds(), BackoffBase: e.base.Milliseconds(), BackoffMax: e.max.Milliseconds(),
			DefTimeout: DefaultActionTimeout.Milliseconds(), Limit: batchLimit, Jitters: jitterCount, WindowSets: len(wsets)})
	for range jitterCount {
		args = append(args, strconv.FormatFloat(e.jitter(), 'f', 6, 64))
	}
	for _, ws := range wsets {
		args = windowStateRecord.append(args, ws)
	}
	status, rest, err := e.run(ctx, "step", fenceArg(fence), now.UnixMilli(), args...)
	if err != nil {
		return StepResult{}, err
	}
	if status != "ok" {
		return StepResult{}, ErrStaleFence
	}
	counts, _ := rest[0].([]any)
	var res StepResult
	if len(counts) == 3 {
		res = StepResult{Dispatched: int(asInt(counts[0])), Expired: int(asInt(counts[1])), Completed: int(asInt(counts[2]))}
	}
	res.AwaitingReport = e.logEvents(rest[1])
	return res, nil
}

// logEvents logs the events a wave script returns: {kind, rollout, detail};
// it returns the nodes of the "ambiguous" ones (detail "<item>\n<node>").
func (e *Engine) logEvents(v any) (ambiguous []string) {
	events, _ := v.([]any)
	for _, ev := range events {
		f, _ := ev.([]any)
		if len(f) != 3 {
			continue
		}
		rid, detail := asString(f[1]), asString(f[2])
		switch asString(f[0]) {
		case "wave":
			e.log.Info().Str("rollout", rid).Str("wave", detail).Msg("wave started")
		case "completed":
			e.log.Info().Str("rollout", rid).Msg("rollout completed")
		case "halted":
			e.log.Warn().Str("rollout", rid).Str("reason", detail).Msg("rollout halted")
		case "undelivered":
			e.log.Warn().Str("rollout", rid).Str("item", detail).Msg("attempt not delivered before deadline")
		case "ambiguous":
			item, node, _ := strings.Cut(detail, "\n")
			e.log.Warn().Str("rollout", rid).Str("item", item).Str("node", node).Msg("attempt result lost: waiting for a full report of the node")
			if node != "" {
				ambiguous = append(ambiguous, node)
			}
		case ReasonPlacementRejected:
			e.log.Warn().Str("rollout", rid).Str("item", detail).Msg("placement rejected: a node lacks a required capability or data address")
		}
	}
	return ambiguous
}
