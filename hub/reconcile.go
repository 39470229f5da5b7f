package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/credstore"
	"github.com/fleetwave/fleetwave/internal/laps"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// reconcilerOptions builds the options every plan uses: credentials for
// templates and the check of rendered configs against config_schema.
// Templates get credentials sealed (see seal.go): rendered configs go to
// Redis, and only PollAttempts, answering the node's agent, puts the values
// in. The config_schema check sees the values.
func (h *Hub) reconcilerOptions() reconciler.Options {
	opts := reconciler.Options{ValidateConfig: schema.ValidateConfig, Renders: &h.renders}
	if h.creds != nil && h.sealer != nil {
		opts.Credential = h.sealer.credential(h.creds.GetOrCreate)
		opts.ValidateConfig = h.sealer.validateConfig(schema.ValidateConfig)
	} else {
		opts.Credential = func(string, string, int) (string, error) {
			return "", errors.New("credentials are not configured: set credentials_key_file in hub.yaml")
		}
	}
	return opts
}

func openCredentials(cfg Config) (*credstore.Store, error) {
	if cfg.CredentialsKeyFile == "" {
		return nil, nil
	}
	key, err := readKey(cfg.CredentialsKeyFile)
	if err != nil {
		return nil, err
	}
	return credstore.Open(filepath.Join(cfg.DataDir, "credentials"), key)
}

// slowReconcile is how long a reconcile may take before its log line
// (with the time of each phase) is a warning.
const slowReconcile = 2 * time.Second

// reconcileStep plans the snapshot in force against the observations and
// hands the rollouts to the engine: reconciliation triggers (one event per
// generation, gathered by quiescence_seconds), due schedules and new
// manual requests. Only nodes that reported are planned (a node reporting
// later joins its trigger's rollout); draining nodes are planned like the
// others and the engine holds their items.
func (h *Hub) reconcileStep(ctx context.Context) {
	fence := h.currentFence()
	h.mu.Lock()
	snap := h.snapshot
	h.mu.Unlock()
	if fence == 0 || snap == nil {
		return
	}
	start := time.Now()
	phases := laps.Begin(start)
	defer func() {
		took := time.Since(start)
		h.metrics.reconcileSecs.Observe(took.Seconds())
		h.metrics.reconcileSteps(phases)
		h.sent.reconciled(took)
		ev := h.log.Debug()
		if took >= slowReconcile {
			ev = h.log.Warn()
		}
		ev.Int64("took_ms", took.Milliseconds()).Func(lapFields(phases)).Str("commit", snap.Commit).Msg("reconcile")
	}()
	h.planning.Lock() // after the push plans reading and planning now
	h.planning.Unlock()
	phases.Lap("wait")
	observedAt := h.clock.Now()
	obs, version, err := h.eng.Observe(ctx)
	phases.Lap("observe")
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read observations")
		}
		return
	}
	seen := make(map[string]bool, len(obs))
	for n := range obs {
		seen[n] = true
	}
	h.asks.reconciled(seen, observedAt, snap)
	recordsPending := h.gitRecords(ctx, fence)
	if _, err := h.eng.SetDrained(ctx, fence, drainedNodes(snap)); err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("set draining nodes")
		}
		return
	}
	phases.Lap("drained")
	opts := h.reconcilerOptions()
	opts.RequireReport = true
	plan := reconciler.PlanWith(snap, obs, observedAt, opts)
	phases.Lap("plan")
	h.mu.Lock()
	known := map[reconciler.Problem]bool{}
	for _, p := range h.problems {
		known[p] = true
	}
	h.mu.Unlock()
	for _, p := range plan.Problems {
		if !known[p] { // logged once, not at every reconcile
			h.log.Warn().Str("brc", p.Trigger).Str("node", p.Node).Str("block", p.Block).Str("reason", p.Reason).Str("error", p.Message).Msg("instance cannot run as written")
		}
	}
	actor := h.commitActor(ctx, snap)
	h.history.observe(obs)
	approvals, err := h.gateApprovals(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("read approvals")
		}
		return
	}
	specs, gated := h.gate(snap, plan.Rollouts, approvals)
	specs = h.quiescent(ctx, snap, specs, observedAt)
	specs = append(specs, h.dueSchedules(ctx, fence, snap, obs, observedAt, opts)...)
	for _, spec := range specs {
		if spec.Source.Actor == "" {
			spec.Source.Actor = actor
		}
		spec.ObservedVersion = version
		if spec.Once {
			h.createRollout(ctx, fence, spec)
		} else {
			h.createPlanned(ctx, fence, spec)
		}
	}
	phases.Lap("create")
	h.sent.prune(time.Now())
	// the requests and approvals wait for what Git records of them (the
	// read kicks a reconcile when done)
	if !recordsPending {
		h.manualRequests(ctx, fence, snap, obs, version, opts, actor)
	}
	phases.Lap("requests")
	if !recordsPending {
		h.approvalsStep(ctx, fence, snap, obs, version, opts)
	}
	phases.Lap("approvals")
	h.mu.Lock()
	h.holds, h.problems, h.gated = plan.Holds, plan.Problems, gated
	mark := waitsFingerprint(h.gated, h.quiet, h.approvalWaits, h.requestsWaiting)
	changed := mark != h.waitsMark
	h.waitsMark = mark
	h.mu.Unlock()
	if changed {
		h.kick(h.statusNow)
	}
}

