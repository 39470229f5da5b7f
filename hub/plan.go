package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
	"github.com/fleetwave/fleetwave/status"
)

// PlanReport is what a change between two revisions would do: the output of
// `fleetwave plan`. It holds config hashes, never rendered values.
type PlanReport struct {
	Base     string           `json:"base"`
	Head     string           `json:"head"`
	Objects  []ObjectChange   `json:"objects"`
	Rollouts []PlannedRollout `json:"rollouts"`
	// Requests are the manual rollout requests (rollouts/<name>) the change
	// adds: the targets they would pin now, or why they would be refused.
	Requests []PlannedRequest `json:"requests,omitempty"`
	// Schedules are the schedule triggers the change adds or modifies,
	// with their next tick.
	Schedules []PlannedSchedule `json:"schedules,omitempty"`
	// ApprovalRequired is the policy the report assumes (hub.yaml
	// approval.required: as the hub last committed it in status, unless
	// asked otherwise); ApprovalsNeeded counts the rollouts that would wait
	// for an approved request under it.
	ApprovalRequired bool `json:"approval_required"`
	// ApprovalPolicyFrom says where the policy came from: "status" (what
	// the hub committed), "flag", or "default" (off: no status says).
	ApprovalPolicyFrom string               `json:"approval_policy_from"`
	ApprovalsNeeded    int                  `json:"approvals_needed"`
	Problems           []reconciler.Problem `json:"problems,omitempty"`
	// Errors are the head's validation errors: such a commit would be rejected.
	Errors []fleetwave.FileError `json:"errors,omitempty"`
}

// NoChanges reports whether the change would do nothing at all.
func (p *PlanReport) NoChanges() bool {
	return len(p.Objects) == 0 && len(p.Rollouts) == 0 && len(p.Errors) == 0 && len(p.Problems) == 0 &&
		len(p.Requests) == 0 && len(p.Schedules) == 0
}

// ObjectChange is one object whose content (and so generation) changes.
type ObjectChange struct {
	Key    fleetwave.ObjectKey `json:"key"`
	Path   string              `json:"path"`
	Change string              `json:"change"` // added, modified, removed
	From   int64               `json:"from_generation"`
	To     int64               `json:"to_generation"`
}

// PlannedRollout is the rollout one trigger would start, with its waves.
type PlannedRollout struct {
	ID            string `json:"id"`
	Trigger       string `json:"trigger"`
	Generation    int64  `json:"generation"`
	MaxConcurrent int    `json:"max_concurrent"`
	// The failure thresholds that would halt it (0 = none): a count of
	// failed items, a percentage.
	FailureThreshold        int           `json:"failure_threshold,omitempty"`
	FailureThresholdPercent float64       `json:"failure_threshold_percent,omitempty"`
	Lanes                   []PlannedLane `json:"lanes"`
	// ConfigChange: the rollout changes versions or rendered configs, so
	// under the approval gate it needs an approved request.
	ConfigChange     bool `json:"config_change"`
	ApprovalRequired bool `json:"approval_required"`
	// TargetVersion is the BRC's version the rollout brings.
	TargetVersion string `json:"target_version,omitempty"`
	// RollbackExempt: every config item returns its node to a version the
	// node reported before (status/nodes observed_versions): no approval.
	RollbackExempt bool `json:"rollback_exempt,omitempty"`
	// Approvals are the requests in status pinning this BRC and version
	// ("id (state)"): what the merge's rollout would run under.
	Approvals []string `json:"approvals,omitempty"`
}

