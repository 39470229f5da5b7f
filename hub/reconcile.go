package hub

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/credstore"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// Hub-owned Redis keys (outside the engine's): schedule fires and handled
// manual requests. Losing them costs at most one extra fire of each
// schedule; manual requests are re-checked against the engine's rollouts.
const (
	keySchedules = "fleetwave:hub:schedules" // hash trigger -> last fire (unix ms)
	keyManual    = "fleetwave:hub:manual"    // hash request name -> rollout id ("" = nothing to do)
)

// reconcilerOptions builds the options every plan uses: credentials for
// templates and the check of rendered configs against config_schema.
func (h *Hub) reconcilerOptions() reconciler.Options {
	opts := reconciler.Options{ValidateConfig: schema.ValidateConfig}
	if h.creds != nil {
		opts.Credential = h.creds.GetOrCreate
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

// reconcileStep plans the snapshot in force against the observations and
// hands the rollouts to the engine: reconciliation triggers, due schedules
// and new manual requests.
func (h *Hub) reconcileStep(ctx context.Context) {
	fence := h.currentFence()
	h.mu.Lock()
	snap := h.snapshot
	h.mu.Unlock()
	if fence == 0 || snap == nil {
		return
	}
	start := time.Now()
	defer func() { h.metrics.reconcileSecs.Observe(time.Since(start).Seconds()) }()
	observedAt := h.clock.Now()
	obs, version, err := h.eng.Observe(ctx)
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read observations")
		}
		return
	}
	opts := h.reconcilerOptions()
	// Only nodes that reported can be reconciled: without an observation the
	// action (install or upgrade, or nothing) is unknown. This also makes a
	// hub that lost Redis wait for the agents' next reports instead of
	// re-installing the fleet.
	reported, awaiting := splitReported(snap, obs)
	plan := reconciler.PlanWith(reported, obs, observedAt, opts)
	plan.Holds = append(plan.Holds, awaiting...)
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
	actor := ""
	if info, err := h.repo.CommitInfo(ctx, snap.Commit); err == nil {
		actor = info.Email
	}
	specs := plan.Rollouts
	specs = append(specs, h.dueSchedules(ctx, snap, obs, observedAt, opts)...)
	for _, spec := range specs {
		if spec.Source.Actor == "" {
			spec.Source.Actor = actor
		}
		spec.ObservedVersion = version
		h.createRollout(ctx, fence, spec)
	}
	h.manualRequests(ctx, fence, snap, obs, version, opts, actor)
	h.mu.Lock()
	h.holds, h.problems = plan.Holds, plan.Problems
	h.mu.Unlock()
}

func (h *Hub) createRollout(ctx context.Context, fence int64, spec fleetwave.RolloutSpec) string {
	id, items, err := h.eng.CreateRollout(ctx, fence, spec)
	if err != nil {
		h.log.Warn().Err(err).Str("brc", spec.Source.Object.Name()).Msg("create rollout")
		return ""
	}
	if id != "" {
		h.metrics.itemsCreated.Add(float64(len(items)))
		h.log.Info().Str("rollout", id).Int("items", len(items)).Int64("generation", spec.Source.Generation).
			Str("commit", spec.Source.Commit).Str("source", string(spec.Source.Kind)).Int("max_concurrent", spec.MaxConcurrent).Msg("rollout created")
	}
	return id
}

// dueSchedules returns the rollouts of schedule triggers whose tick came,
// recording each fire so a tick runs once (and a tick missed while the hub
// was down runs once at start).
func (h *Hub) dueSchedules(ctx context.Context, snap *fleetwave.Snapshot, obs fleetwave.Observations, now time.Time, opts reconciler.Options) []fleetwave.RolloutSpec {
	raw, err := h.redis.client.HGetAll(ctx, keySchedules).Result()
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read schedule fires")
		}
		return nil
	}
	last := map[string]time.Time{}
	for name, v := range raw {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			last[name] = time.UnixMilli(ms).UTC()
		}
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
			if err := h.redis.client.HSet(ctx, keySchedules, f.Trigger, f.Record.UnixMilli()).Err(); err != nil {
				h.log.Warn().Err(err).Str("brc", f.Trigger).Msg("record schedule fire")
			}
		}
	}
	h.mu.Lock()
	h.nextFire = next
	h.mu.Unlock()
	return specs
}

// manualRequests creates the rollout of each rollouts/<name> request once:
// its targets are resolved at that moment and pinned, so nodes labelled
// later are never added. A request that can never run (no matching node)
// is recorded with its error code.
func (h *Hub) manualRequests(ctx context.Context, fence int64, snap *fleetwave.Snapshot, obs fleetwave.Observations, version int64, opts reconciler.Options, actor string) {
	if len(snap.Rollouts) == 0 {
		return
	}
	done, err := h.redis.client.HGetAll(ctx, keyManual).Result()
	if err != nil {
		if ctx.Err() == nil { // not at shutdown
			h.log.Warn().Err(err).Msg("read manual requests")
		}
		return
	}
	for _, name := range sortedKeys(snap.Rollouts) {
		if _, ok := done[name]; ok {
			continue
		}
		req := snap.Rollouts[name]
		spec, err := reconciler.PlanManual(snap, obs, req, opts)
		var re *reconciler.RequestError
		if errors.As(err, &re) && re.Code == fleetwave.ReasonObserveMode {
			continue // try again once enforcement is on
		}
		outcome := ""
		if err != nil {
			code := "invalid_request"
			if re != nil {
				code = re.Code
			}
			outcome = "error:" + code
			h.log.Warn().Str("request", name).Str("code", code).Str("error", err.Error()).Msg("manual rollout refused")
		} else {
			spec.ObservedVersion, spec.Source.Actor = version, actor
			outcome = h.createRollout(ctx, fence, spec)
		}
		if err := h.redis.client.HSet(ctx, keyManual, name, outcome).Err(); err != nil {
			h.log.Warn().Err(err).Str("request", name).Msg("record manual request")
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// manualOutcomes returns the handled manual requests (name -> rollout id or
// "error:<code>") for status.
func (h *Hub) manualOutcomes(ctx context.Context) map[string]string {
	m, err := h.redis.client.HGetAll(ctx, keyManual).Result()
	if err != nil {
		return nil
	}
	return m
}

// driftOf is the observe-mode view of one node, for status/nodes.
func driftOf(entries []reconciler.DriftEntry, node string) []reconciler.DriftEntry {
	var out []reconciler.DriftEntry
	for _, e := range entries {
		if e.Node == node {
			out = append(out, e)
		}
	}
	return out
}

// splitReported returns a copy of snap holding only the nodes that have a
// full report, and a hold (awaiting_report) for each other node.
func splitReported(snap *fleetwave.Snapshot, obs fleetwave.Observations) (*fleetwave.Snapshot, []reconciler.Problem) {
	var holds []reconciler.Problem
	nodes := make(map[string]*fleetwave.Node, len(snap.Nodes))
	for id, n := range snap.Nodes {
		if obs[id] == nil {
			holds = append(holds, reconciler.Problem{Node: id, Reason: fleetwave.ReasonAwaitingReport, Message: "no report from this node's agent yet"})
			continue
		}
		nodes[id] = n
	}
	if len(holds) == 0 {
		return snap, nil
	}
	cp := *snap
	cp.Nodes = nodes
	sort.Slice(holds, func(i, j int) bool { return holds[i].Node < holds[j].Node })
	return &cp, holds
}