// commitActor is who made the snapshot's commit: its author, or the caller
// of the API write the hub committed.
func (h *Hub) commitActor(ctx context.Context, snap *fleetwave.Snapshot) string {
	// the commit's author and actor trailer, read once per commit: the
	// read waits for the mirror's lock, which a status commit compacting
	// the mirror holds for seconds at 100,000 nodes, and every reconcile
	// asked again
	h.mu.Lock()
	c := h.actorOf
	h.mu.Unlock()
	if c.commit != snap.Commit {
		info, err := h.repo.CommitInfo(ctx, snap.Commit)
		if err != nil {
			return ""
		}
		c = commitAuthor{commit: snap.Commit, email: info.Email}
		for _, tr := range info.Trailers {
			if tr.Key == gitsync.TrailerActor {
				c.trailer, c.hasTrailer = tr.Value, true
			}
		}
		h.mu.Lock()
		h.actorOf = c
		h.mu.Unlock()
	}
	if c.hasTrailer && h.own.has(snap.Commit) {
		return c.trailer // an API write the hub committed: its caller
	}
	return c.email
}

// commitAuthor is what commitActor read of a commit.
type commitAuthor struct {
	commit, email, trailer string
	hasTrailer             bool
}

// changedTriggers returns the reconciliation BRCs of snap that prev did not
// have or had in another version, when they are all a commit changed
// (reconciler.ChangedTriggers). Nil otherwise, for the first snapshot and
// for the same commit.
func changedTriggers(prev, snap *fleetwave.Snapshot) map[string]bool {
	if prev == nil || prev == snap || prev.Commit == snap.Commit {
		return nil
	}
	changed := reconciler.ChangedTriggers(prev, snap)
	for name := range changed {
		if t := snap.Triggers[name]; t.TriggerType != "" && t.TriggerType != fleetwave.TriggerReconciliation {
			delete(changed, name)
		}
	}
	return changed
}

// pushStep plans and starts the BRCs a push changed, beside the reconcile
// loop, which may be planning the whole fleet: from the observations of
// their nodes alone, so a push reaches its first node in the time of its
// own plan, which runs beside the next push's (up to pushPlans at once).
// The whole plan that follows plans them again: the engine takes
// the same event once (the second joins it with nothing new). A BRC whose
// new generation waits for its quiescence_seconds, or a commit that changes
// more than BRCs, is left to the reconcile loop.
//
// A sync asks for both a push plan and a reconcile through it: the
// reconcile is asked for once the push's plan holds planning, so that
// the reconcile plans after it (planPush).
func (h *Hub) pushStep(ctx context.Context) {
	asked := h.pushAsked.Swap(0)
	fence := h.currentFence()
	changed, snap := h.pushChanges(fence)
	if len(changed) > 0 {
		h.planning.RLock() // released by planPush once it planned
	}
	if asked != 0 {
		h.kick(h.reconcileNow)
	}
	if len(changed) == 0 {
		return
	}
	plan := func(ctx context.Context) { h.planPush(ctx, fence, snap, changed, asked) }
	select {
	case h.pushSlots <- struct{}{}:
		// beside the loop: the next push's plan does not wait for this
		// one's creation (25 s for 100,000 items); the engine refuses an
		// older generation created after a newer one
		h.pushing.Go(func() {
			defer func() { <-h.pushSlots }()
			h.runStep(ctx, plan)
		})
	default:
		plan(ctx) // every slot taken: this push waits its turn
	}
}