// PlannedRequest is a manual rollout request and what it would do now.
type PlannedRequest struct {
	Name    string   `json:"name"`
	BRC     string   `json:"brc"`
	Targets []string `json:"targets,omitempty"` // resolved once, pinned
	Rollout string   `json:"rollout,omitempty"` // the rollout it would create
	Code    string   `json:"error_code,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// PlannedSchedule is a schedule trigger the change touches.
type PlannedSchedule struct {
	Trigger    string `json:"trigger"`
	Cron       string `json:"cron_expression"`
	Timezone   string `json:"timezone,omitempty"`
	NextFireAt string `json:"next_fire_at,omitempty"`
	Error      string `json:"error,omitempty"`
}

// PlannedLane is one owner's lane of a rollout, wave by wave.
type PlannedLane struct {
	Lane  string          `json:"lane"`
	Waves [][]PlannedItem `json:"waves"`
	// Waiting are the lane's items that would be created but wait outside
	// the waves, with their reason (node_draining: they go on once the
	// node is undrained).
	Waiting []PlannedItem `json:"waiting,omitempty"`
	// Apart are the lane's items created skipped or blocked (Skipped,
	// Blocked say why): never dispatched, they take no place in a wave,
	// as in the engine.
	Apart []PlannedItem `json:"apart,omitempty"`
}

// PlannedItem is one block action on one node.
type PlannedItem struct {
	Node          string `json:"node"`
	Block         string `json:"block"`
	Action        string `json:"action"`
	TargetVersion string `json:"target_version,omitempty"`
	ConfigHash    string `json:"config_hash,omitempty"`
	Criticality   string `json:"criticality"`
	// Windows names the maintenance windows the item waits for (empty when
	// it could go now), WaitsUntil when the next one opens.
	Windows    string `json:"windows,omitempty"`
	WaitsUntil string `json:"waits_until,omitempty"`
	// Blocked or Skipped: the item would be created but never dispatched
	// (e.g. invalid_config with its message, cli_managed).
	Blocked string `json:"blocked,omitempty"`
	Skipped string `json:"skipped,omitempty"`
	// Reason says why a waiting item waits (node_draining).
	Reason string `json:"reason,omitempty"`
}

// PlanRequest says what to compare.
type PlanRequest struct {
	Dir    string // the repository (a working copy)
	Branch string // the tracked branch
	Base   string // "" = merge base of Head with origin/<Branch> (else <Branch>)
	Head   string // "" = HEAD
	Now    time.Time
	// StatusBranch is where the hub commits status (default
	// DefaultStatusBranch): plan reads it as origin/<StatusBranch> when the
	// clone has it, else the status/ files at Base (status on the tracked
	// branch).
	StatusBranch string
	// ApprovalRequired, when set, overrides the approval policy the hub
	// committed in status (approval.required of hub.yaml): config rollouts
	// are then reported as needing an approved request.
	ApprovalRequired *bool
}

// Plan compares two revisions of the repository in req.Dir (see
// PlanRequest). Observations come from status/nodes at base, as the hub
// last committed them.
func Plan(ctx context.Context, req PlanRequest) (*PlanReport, error) {
	dir, branch, base, head, now := req.Dir, req.Branch, req.Base, req.Head, req.Now
	repo, done, err := gitsync.OpenLocal(dir, gitsync.WithNormalizer(normalizer{}))
	if err != nil {
		return nil, err
	}
	defer done()
	if head == "" {
		head = "HEAD"
	}
	headHash, err := repo.Resolve(head)
	if err != nil {
		return nil, err
	}
	var baseHash string
	if base != "" {
		if baseHash, err = repo.Resolve(base); err != nil {
			return nil, err
		}
	} else {
		tracked, err := repo.Resolve("refs/remotes/origin/" + branch)
		if err != nil {
			if tracked, err = repo.Resolve(branch); err != nil {
				return nil, fmt.Errorf("no base: neither origin/%s nor %s exists (use --base)", branch, branch)
			}
		}
		if baseHash, err = repo.MergeBase(tracked, headHash); err != nil {
			return nil, err
		}
	}
	v, err := schema.New()
	if err != nil {
		return nil, err
	}
	rep := &PlanReport{Base: baseHash, Head: headHash, Objects: []ObjectChange{}, Rollouts: []PlannedRollout{}}

	headSnap, verr, err := loadAt(ctx, repo, wholeLoad(v), headHash, nil)
	if err != nil {
		return nil, err
	}
	if verr != nil {
		rep.Errors = verr.Errors
		return rep, nil
	}
	var baseSnap *fleetwave.Snapshot
	if baseHash != "" {
		if baseSnap, _, err = loadAt(ctx, repo, wholeLoad(v), baseHash, nil); err != nil {
			return nil, err
		}
	}
	rep.Objects = objectChanges(baseSnap, headSnap)

	obs := fleetwave.Observations{}
	st := planStatus{}
	statusAt := baseHash
	sb := req.StatusBranch
	if sb == "" {
		sb = DefaultStatusBranch
	}
	if sb != branch {
		if c, err := repo.Resolve("refs/remotes/origin/" + sb); err == nil {
			statusAt = c
		} else if c, err := repo.Resolve(sb); err == nil {
			statusAt = c
		}
	}
	if statusAt != "" {
		files, err := repo.StatusFiles(ctx, statusAt)
		if err != nil {
			return nil, err
		}
		obs = observationsFromStatus(files)
		st = readPlanStatus(files)
	}
	switch {
	case req.ApprovalRequired != nil:
		rep.ApprovalRequired, rep.ApprovalPolicyFrom = *req.ApprovalRequired, "flag"
	case st.policyKnown:
		rep.ApprovalRequired, rep.ApprovalPolicyFrom = st.approvalRequired, "status"
	default:
		rep.ApprovalPolicyFrom = "default"
	}
	// plan never sees credentials: templates get a stable placeholder, so
	// instances are compared between base and head, never with real values
	opts := reconciler.Options{Credential: func(scope, name string, _ int) (string, error) {
		return "(credential " + scope + "/" + name + ")", nil
	}, ValidateConfig: schema.ValidateConfig}
	headPlan := reconciler.PlanWith(headSnap, obs, now, opts)
	already := map[string]bool{}
	if baseSnap != nil {
		for _, r := range reconciler.PlanWith(baseSnap, obs, now, opts).Rollouts {
			for _, it := range r.Items {
				already[itemKey(it)] = true
			}
		}
	}
	for _, spec := range headPlan.Rollouts {
		var items []fleetwave.ItemSpec
		for _, it := range spec.Items {
			if !already[itemKey(it)] {
				items = append(items, it)
			}
		}
		if len(items) == 0 {
			continue
		}
		rep.Rollouts = append(rep.Rollouts, plannedRollout(headSnap, spec, items, now))
	}
	rep.Problems = headPlan.Problems
	for _, name := range sortedKeys(headSnap.Rollouts) {
		if baseSnap != nil && baseSnap.Rollouts[name] != nil {
			continue // an existing request was handled (or refused) already
		}
		r := headSnap.Rollouts[name]
		pr := PlannedRequest{Name: name, BRC: r.BRC}
		spec, err := reconciler.PlanManual(headSnap, obs, r, opts)
		var re *reconciler.RequestError
		switch {
		case errors.As(err, &re):
			pr.Code, pr.Error = re.Code, err.Error()
		case err != nil:
			pr.Code, pr.Error = "invalid_request", err.Error()
		default:
			pr.Rollout = spec.BaseID
			for _, it := range spec.Items {
				pr.Targets = append(pr.Targets, it.Node)
			}
			sort.Strings(pr.Targets)
			if len(spec.Items) > 0 {
				rep.Rollouts = append(rep.Rollouts, plannedRollout(headSnap, spec, spec.Items, now))
			}
		}
		rep.Requests = append(rep.Requests, pr)
	}
	fires := map[string]reconciler.Fire{}
	for _, f := range reconciler.Schedules(headSnap, nil, now) {
		fires[f.Trigger] = f
	}
	for _, o := range rep.Objects {
		t := headSnap.Triggers[o.Key.Name()]
		if o.Key.Kind() != fleetwave.KindTrigger || t == nil || t.TriggerType != fleetwave.TriggerSchedule {
			continue
		}
		ps := PlannedSchedule{Trigger: t.Name, Cron: t.CronExpression, Timezone: t.Timezone, Error: fires[t.Name].Error}
		if at := fires[t.Name].NextFireAt; !at.IsZero() {
			ps.NextFireAt = at.UTC().Format(time.RFC3339)
		}
		rep.Schedules = append(rep.Schedules, ps)
	}
	for i := range rep.Rollouts {
		r := &rep.Rollouts[i]
		if t := headSnap.Triggers[r.Trigger]; t != nil {
			r.TargetVersion = t.TargetVersion
		}
		r.RollbackExempt = r.ConfigChange && rollbackExempt(configItems(r), func(node, block, version string) bool {
			return slices.Contains(st.history[node][block], version)
		})
		r.ApprovalRequired = r.ConfigChange && rep.ApprovalRequired && !r.RollbackExempt
		if r.ApprovalRequired {
			rep.ApprovalsNeeded++
			for _, a := range st.approvals {
				usable := a.State == fleetwave.ApprovalPending || a.State == fleetwave.ApprovalApproved || a.State == fleetwave.ApprovalConsumed
				if a.BRC == r.Trigger && a.TargetVersion == r.TargetVersion && usable {
					r.Approvals = append(r.Approvals, fmt.Sprintf("%s (%s)", a.ID, a.State))
				}
			}
		}
	}
	return rep, nil
}

// planStatus is what plan reads of the status the hub committed: the
// approval policy in force, the approval requests, the versions each node
// reported before.
type planStatus struct {
	policyKnown, approvalRequired bool
	approvals                     []fleetwave.Approval
	history                       map[string]map[string][]string
}

func readPlanStatus(files map[string][]byte) planStatus {
	st := planStatus{history: map[string]map[string][]string{}}
	for p, data := range files {
		switch kind, _ := status.ParsePath(p); kind {
		case status.KindSummary:
			if doc, err := status.DecodeSummary(data); err == nil && doc.Approval != nil {
				st.policyKnown, st.approvalRequired = true, doc.Approval.Required
			}
		case status.KindApproval:
			if doc, err := status.DecodeApproval(data); err == nil && doc.ID != "" {
				st.approvals = append(st.approvals, doc.Approval)
			}
		case status.KindNode:
			if doc, err := status.DecodeNode(data); err == nil && doc.Node != "" {
				st.history[doc.Node] = doc.ObservedVersions
			}
		}
	}
	sort.Slice(st.approvals, func(i, j int) bool { return st.approvals[i].ID < st.approvals[j].ID })
	return st
}

// configItems lists a planned rollout's items that change config, as item
// specs for the rollback check.
func configItems(r *PlannedRollout) []fleetwave.ItemSpec {
	var out []fleetwave.ItemSpec
	for _, l := range r.Lanes {
		var all []PlannedItem
		for _, w := range l.Waves {
			all = append(all, w...)
		}
		all = append(all, l.Waiting...)
		for _, it := range all {
			if it.Skipped == "" && it.Blocked == "" && it.TargetVersion != "" {
				out = append(out, fleetwave.ItemSpec{Node: it.Node, Block: it.Block, TargetVersion: it.TargetVersion})
			}
		}
	}
	return out
}

func itemKey(it fleetwave.ItemSpec) string {
	return strings.Join([]string{it.Node, it.Block, it.Action, it.TargetVersion, it.ConfigHash}, "\x00")
}

func objectChanges(base, head *fleetwave.Snapshot) []ObjectChange {
	out := []ObjectChange{}
	for key, o := range head.Objects {
		var prev fleetwave.Object
		var ok bool
		if base != nil {
			prev, ok = base.Objects[key]
		}
		switch {
		case !ok:
			out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "added", From: base.Generation(key), To: head.Generation(key)})
		case prev.Hash != o.Hash:
			out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "modified", From: base.Generation(key), To: head.Generation(key)})
		}
	}
	if base != nil {
		for key, o := range base.Objects {
			if _, ok := head.Objects[key]; !ok {
				out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "removed", From: base.Generation(key), To: base.Generation(key)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// plannedRollout lays a rollout's items out in lanes and waves as the
// engine would start them; an item whose node drains waits apart
// (node_draining) and takes no place in a wave.
func plannedRollout(snap *fleetwave.Snapshot, spec fleetwave.RolloutSpec, items []fleetwave.ItemSpec, now time.Time) PlannedRollout {
	pr := PlannedRollout{ID: spec.BaseID, Trigger: spec.Source.Object.Name(), Generation: spec.Source.Generation, MaxConcurrent: max(spec.MaxConcurrent, 1),
		FailureThreshold: spec.FailureThreshold, FailureThresholdPercent: spec.FailureThresholdPercent}
	lanes := map[string][]fleetwave.ItemSpec{}
	var order []string
	for _, it := range items {
		if _, ok := lanes[it.ManagedBy]; !ok {
			order = append(order, it.ManagedBy)
		}
		lanes[it.ManagedBy] = append(lanes[it.ManagedBy], it)
	}
	sort.Strings(order)
	for _, lane := range order {
		pl := PlannedLane{Lane: lane}
		var list []fleetwave.ItemSpec
		for _, it := range lanes[lane] {
			if n := snap.Nodes[it.Node]; n != nil && n.Drain && it.SkipReason == "" && it.BlockReason == "" {
				if isConfigChange(it) {
					pr.ConfigChange = true
				}
				pl.Waiting = append(pl.Waiting, PlannedItem{Node: it.Node, Block: it.Block, Action: it.Action,
					TargetVersion: it.TargetVersion, ConfigHash: shortHash(it.ConfigHash), Criticality: string(it.Criticality),
					Reason: fleetwave.ReasonNodeDraining})
				continue
			}
			if it.SkipReason != "" || it.BlockReason != "" {
				pi := PlannedItem{Node: it.Node, Block: it.Block, Action: it.Action, TargetVersion: it.TargetVersion,
					ConfigHash: shortHash(it.ConfigHash), Criticality: string(it.Criticality), Skipped: it.SkipReason}
				if it.BlockReason != "" {
					pi.Blocked = it.BlockReason + ": " + it.BlockMessage
				}
				pl.Apart = append(pl.Apart, pi)
				continue
			}
			list = append(list, it)
		}
		for i := 0; i < len(list); i += pr.MaxConcurrent {
			var wave []PlannedItem
			for _, it := range list[i:min(i+pr.MaxConcurrent, len(list))] {
				pi := PlannedItem{Node: it.Node, Block: it.Block, Action: it.Action, TargetVersion: it.TargetVersion,
					ConfigHash: shortHash(it.ConfigHash), Criticality: string(it.Criticality)}
				if isConfigChange(it) {
					pr.ConfigChange = true
				}
				if open, next, err := engine.WindowState(it, now); err == nil && !open {
					var names []string
					for _, w := range it.Windows {
						names = append(names, w.Name)
					}
					pi.Windows = strings.Join(names, ",")
					pi.WaitsUntil = "never (the windows do not overlap)"
					if !next.IsZero() {
						pi.WaitsUntil = next.UTC().Format(time.RFC3339)
					}
				}
				wave = append(wave, pi)
			}
			pl.Waves = append(pl.Waves, wave)
		}
		pr.Lanes = append(pr.Lanes, pl)
	}
	return pr
}

// isConfigChange reports whether an item changes what runs (version or
// rendered config): the rollouts the approval gate applies to. Lifecycle
// actions (start, stop), uninstall, takeover and scheduled operations
// (backup, ...) do not.
func isConfigChange(it fleetwave.ItemSpec) bool {
	switch it.Action {
	case fleetwave.ActionStart, fleetwave.ActionStop, fleetwave.ActionUninstall, fleetwave.ActionTakeover:
		return false
	}
	return it.TargetVersion != "" || it.ConfigHash != ""
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// observationsFromStatus reads the observed instances back from committed
// node documents; unreadable ones are ignored (the hub rewrites them). A
// node that never reported is read as a report with no instances.
func observationsFromStatus(files map[string][]byte) fleetwave.Observations {
	obs := fleetwave.Observations{}
	for p, data := range files {
		if kind, _ := status.ParsePath(p); kind != status.KindNode {
			continue
		}
		doc, err := status.DecodeNode(data)
		if err != nil || doc.Node == "" {
			continue
		}
		obs[doc.Node] = doc.Observation()
	}
	return obs
}

// WriteText prints the report for a terminal (markdown=false) or as a
// pull-request comment (markdown=true).
func (p *PlanReport) WriteText(w io.Writer, markdown bool) {
	h1, bullet, code := "fleetwave plan", "  ", func(s string) string { return s }
	if markdown {
		h1, bullet, code = "### fleetwave plan", "- ", func(s string) string { return "`" + s + "`" }
	}
	fmt.Fprintf(w, "%s %s..%s\n\n", h1, shortHash(p.Base), shortHash(p.Head))
	if len(p.Errors) > 0 {
		fmt.Fprintf(w, "This change would be REJECTED (%d error(s)); nothing would run:\n", len(p.Errors))
		if markdown {
			fmt.Fprintln(w, "```")
		}
		for _, e := range p.Errors {
			fmt.Fprintf(w, "%s\n", e.Error())
		}
		if markdown {
			fmt.Fprintln(w, "```")
		}
		return
	}
	if p.NoChanges() {
		fmt.Fprintln(w, "no changes")
		return
	}
	if len(p.Objects) > 0 {
		fmt.Fprintln(w, "Objects whose generation grows:")
		for _, o := range p.Objects {
			fmt.Fprintf(w, "%s%s %s (%s): generation %d -> %d\n", bullet, code(string(o.Key)), code(o.Path), o.Change, o.From, o.To)
		}
		fmt.Fprintln(w)
	}
	if len(p.Rollouts) == 0 {
		fmt.Fprintln(w, "No block instance would change.")
	}
	for _, r := range p.Rollouts {
		n := 0
		for _, l := range r.Lanes {
			for _, wv := range l.Waves {
				n += len(wv)
			}
			n += len(l.Waiting) + len(l.Apart)
		}
		halts := ""
		switch {
		case r.FailureThreshold > 0 && r.FailureThresholdPercent > 0 && r.FailureThresholdPercent < 100:
			halts = fmt.Sprintf(", halts after %d failed item(s) or above %g%% failed", r.FailureThreshold, r.FailureThresholdPercent)
		case r.FailureThreshold > 0:
			halts = fmt.Sprintf(", halts after %d failed item(s)", r.FailureThreshold)
		case r.FailureThresholdPercent > 0 && r.FailureThresholdPercent < 100:
			halts = fmt.Sprintf(", halts above %g%% failed", r.FailureThresholdPercent)
		}
		fmt.Fprintf(w, "Rollout %s: trigger %s generation %d, %d item(s), max_concurrent %d%s\n", code(r.ID), r.Trigger, r.Generation, n, r.MaxConcurrent, halts)
		switch {
		case r.ApprovalRequired && len(r.Approvals) > 0:
			fmt.Fprintf(w, "%sapproval: REQUIRED; request(s) for %s at %s: %s\n", bullet, r.Trigger, r.TargetVersion, strings.Join(r.Approvals, ", "))
		case r.ApprovalRequired:
			fmt.Fprintf(w, "%sapproval: REQUIRED (config change): after merge, an operator or admin submits a request (fleetwave approval submit --brc %s --target-version %s) and another admin approves it; none exists yet\n",
				bullet, r.Trigger, r.TargetVersion)
		case r.RollbackExempt && p.ApprovalRequired:
			fmt.Fprintf(w, "%sapproval: not required (rollback to a version every affected node ran before)\n", bullet)
		case r.ConfigChange:
			fmt.Fprintf(w, "%sapproval: not required (approval.required is off)\n", bullet)
		default:
			fmt.Fprintf(w, "%sapproval: not required (no version or config change)\n", bullet)
		}
		for _, l := range r.Lanes {
			for i, wv := range l.Waves {
				var parts []string
				for _, it := range wv {
					s := fmt.Sprintf("%s %s@%s", it.Action, it.Block, it.Node)
					if it.TargetVersion != "" {
						s += " -> " + it.TargetVersion
					}
					if it.ConfigHash != "" {
						s += " config " + it.ConfigHash
					}
					switch {
					case it.Blocked != "":
						s += " BLOCKED " + it.Blocked
					case it.Skipped != "":
						s += " skipped " + it.Skipped
					}
					s += " (" + it.Criticality
					if it.Windows != "" {
						s += ", waits for window " + it.Windows
						if it.WaitsUntil != "" {
							s += " until " + it.WaitsUntil
						}
					}
					parts = append(parts, s+")")
				}
				fmt.Fprintf(w, "%slane %s wave %d: %s\n", bullet, l.Lane, i+1, strings.Join(parts, "; "))
			}
			for _, it := range l.Waiting {
				s := fmt.Sprintf("%s %s@%s", it.Action, it.Block, it.Node)
				if it.TargetVersion != "" {
					s += " -> " + it.TargetVersion
				}
				fmt.Fprintf(w, "%slane %s waits (%s): %s; goes on once the node is undrained\n", bullet, l.Lane, it.Reason, s)
			}
			for _, it := range l.Apart {
				s := fmt.Sprintf("%s %s@%s", it.Action, it.Block, it.Node)
				if it.TargetVersion != "" {
					s += " -> " + it.TargetVersion
				}
				if it.Blocked != "" {
					s += " BLOCKED " + it.Blocked
				} else {
					s += " skipped " + it.Skipped
				}
				fmt.Fprintf(w, "%slane %s never dispatched: %s\n", bullet, l.Lane, s)
			}
		}
		fmt.Fprintln(w)
	}
	for _, rq := range p.Requests {
		if rq.Code != "" {
			fmt.Fprintf(w, "Request %s (brc %s) would be refused: %s (%s)\n", code(rq.Name), rq.BRC, rq.Code, rq.Error)
		} else {
			fmt.Fprintf(w, "Request %s (brc %s) pins %d node(s): %s\n", code(rq.Name), rq.BRC, len(rq.Targets), strings.Join(rq.Targets, ", "))
		}
	}
	for _, sc := range p.Schedules {
		switch {
		case sc.Error != "":
			fmt.Fprintf(w, "Schedule %s %s: %s\n", code(sc.Trigger), code(sc.Cron), sc.Error)
		case sc.NextFireAt != "":
			fmt.Fprintf(w, "Schedule %s %s %s: next fire %s\n", code(sc.Trigger), code(sc.Cron), sc.Timezone, sc.NextFireAt)
		default:
			fmt.Fprintf(w, "Schedule %s %s: never fires\n", code(sc.Trigger), code(sc.Cron))
		}
	}
	if len(p.Requests) > 0 || len(p.Schedules) > 0 {
		fmt.Fprintln(w)
	}
	if p.ApprovalsNeeded > 0 {
		fmt.Fprintf(w, "Approvals needed: %d rollout(s) wait for an approved request after merge.\n", p.ApprovalsNeeded)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "%sproblem: %s on %s (%s): %s\n", bullet, pr.Block, pr.Node, pr.Reason, pr.Message)
	}
}
