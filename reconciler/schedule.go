package reconciler

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/cronspec"
	"github.com/robfig/cron/v3"
)

// Fire is the state of one schedule trigger at now.
type Fire struct {
	Trigger string `json:"trigger"`
	// Due is true when a cron tick fell in (LastFired, now]: the hub plans
	// PlanSchedule(..., Tick) and then stores Tick as the trigger's last fire.
	Due bool `json:"due"`
	// Tick is the latest tick in (LastFired, now] (zero when not due). Ticks
	// missed while the hub was down collapse into this one: it fires once.
	Tick time.Time `json:"tick,omitzero"`
	// Record is the time the hub must persist as the trigger's last fire
	// after handling this Fire: Tick when due; now for a trigger that never
	// fired (so its first tick after it appeared fires, and not one from
	// before it existed); zero = keep what is stored.
	Record time.Time `json:"record,omitzero"`
	// NextFireAt is the first tick after now (for status); zero when the
	// expression never fires again or is invalid.
	NextFireAt time.Time `json:"next_fire_at,omitzero"`
	// Held is set when the trigger must not fire in this mode (observe_mode);
	// the hub still records Record so the tick is not replayed later.
	Held string `json:"held,omitempty"`
	// Error describes an invalid cron_expression or timezone.
	Error string `json:"error,omitempty"`
}

// Schedules returns, for every schedule trigger of the snapshot in name
// order, whether it is due at now given when it last fired (lastFired is
// keyed by trigger name; a missing entry = never fired). Pure: time is an
// argument. Times are in UTC.
func Schedules(snap *fleetwave.Snapshot, lastFired map[string]time.Time, now time.Time) []Fire {
	var out []Fire
	for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
		t := snap.Triggers[name]
		if t.TriggerType != fleetwave.TriggerSchedule {
			continue
		}
		f := Fire{Trigger: name}
		sched, loc, err := parseSchedule(t)
		if err != nil {
			f.Error = err.Error()
			out = append(out, f)
			continue
		}
		if next := sched.Next(now.In(loc)); !next.IsZero() {
			f.NextFireAt = next.UTC()
		}
		last, ok := lastFired[name]
		if !ok || last.IsZero() {
			f.Record = now.UTC()
			out = append(out, f)
			continue
		}
		if tick := latestTick(sched, loc, last, now); !tick.IsZero() {
			f.Due, f.Tick, f.Record = true, tick.UTC(), tick.UTC()
			if snap.Config.ReconcileMode == "observe" {
				f.Due, f.Held = false, fleetwave.ReasonObserveMode
			}
		}
		out = append(out, f)
	}
	return out
}

func parseSchedule(t *fleetwave.Trigger) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if t.Timezone != "" {
		l, err := time.LoadLocation(t.Timezone)
		if err != nil {
			return nil, nil, fmt.Errorf("timezone %q: %w", t.Timezone, err)
		}
		loc = l
	}
	sched, err := cronspec.Parse(t.CronExpression)
	if err != nil {
		return nil, nil, fmt.Errorf("cron_expression %q: %w", t.CronExpression, err)
	}
	return sched, loc, nil
}

// latestTick returns the latest tick in (after, now], zero when none. It
// searches backwards from now in growing steps, so a long outage costs a
// few dozen Next calls, not one per missed tick.
func latestTick(sched cron.Schedule, loc *time.Location, after, now time.Time) time.Time {
	if !now.After(after) {
		return time.Time{}
	}
	for d := time.Minute; ; d *= 4 {
		from := now.Add(-d)
		if !from.After(after) {
			from = after
		}
		t := sched.Next(from.In(loc))
		if !t.IsZero() && !t.After(now) {
			for {
				n := sched.Next(t)
				if n.IsZero() || n.After(now) {
					return t
				}
				t = n
			}
		}
		if from.Equal(after) {
			return time.Time{}
		}
	}
}

// ScheduleBaseID is the rollout id of a schedule trigger's tick:
// "<brc>-<yyyymmddhhmm>" in UTC (unique across DST changes).
func ScheduleBaseID(trigger string, tick time.Time) string {
	return trigger + "-" + tick.UTC().Format("200601021504")
}

// PlanSchedule plans one tick of a schedule trigger: action_name on every
// observed instance of the block on the nodes in scope, one one-shot event
// (Once) in the trigger's budget. A draining node's item waits for the
// drain to lift (node_draining); CLI-managed instances are items skipped with cli_managed;
// the node's windows apply unless the trigger bypasses them. The template
// is rendered as for reconciliation (the action may need the config).
func PlanSchedule(snap *fleetwave.Snapshot, obs fleetwave.Observations, t *fleetwave.Trigger, tick time.Time, opts Options) (fleetwave.RolloutSpec, []Problem) {
	key := fleetwave.Key(fleetwave.KindTrigger, t.Name)
	gen := snap.Generation(key)
	scope := Scope(snap, t)
	mc := maxConcurrent(snap, t, len(scope))
	spec := fleetwave.RolloutSpec{
		BaseID:                  ScheduleBaseID(t.Name, tick),
		Source:                  fleetwave.RolloutSource{Object: key, Generation: gen, Commit: snap.Commit, Kind: fleetwave.SourceScheduler},
		MaxConcurrent:           mc,
		FailureThresholdPercent: firstNonZeroF(t.FailureThresholdPercent, snap.Config.FailureThresholdPercent),
		FailureThreshold:        firstNonZero(t.FailureThreshold, snap.Config.FailureThreshold),
		MaxRetries:              firstNonZero(t.MaxRetries, snap.Config.MaxRetries),
		Backoff:                 snap.Config.Backoff,
		Budget:                  t.Name,
		BudgetCap:               mc,
		Once:                    true,
	}
	block := snap.Blocks[t.BlockName]
	if block == nil {
		return spec, []Problem{{Trigger: t.Name, Block: t.BlockName, Reason: "unknown_block", Message: "block " + t.BlockName + " is not defined"}}
	}
	action := configAction(t)
	r := newRenderer(opts)
	var problems []Problem
	var items []rankedItem
	for _, id := range scope {
		n := snap.Nodes[id]
		ik := fleetwave.InstanceKey{Node: id, Block: t.BlockName}
		observed := observedInstance(obs, ik)
		if observed == nil {
			continue
		}
		out, err := r.renderNode(snap, n, block, t)
		invalid := ""
		if err != nil {
			invalid, out = err.Error(), ""
			problems = append(problems, Problem{Trigger: t.Name, Node: id, Block: t.BlockName, Reason: ReasonInvalidConfig, Message: invalid, Key: ik})
		}
		item, p := buildItem(snap, n, t, block, action, gen, out, "", "")
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		if invalid != "" {
			item.BlockReason, item.BlockMessage, item.Payload = ReasonInvalidConfig, invalid, fleetwave.AttemptPayload{}
		}
		// A scheduled action (backup, ...) is operational: it leaves the
		// instance's version, config hash, state and owner as they are.
		leaveInstance(&item)
		item.Payload.Operational = true
		if observed.ManagedBy != "" && observed.ManagedBy != fleetwave.ManagedByCLI {
			item.ManagedBy = observed.ManagedBy
		}
		if observed.ManagedBy == fleetwave.ManagedByCLI && !t.AutoTakeover {
			item.SkipReason, item.Payload = fleetwave.ReasonCLIManaged, fleetwave.AttemptPayload{}
		}
		items = append(items, rankedItem{rank: priorityRank(snap.Config.PriorityOrder, item.Criticality), item: &item})
	}
	items, _ = place(obs, t.Name, block, items, nil, opts)
	spec.Items = sortItems(items)
	return spec, problems
}