// pushChanges takes the snapshot in force as the pushed one and returns
// the BRCs it changed since the last pushed one that a push plans (none
// while this hub does not lead or only observes).
func (h *Hub) pushChanges(fence int64) (map[string]bool, *fleetwave.Snapshot) {
	h.mu.Lock()
	snap, prev := h.snapshot, h.pushed
	if fence > 0 {
		// a follower leaves what it synced to the push plan of the
		// leader it may become
		h.pushed = snap
	}
	h.mu.Unlock()
	if fence == 0 || snap == nil || snap.Config.ReconcileMode == "observe" {
		return nil, snap
	}
	changed := changedTriggers(prev, snap)
	for name := range changed {
		if quiescence(snap, name) > 0 {
			delete(changed, name)
		}
	}
	return changed, snap
}

// pushPlans is how many push plans run at once beside the push loop: a
// push arriving while they all run is planned by the loop itself, after
// them.
const pushPlans = 4

// planPush is the plan and creation of the BRCs changed of one push
// (pushStep); asked is when the sync asked for it (Unix nanoseconds). The
// caller holds planning (shared) for it: it is released once the push is
// planned, before the creation.
func (h *Hub) planPush(ctx context.Context, fence int64, snap *fleetwave.Snapshot, changed map[string]bool, asked int64) {
	planned := sync.OnceFunc(h.planning.RUnlock)
	defer planned()
	start := time.Now()
	steps := startLaps(start, asked)
	defer func() {
		took := time.Since(start)
		h.metrics.reconcileSecs.Observe(took.Seconds())
		ev := h.log.Debug()
		if took+steps.Total("wait") >= slowSync {
			ev = h.log.Warn() // seen by a hub logging at warn: what held a push back
		}
		ev.Str("commit", snap.Commit).Int("brcs", len(changed)).Int64("took_ms", took.Milliseconds()).Func(lapFields(steps)).Msg("push planned")
	}()
	// a reconcile starts after this plan: both would plan the BRCs (a
	// BRC of every node, planned by both at once on a busy hub, made a
	// push of 100,000 nodes wait 5.8 s for its plan instead of 2.9);
	// the creation below does not hold it back
	scope := map[string]bool{}
	for name := range changed {
		for _, id := range reconciler.Scope(snap, snap.Triggers[name]) {
			scope[id] = true
		}
	}
	steps.Lap("scope")
	if h.duringPushPlan != nil {
		h.duringPushPlan()
	}
	observedAt := h.clock.Now()
	obs, version, err := h.eng.ObserveNodes(ctx, sortedKeys(scope))
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("read observations")
		}
		return
	}
	steps.Lap("observe")
	approvals, err := h.gateApprovals(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("read approvals")
		}
		return
	}
	steps.Lap("approvals")
	opts := h.reconcilerOptions()
	opts.RequireReport = true
	opts.Only = changed
	plan := reconciler.PlanWith(snap, obs, observedAt, opts)
	specs, _ := h.gate(snap, plan.WithItems(), approvals)
	planned()
	steps.Lap("plan")
	actor := h.commitActor(ctx, snap)
	steps.Lap("actor")
	for _, spec := range specs {
		if spec.Source.Actor == "" {
			spec.Source.Actor = actor
		}
		spec.ObservedVersion = version
		h.createPlanned(ctx, fence, spec)
	}
	steps.Lap("create")
}

// waitsFingerprint is a deterministic digest of the waits status shows
// that the engine does not hold.
func waitsFingerprint(gated map[string]approvalWait, quiet map[string]time.Time, approvalWaits, requests map[string]string) string {
	b, _ := json.Marshal([]any{gated, quiet, approvalWaits, requests}) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// drainedNodes returns the ids of the snapshot's draining nodes, sorted.
func drainedNodes(snap *fleetwave.Snapshot) []string {
	var out []string
	for _, id := range snap.SortedNodeIDs() {
		if snap.Nodes[id].Drain {
			out = append(out, id)
		}
	}
	return out
}

// createPlanned hands a rollout of the reconcile's plan to the engine,
// leaving out the items the engine created from this hub's plans moments
// ago (sentItems), and the whole rollout while another createPlanned
// (the push step's, a reconcile's) is creating it.
func (h *Hub) createPlanned(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) {
	if !h.sent.begin(spec) {
		h.log.Debug().Str("brc", spec.Source.Object.Name()).Int64("generation", spec.Source.Generation).Msg("rollout being created beside: left to that creation")
		return
	}
	defer h.sent.end(spec)
	now := time.Now()
	spec, _, again := h.sent.filter(fence, spec, now)
	if len(again) > 0 {
		keys := make([]fleetwave.InstanceKey, 0, len(again))
		for k := range again {
			keys = append(keys, k)
		}
		active, err := h.eng.ActiveItems(ctx, keys)
		if err != nil {
			h.log.Warn().Err(err).Str("brc", spec.Source.Object.Name()).Msg("read the active items: sending the plan whole")
		} else {
			spec, _ = h.sent.stillActive(fence, spec, again, active, now)
		}
	}
	r, ok := h.create(ctx, fence, spec)
	if !ok {
		return
	}
	// recorded from when the engine answered: creating 100,000 items takes
	// a minute, longer than what prune keeps
	done := time.Now()
	h.sent.created(fence, spec, r.Created, r.Items, done)
	if r.Rollout == "" {
		return
	}
	// what the engine did not create, and no entry says why: an item of
	// the event may hold the instance (created by an earlier leader, or
	// before a slow creation's entries were pruned)
	keys := h.sent.unknown(fence, spec)
	if len(keys) == 0 {
		return
	}
	active, err := h.eng.ActiveItems(ctx, keys)
	if err != nil {
		h.log.Warn().Err(err).Str("rollout", r.Rollout).Msg("read the active items")
		return
	}
	h.sent.adopt(fence, spec, r.Rollout, active, done)
}

func (h *Hub) createRollout(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) (string, engine.CreateOutcome) {
	r, _ := h.create(ctx, fence, spec)
	return r.ID, r.Outcome
}

func (h *Hub) create(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) (engine.CreateResult, bool) {
	if h.beforeCreate != nil {
		h.beforeCreate(spec)
	}
	r, err := h.eng.CreateRolloutResult(ctx, fence, spec)
	if err != nil {
		h.log.Warn().Err(err).Str("brc", spec.Source.Object.Name()).Msg("create rollout")
		return engine.CreateResult{}, false
	}
	id, items, outcome := r.ID, r.Items, r.Outcome
	if len(items) > 0 {
		h.kick(h.stepNow) // dispatch now, not at the next tick
		h.metrics.itemsCreated.Add(float64(len(items)))
		msg := "rollout created"
		if outcome == engine.OutcomeJoined {
			msg = "items joined their rollout"
		}
		h.log.Info().Str("rollout", id).Int("items", len(items)).Int64("generation", spec.Source.Generation).
			Str("commit", spec.Source.Commit).Str("source", string(spec.Source.Kind)).Int("max_concurrent", spec.MaxConcurrent).Msg(msg)
	}
	return r, true
}

// quiescence returns a trigger's quiescence_seconds (the config's default
// when the trigger sets none).
func quiescence(snap *fleetwave.Snapshot, trigger string) time.Duration {
	secs := snap.Config.QuiescenceSeconds
	if t := snap.Triggers[trigger]; t != nil && t.QuiescenceSeconds > 0 {
		secs = t.QuiescenceSeconds
	}
	return time.Duration(secs) * time.Second
}

// genSeen is when this hub first saw a generation of a trigger.
type genSeen struct {
	gen int64
	at  time.Time
}

// quiescent returns the specs whose event may start now: a generation the
// engine already knows (its rollout exists: later nodes join it at once),
// or one that stayed the newest for its trigger's quiescence_seconds, so
// a burst of commits to one BRC becomes one rollout (of the last
// generation). The others wait, with reason quiescence in status until the
// time they may start. A hub that restarts counts the wait again from its
// start: it may start later, never twice. now is when the plan's
// observations were read, so a rollout whose wait ended is planned from
// every node that had reported by then (not from a read that preceded the
// end of its wait).
func (h *Hub) quiescent(ctx context.Context, snap *fleetwave.Snapshot, specs []fleetwave.RolloutSpec, now time.Time) []fleetwave.RolloutSpec {
	var known map[fleetwave.ObjectKey]int64
	out := make([]fleetwave.RolloutSpec, 0, len(specs))
	waiting := map[string]time.Time{}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[fleetwave.ObjectKey]genSeen{}
	}
	for _, spec := range specs {
		obj, gen := spec.Source.Object, spec.Source.Generation
		q := quiescence(snap, obj.Name())
		if q <= 0 {
			out = append(out, spec)
			continue
		}
		if known == nil {
			h.mu.Unlock()
			k, err := h.eng.SourceGenerations(ctx)
			h.mu.Lock()
			if err != nil {
				h.log.Warn().Err(err).Msg("read known generations")
				return out
			}
			known = k
		}
		if known[obj] >= gen {
			out = append(out, spec)
			continue
		}
		s := h.seen[obj]
		if s.gen != gen {
			s = genSeen{gen: gen, at: now}
			h.seen[obj] = s
		}
		if until := s.at.Add(q); now.Before(until) {
			waiting[obj.Name()] = until
			continue
		}
		out = append(out, spec)
	}
	h.quiet = waiting
	if len(waiting) > 0 {
		next := time.Time{}
		for _, t := range waiting {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		time.AfterFunc(max(next.Sub(now), 10*time.Millisecond), func() { h.kick(h.reconcileNow) })
	}
	return out
}

// dueSchedules returns the rollouts of schedule triggers whose tick came,
// recording each fire so a tick runs once (and a tick missed while the hub
// was down runs once at start). A tick's rollout is a one-shot event with
// a deterministic id, so a fire recorded late is never a second rollout.
func (h *Hub) dueSchedules(ctx context.Context, fence int64, snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, opts reconciler.Options) []fleetwave.RolloutSpec {
	last, err := h.eng.ScheduleFires(ctx)
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read schedule fires")
		}
		return nil
	}
	var specs []fleetwave.RolloutSpec
	next := map[string]time.Time{}
	for _, f := range reconciler.Schedules(snap, last, now) {
		next[f.Trigger] = f.NextFireAt
		if f.Error != "" {
			h.log.Warn().Str("brc", f.Trigger).Str("error", f.Error).Msg("schedule cannot fire")
		}
		if f.Due && f.Held == "" {
			spec, problems := reconciler.PlanSchedule(snap, obs, snap.Triggers[f.Trigger], f.Tick, opts)
			for _, p := range problems {
				h.log.Warn().Str("brc", p.Trigger).Str("node", p.Node).Str("reason", p.Reason).Str("error", p.Message).Msg("instance cannot run as written")
			}
			if len(spec.Items) > 0 {
				specs = append(specs, spec)
			}
			h.log.Info().Str("brc", f.Trigger).Time("tick", f.Tick).Int("items", len(spec.Items)).Msg("schedule fired")
		}
		if !f.Record.IsZero() {
			if err := h.eng.RecordScheduleFire(ctx, fence, f.Trigger, f.Record); err != nil {
				h.log.Warn().Err(err).Str("brc", f.Trigger).Msg("record schedule fire")
			}
		}
	}
	h.mu.Lock()
	h.nextFire = next
	h.mu.Unlock()
	return specs
}

// manualRequests creates the rollout of each rollouts/<name> request
// exactly once, even across a total loss of Redis:
//   - a request is handled when the engine has its rollout or its refusal,
//     or when the status committed to Git records it (after Redis was
//     lost, Git is what remembers);
//   - its targets are resolved once and pinned in its rollout (a one-shot
//     event: one item per instance, an item whose instance is busy waits
//     behind it with reason instance_busy), so nodes labelled later are
//     never added;
//   - the rollout is created held (reason claim) and dispatches nothing
//     until a status commit holding its record landed (statusStep releases
//     it): if Redis is lost before, nothing ran and the request is planned
//     again; after, Git says it was handled.
//
// A request that can never run (no matching node, unknown brc, a version
// that conflicts with its brc) is recorded with its error code, in status
// and the API. In observe mode a request waits (reason observe_mode).
func (h *Hub) manualRequests(ctx context.Context, fence int64, snap *fleetwave.Snapshot, obs fleetwave.Observations, version int64, opts reconciler.Options, actor string) {
	if len(snap.Rollouts) == 0 {
		return
	}
	outcomes, err := h.eng.RequestOutcomes(ctx)
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read request outcomes")
		}
		return
	}
	h.mu.Lock()
	inGit := maps.Clone(h.gitRequests) // written under mu by status commits meanwhile
	h.mu.Unlock()
	waiting := map[string]string{}
	for _, name := range sortedKeys(snap.Rollouts) {
		if _, ok := outcomes[name]; ok {
			continue
		}
		if _, ok := inGit[name]; ok {
			continue
		}
		id := reconciler.ManualRolloutID(name)
		if r, err := h.eng.RolloutRecord(ctx, id); err == nil && r.Source.Object == fleetwave.Key(fleetwave.KindRollout, name) {
			continue
		} else if err != nil && !errors.Is(err, engine.ErrNotFound) {
			h.log.Warn().Err(err).Str("request", name).Msg("read request rollout")
			continue
		}
		req := snap.Rollouts[name]
		ropts := opts
		if t := snap.Triggers[req.BRC]; t != nil {
			if targets, err := reconciler.ResolveTargets(snap, req); err == nil {
				keys := make([]fleetwave.InstanceKey, len(targets))
				for i, n := range targets {
					keys[i] = fleetwave.InstanceKey{Node: n, Block: t.BlockName}
				}
				active, err := h.eng.ActiveInstances(ctx, keys)
				if err != nil {
					h.log.Warn().Err(err).Str("request", name).Msg("read active instances")
					continue
				}
				ropts.ActiveInstance = func(k fleetwave.InstanceKey) bool { return active[k] }
			}
		}
		spec, err := reconciler.PlanManual(snap, obs, req, ropts)
		var re *reconciler.RequestError
		if errors.As(err, &re) && re.Code == fleetwave.ReasonObserveMode {
			waiting[name] = fleetwave.ReasonObserveMode
			continue // try again once enforcement is on
		}
		if err != nil {
			code, msg := "invalid_request", err.Error()
			if re != nil {
				code, msg = re.Code, re.Message
			}
			if _, err := h.eng.RecordRequest(ctx, fence, name, engine.RequestOutcome{Code: code, Message: msg}); err != nil {
				h.log.Warn().Err(err).Str("request", name).Msg("record refused request")
				continue
			}
			h.log.Warn().Str("request", name).Str("code", code).Str("error", msg).Msg("manual rollout refused")
			h.kick(h.statusNow)
			continue
		}
		if h.gatedRequest(spec) {
			msg := "the request applies config and approval is required: submit an approval request instead (it pins the version, the nodes and a batch size: fleetwave approval submit)"
			if _, err := h.eng.RecordRequest(ctx, fence, name, engine.RequestOutcome{Code: fleetwave.ReasonApprovalRequired, Message: msg}); err != nil {
				h.log.Warn().Err(err).Str("request", name).Msg("record refused request")
				continue
			}
			h.log.Warn().Str("request", name).Str("code", fleetwave.ReasonApprovalRequired).Msg("manual rollout refused")
			h.kick(h.statusNow)
			continue
		}
		spec.ObservedVersion, spec.Source.Actor = version, actor
		spec.Hold = fleetwave.ReasonClaim
		if id, outcome := h.createRollout(ctx, fence, spec); id == "" && outcome != "" {
			// nothing could be created (a split group's member taken):
			// visible, and final like any other outcome
			if _, err := h.eng.RecordRequest(ctx, fence, name, engine.RequestOutcome{Code: "nothing_to_do",
				Message: "no item could be created: " + string(outcome)}); err != nil {
				h.log.Warn().Err(err).Str("request", name).Msg("record request")
			}
		}
		h.kick(h.statusNow)
	}
	h.mu.Lock()
	h.requestsWaiting = waiting
	h.mu.Unlock()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
