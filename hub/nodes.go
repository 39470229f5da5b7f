package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// The operator's write surface: node labels and drain, and manual
// rollout requests, through the API. Every write is a commit to the
// tracked branch (commitWrite): authored by the hub, the caller in a
// Fleetwave-Actor trailer and their reason in Fleetwave-Reason, the whole
// resulting tree validated like any push. The API never holds state of
// its own: the sync that follows applies the commit like any other.
//
// A node write edits the node's file in its own format (schema.EditNodeFile:
// only the edited field changes) from its content at the snapshot in
// force, with the precondition that the file is still that content at the
// branch tip. When someone changed the file in between (a person, another
// write), the write is computed again from the file as it is at the tip,
// up to maxNodeWriteAttempts times in all: a labels write replaces the
// whole label set (the last writer's set wins) but never loses anything
// else of the file. Pushes that raced but did not touch the file are
// rebuilt on the new tip by CommitFiles itself.

// maxNodeWriteAttempts bounds the read-edit-write rounds of a node write
// whose file keeps changing under it.
const maxNodeWriteAttempts = 3

// IdentitiesConfigured reports whether hub.yaml lists API identities: then
// every read of the API needs at least a viewer token.
func (h *Hub) IdentitiesConfigured() bool { return len(h.cfg.Identities) > 0 }

// errNoSnapshot answers API calls that need the repository before the hub
// has a valid snapshot: its first sync has not ended, or no commit was
// valid.
var errNoSnapshot = &api.Error{Status: http.StatusServiceUnavailable, Code: "not_ready",
	Message: "the hub has no valid snapshot of the repository yet: its first sync has not ended, or every commit was invalid"}

// apiSnapshot returns the snapshot in force, or the API's not_ready answer.
func (h *Hub) apiSnapshot() (*fleetwave.Snapshot, error) {
	snap := h.Snapshot()
	if snap == nil {
		return nil, errNoSnapshot
	}
	return snap, nil
}

// Nodes returns a page of nodes: every node with a record or a report,
// sorted by id, after after.
func (h *Hub) Nodes(ctx context.Context, after string, limit int) ([]api.NodeView, bool, error) {
	snap, err := h.apiSnapshot()
	if err != nil {
		return nil, false, err
	}
	obs, err := h.eng.Observations(ctx)
	if err != nil {
		return nil, false, h.apiError(ctx, err)
	}
	ids := slices.Collect(maps.Keys(snap.Nodes))
	for id := range obs {
		if snap.Nodes[id] == nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	start := sort.Search(len(ids), func(i int) bool { return ids[i] > after })
	end := min(start+max(limit, 1), len(ids))
	views, err := h.nodeViews(ctx, snap, obs, ids[start:end], nil)
	if err != nil {
		return nil, false, err
	}
	return views, end < len(ids), nil
}

// Node returns one node.
func (h *Hub) Node(ctx context.Context, id string) (api.NodeView, error) {
	snap, err := h.apiSnapshot()
	if err != nil {
		return api.NodeView{}, err
	}
	obs, err := h.eng.Observations(ctx)
	if err != nil {
		return api.NodeView{}, h.apiError(ctx, err)
	}
	if snap.Nodes[id] == nil && obs[id] == nil {
		return api.NodeView{}, &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no node %q", id)}
	}
	views, err := h.nodeViews(ctx, snap, obs, []string{id}, nil)
	if err != nil {
		return api.NodeView{}, err
	}
	return views[0], nil
}

// nodeViews builds the views of nodes ids from snap (with the records of
// override in place of snap's) and the observations. Drift is computed on
// these nodes only: a node's drift depends on its record alone.
func (h *Hub) nodeViews(ctx context.Context, snap *fleetwave.Snapshot, obs fleetwave.Observations, ids []string, override map[string]*fleetwave.Node) ([]api.NodeView, error) {
	sub := *snap
	sub.Nodes, sub.NodeIDs = make(map[string]*fleetwave.Node, len(ids)), nil
	sub.ChangedSince, sub.Changed = "", nil // its nodes are not those of a commit
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
		if n := override[id]; n != nil {
			sub.Nodes[id] = n
		} else if n := snap.Nodes[id]; n != nil {
			sub.Nodes[id] = n
		}
	}
	now := h.clock.Now()
	staleAfter := h.cfg.StaleAfter.D()
	drift := map[string][]api.NodeDrift{}
	opts := h.reconcilerOptions()
	opts.Renders = nil // sub is no snapshot in force: its renders would push the plans' out
	for _, d := range reconciler.Drift(&sub, obs, now, staleAfter, opts) {
		drift[d.Node] = append(drift[d.Node], api.NodeDrift{Block: d.Block, Trigger: d.Trigger, Kind: d.Kind, Desired: d.Desired, Observed: d.Observed})
	}
	waiting, err := h.waitingOn(ctx, func(node string) bool { return want[node] })
	if err != nil {
		return nil, err
	}
	held := map[string][]api.HeldInstance{}
	h.mu.Lock()
	for _, p := range slices.Concat(h.holds, h.problems) {
		if want[p.Node] {
			held[p.Node] = append(held[p.Node], api.HeldInstance{Block: p.Block, Trigger: p.Trigger, Reason: p.Reason, Message: p.Message})
		}
	}
	h.mu.Unlock()
	versions := h.history.of(ids)
	out := make([]api.NodeView, 0, len(ids))
	for _, id := range ids {
		v := api.NodeView{ID: id, Labels: map[string]string{}, MaintenanceWindows: []string{}, Capabilities: []string{},
			DataAddresses: []string{}, Instances: []api.NodeInstance{}, Drift: []api.NodeDrift{}, Waiting: []api.WaitingItem{},
			Held: []api.HeldInstance{}, ObservedVersions: map[string][]string{}}
		if n := sub.Nodes[id]; n != nil {
			v.Organization, v.Workspace = n.Organization, n.Workspace
			if ws := sub.Workspaces[n.Workspace]; v.Organization == "" && ws != nil {
				v.Organization = ws.Organization
			}
			v.Criticality = reconciler.Criticality(&sub, n)
			if len(n.Labels) > 0 {
				v.Labels = maps.Clone(n.Labels)
			}
			v.Drain = n.Drain
			if w := reconciler.WindowNames(&sub, n, nil); len(w) > 0 {
				v.MaintenanceWindows = w
			}
		} else {
			v.UnknownNode = true
		}
		v.Stale = true
		if r := obs[id]; r != nil {
			v.Reported, v.AgentVersion = true, r.AgentVersion
			v.LastReportAt = r.ReceivedAt
			if v.LastReportAt.IsZero() {
				v.LastReportAt = r.SentAt
			}
			v.LastReportAt = v.LastReportAt.UTC()
			v.Stale = now.Sub(v.LastReportAt) > staleAfter
			if len(r.Capabilities) > 0 {
				v.Capabilities = slices.Clone(r.Capabilities)
			}
			if len(r.DataAddresses) > 0 {
				v.DataAddresses = slices.Sorted(maps.Keys(r.DataAddresses))
			}
			for _, in := range r.Instances {
				v.Instances = append(v.Instances, api.NodeInstance{Block: in.Block, Version: in.Version, ConfigHash: in.ConfigHash,
					State: in.State, Generation: in.Generation, ManagedBy: in.ManagedBy})
			}
			sort.Slice(v.Instances, func(i, j int) bool { return v.Instances[i].Block < v.Instances[j].Block })
		}
		if d := drift[id]; len(d) > 0 {
			v.Drift = d
		}
		if w := waiting[id]; len(w) > 0 {
			v.Waiting = w
		}
		if hl := held[id]; len(hl) > 0 {
			sort.Slice(hl, func(i, j int) bool { return hl[i].Block+hl[i].Trigger < hl[j].Block+hl[j].Trigger })
			v.Held = hl
		}
		if m := versions[id]; m != nil {
			v.ObservedVersions = m
		}
		out = append(out, v)
	}
	return out, nil
}

// waitingOn returns, for the nodes keep accepts, the items of unfinished
// rollouts that wait on them, sorted by item id. It reads every
// unfinished rollout's items: the engine has no index of items by node.
func (h *Hub) waitingOn(ctx context.Context, keep func(node string) bool) (map[string][]api.WaitingItem, error) {
	rs, err := h.eng.Rollouts(ctx)
	if err != nil {
		return nil, h.apiError(ctx, err)
	}
	out := map[string][]api.WaitingItem{}
	for _, r := range rs {
		if r.Status.Finished() {
			continue
		}
		_, items, err := h.eng.Rollout(ctx, r.ID)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, h.apiError(ctx, err)
		}
		waitingItems(r.ID, items, keep, out)
	}
	for _, w := range out {
		sort.Slice(w, func(i, j int) bool { return w[i].Item < w[j].Item })
	}
	return out, nil
}

// waitingItems adds the items of rollout that wait on a node (pending,
// ambiguous), with why, to into by node, for the nodes keep accepts (nil:
// every node): what the API shows as a node's waiting items, and what
// status/nodes/<id>.yaml lists as waiting (same fields).
func waitingItems(rollout string, items []fleetwave.Item, keep func(node string) bool, into map[string][]api.WaitingItem) {
	for _, it := range items {
		if it.Status != fleetwave.ItemPending && it.Status != fleetwave.ItemAmbiguous {
			continue
		}
		if keep != nil && !keep(it.Node) {
			continue
		}
		into[it.Node] = append(into[it.Node], api.WaitingItem{Rollout: rollout, Item: it.ID, Block: it.Block,
			Action: it.Action, Status: string(it.Status), Reason: it.Reason})
	}
}

// commitWrite is commitFiles for a whole gitsync.Write (trailers, a
// precondition): the write authored by the hub, validated as a tree,
// recorded as the hub's own, followed by a sync. Errors are CommitFiles's
// (writeError maps them for the API).
func (h *Hub) commitWrite(ctx context.Context, w gitsync.Write) (gitsync.WriteResult, error) {
	w.Validate = func(all map[string][]byte, refused []fleetwave.FileError) error {
		if _, verr := validateTree(h.validator, all, refused); verr != nil {
			return verr
		}
		return nil
	}
	res, err := h.repo.CommitFiles(ctx, w)
	if err != nil {
		return res, err
	}
	if res.Commit != "" {
		h.own.add(res.Commit)
		h.log.Info().Str("commit", res.Commit).Str("actor", w.Actor).Int("files", len(w.Files)).Int("attempts", res.Attempts).
			Str("subject", w.Message).Msg("write committed")
		h.kick(h.syncNow)
	}
	return res, nil
}

// reasonTrailers are the trailers of a write with reason.
func reasonTrailers(reason string) []gitsync.Trailer {
	if reason = strings.TrimSpace(reason); reason == "" {
		return nil
	}
	return []gitsync.Trailer{{Key: gitsync.TrailerReason, Value: reason}}
}

// invalidLabels is the API's answer to a label set the schema refuses.
func invalidLabels(probs []schema.LabelProblem) *api.Error {
	return &api.Error{Status: http.StatusBadRequest, Code: "invalid_labels", Message: (&schema.LabelsError{Problems: probs}).Error(),
		Details: map[string]any{"field": "labels", "labels": probs, "max_labels": schema.MaxLabels}}
}

// SetNodeLabels replaces the labels of node id (the whole set; empty
// removes the field) in its file, for actor.
func (h *Hub) SetNodeLabels(ctx context.Context, actor api.Identity, id string, labels map[string]string, reason string) (api.NodeWrite, error) {
	if labels == nil {
		labels = map[string]string{}
	}
	if probs := schema.CheckLabels(labels); len(probs) > 0 {
		return api.NodeWrite{}, invalidLabels(probs)
	}
	return h.writeNode(ctx, actor, id, labels, nil, reason, fmt.Sprintf("nodes: labels of %s (by %s)", id, actor.Name))
}

// SetNodeDrain sets (drain) or removes `drain: true` in node id's file,
// for actor.
func (h *Hub) SetNodeDrain(ctx context.Context, actor api.Identity, id string, drain bool, reason string) (api.NodeWrite, error) {
	verb := "undrain"
	if drain {
		verb = "drain"
	}
	return h.writeNode(ctx, actor, id, nil, &drain, reason, fmt.Sprintf("nodes: %s %s (by %s)", verb, id, actor.Name))
}

var (
	errNodeFileChanged = errors.New("the node file changed since it was read")
	errNodeFileGone    = errors.New("the node file is no longer at its path")
)

// writeNode edits node id's file (labels and drain as schema.EditNodeFile
// takes them) and commits it; see the comment at the top of the file.
func (h *Hub) writeNode(ctx context.Context, actor api.Identity, id string, labels map[string]string, drain *bool, reason, message string) (api.NodeWrite, error) {
	if !canSubmit(actor.Role) {
		return api.NodeWrite{}, &api.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "only operators and admins change nodes"}
	}
	snap, err := h.apiSnapshot()
	if err != nil {
		return api.NodeWrite{}, err
	}
	obj, ok := snap.Objects[fleetwave.Key(fleetwave.KindNode, id)]
	if !ok {
		return api.NodeWrite{}, &api.Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("node %q has no record in the config repository", id)}
	}
	file := obj.Path
	base, present, err := h.repo.FileAt(ctx, snap.Commit, file)
	if err != nil {
		return api.NodeWrite{}, fmt.Errorf("read %s at %s: %w", file, short(snap.Commit), err)
	}
	if !present {
		return api.NodeWrite{}, fmt.Errorf("read %s at %s: not in the commit of the snapshot", file, short(snap.Commit))
	}
	for attempt := 1; ; attempt++ {
		edited, err := schema.EditNodeFile(file, base, labels, drain)
		var le *schema.LabelsError
		switch {
		case errors.As(err, &le):
			return api.NodeWrite{}, invalidLabels(le.Problems)
		case err != nil:
			h.log.Warn().Err(err).Str("node", id).Str("path", file).Msg("node file not editable")
			return api.NodeWrite{}, &api.Error{Status: http.StatusUnprocessableEntity, Code: "not_editable",
				Message: fmt.Sprintf("%s cannot be edited safely by the hub: change it with a commit", file)}
		}
		var fresh []byte
		gone := false
		res, err := h.commitWrite(ctx, gitsync.Write{
			Files: map[string][]byte{file: edited}, Message: message, Actor: actor.Name, Trailers: reasonTrailers(reason),
			Expect: func(current map[string][]byte) error {
				got, ok := current[file]
				switch {
				case !ok:
					gone = true
					return errNodeFileGone
				case !bytes.Equal(got, base):
					fresh = bytes.Clone(got)
					return errNodeFileChanged
				}
				return nil
			},
		})
		switch {
		case err == nil:
			h.log.Info().Str("node", id).Str("actor", actor.Name).Str("commit", res.Commit).Int("round", attempt).
				Bool("unchanged", res.Unchanged).Str("subject", message).Msg("node written")
			return api.NodeWrite{Commit: res.Commit, Node: h.writtenView(ctx, snap, id, file, edited)}, nil
		case errors.Is(err, gitsync.ErrPreconditionFailed) && fresh != nil && attempt < maxNodeWriteAttempts:
			h.log.Info().Str("node", id).Str("path", file).Int("round", attempt).Msg("node file changed at the tip: editing it again")
			base = fresh
		case errors.Is(err, gitsync.ErrPreconditionFailed) && gone:
			return api.NodeWrite{}, &api.Error{Status: http.StatusConflict, Code: "conflict",
				Message: fmt.Sprintf("%s was moved or deleted at the branch tip since the hub's last sync; retry once it synced", file)}
		case errors.Is(err, gitsync.ErrPreconditionFailed):
			return api.NodeWrite{}, &api.Error{Status: http.StatusConflict, Code: "conflict",
				Message: fmt.Sprintf("%s kept changing at the branch tip (%d rounds); retry", file, attempt)}
		default:
			return api.NodeWrite{}, writeError(err)
		}
	}
}

// writtenView is node id's view with its edited file in force; the bare
// record when the observations cannot be read (the write landed anyway).
func (h *Hub) writtenView(ctx context.Context, snap *fleetwave.Snapshot, id, file string, edited []byte) api.NodeView {
	var n fleetwave.Node
	if norm, err := schema.Normalize(file, edited); err == nil {
		_ = json.Unmarshal(norm, &n)
	}
	if n.ID == "" {
		n = *snap.Nodes[id]
	}
	obs, err := h.eng.Observations(ctx)
	if err == nil {
		var views []api.NodeView
		if views, err = h.nodeViews(ctx, snap, obs, []string{id}, map[string]*fleetwave.Node{id: &n}); err == nil {
			return views[0]
		}
	}
	h.log.Warn().Err(err).Str("node", id).Msg("view of a written node")
	v := api.NodeView{ID: id, Organization: n.Organization, Workspace: n.Workspace, Criticality: n.Criticality, Labels: n.Labels, Drain: n.Drain}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	return v
}

// RequestRollout plans a manual rollout request as a rollouts/<name> file
// is planned (reconciler.PlanManual on the snapshot in force and the
// observations) and, unless it is a dry run, commits rollouts/<name>.yaml
// with the resolved nodes pinned: the sync that follows creates its
// rollout, once, like any request's.
func (h *Hub) RequestRollout(ctx context.Context, actor api.Identity, req api.RolloutCreate) (api.RolloutPlan, error) {
	refuse := func(status int, code, format string, args ...any) (api.RolloutPlan, error) {
		return api.RolloutPlan{}, &api.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
	}
	if !canSubmit(actor.Role) {
		return refuse(http.StatusForbidden, "forbidden", "only operators and admins request rollouts")
	}
	snap, err := h.apiSnapshot()
	if err != nil {
		return api.RolloutPlan{}, err
	}
	name := req.Name
	if name == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		name = strings.Trim(sanitizeName(strings.Trim(req.BRC+"-"+req.ActionName, "-")), "-")
		if len(name) > 50 {
			name = strings.Trim(name[:50], "-")
		}
		name += "-" + hex.EncodeToString(b[:])
		name = strings.TrimLeft(name, "-")
	}
	if !approvalIDPattern.MatchString(name) {
		return refuse(http.StatusUnprocessableEntity, "invalid_request", "name %q: want a DNS-label-like name (a-z, 0-9, -; at most 63)", name)
	}
	if err := h.requestNameFree(ctx, snap, name); err != nil {
		return api.RolloutPlan{}, err
	}
	rr := &fleetwave.RolloutRequest{Name: name, BRC: req.BRC, ActionName: req.ActionName, TargetVersion: req.TargetVersion,
		Nodes: req.Nodes, Selector: req.Selector, BatchSize: req.BatchSize}
	obs, err := h.eng.Observations(ctx)
	if err != nil {
		return api.RolloutPlan{}, h.apiError(ctx, err)
	}
	opts := h.reconcilerOptions()
	opts.RequireReport = true
	if t := snap.Triggers[rr.BRC]; t != nil {
		if targets, err := reconciler.ResolveTargets(snap, rr); err == nil {
			keys := make([]fleetwave.InstanceKey, len(targets))
			for i, n := range targets {
				keys[i] = fleetwave.InstanceKey{Node: n, Block: t.BlockName}
			}
			active, err := h.eng.ActiveInstances(ctx, keys)
			if err != nil {
				return api.RolloutPlan{}, h.apiError(ctx, err)
			}
			opts.ActiveInstance = func(k fleetwave.InstanceKey) bool { return active[k] }
		}
	}
	spec, err := reconciler.PlanManual(snap, obs, rr, opts)
	if err != nil {
		var re *reconciler.RequestError
		if errors.As(err, &re) {
			return refuse(http.StatusUnprocessableEntity, re.Code, "%s", re.Message)
		}
		return refuse(http.StatusUnprocessableEntity, "invalid_request", "%s", err.Error())
	}
	targets, err := reconciler.ResolveTargets(snap, rr)
	if err != nil { // PlanManual resolved them already
		return api.RolloutPlan{}, err
	}
	plan := api.RolloutPlan{Name: name, Rollout: reconciler.ManualRolloutID(name), Targets: targets, ApprovalRequired: h.gatedRequest(spec)}
	for _, it := range spec.Items {
		plan.Items = append(plan.Items, api.RolloutPlanItem{Node: it.Node, Block: it.Block, Action: it.Action, TargetVersion: it.TargetVersion,
			Skipped: it.SkipReason, Blocked: it.BlockReason, Message: it.BlockMessage})
	}
	if req.DryRun {
		return plan, nil
	}
	if plan.ApprovalRequired {
		return refuse(http.StatusConflict, fleetwave.ReasonApprovalRequired,
			"the request applies config and the approval policy needs a second identity: submit it with POST /api/v1/config-approvals (it pins the version, the nodes and a batch size)")
	}
	file := "rollouts/" + name + ".yaml"
	data, err := requestFile(rr, targets, actor.Name)
	if err != nil {
		return api.RolloutPlan{}, err
	}
	res, err := h.commitWrite(ctx, gitsync.Write{
		Files: map[string][]byte{file: data}, Actor: actor.Name, Trailers: reasonTrailers(req.Reason),
		Message: fmt.Sprintf("rollouts: request %s of %s on %d node(s) (by %s)", name, req.BRC, len(targets), actor.Name),
		Expect:  gitsync.ExpectFiles(map[string][]byte{file: nil}),
	})
	if errors.Is(err, gitsync.ErrPreconditionFailed) {
		return refuse(http.StatusConflict, "already_exists", "%s exists: request names are never reused", file)
	}
	if err != nil {
		return api.RolloutPlan{}, writeError(err)
	}
	plan.Commit = res.Commit
	h.log.Info().Str("request", name).Str("brc", req.BRC).Str("actor", actor.Name).Str("commit", res.Commit).Int("targets", len(targets)).
		Msg("rollout request committed")
	return plan, nil
}

// requestNameFree answers 409 already_exists when a request of that name
// is in the snapshot or was ever handled (its rollout or its refusal):
// the hub handles a request name once, so a new file of an old name would
// never run.
func (h *Hub) requestNameFree(ctx context.Context, snap *fleetwave.Snapshot, name string) error {
	exists := &api.Error{Status: http.StatusConflict, Code: "already_exists",
		Message: fmt.Sprintf("a request named %s exists or was handled before: request names are never reused", name)}
	if snap.Rollouts[name] != nil {
		return exists
	}
	h.mu.Lock()
	_, inGit := h.gitRequests[name]
	h.mu.Unlock()
	if inGit {
		return exists
	}
	outcomes, err := h.eng.RequestOutcomes(ctx)
	if err != nil {
		return h.apiError(ctx, err)
	}
	if _, ok := outcomes[name]; ok {
		return exists
	}
	_, err = h.eng.RolloutRecord(ctx, reconciler.ManualRolloutID(name))
	switch {
	case err == nil:
		return exists
	case !errors.Is(err, engine.ErrNotFound):
		return h.apiError(ctx, err)
	}
	return nil
}

// requestFile renders rollouts/<name>.yaml: the request with its resolved
// nodes pinned (the selector it was resolved from is in a comment).
func requestFile(rr *fleetwave.RolloutRequest, targets []string, actor string) ([]byte, error) {
	doc := struct {
		Kind          string   `yaml:"kind"`
		Name          string   `yaml:"name"`
		BRC           string   `yaml:"brc"`
		ActionName    string   `yaml:"action_name,omitempty"`
		TargetVersion string   `yaml:"target_version,omitempty"`
		Nodes         []string `yaml:"nodes"`
		BatchSize     int      `yaml:"batch_size,omitempty"`
	}{"rollout", rr.Name, rr.BRC, rr.ActionName, rr.TargetVersion, targets, rr.BatchSize}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# requested through the API by %s; the nodes are pinned as resolved\n", strings.Join(strings.Fields(actor), " "))
	if rr.Selector != nil {
		sel, err := json.Marshal(rr.Selector)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "# from the selector %s\n", sel)
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ListRollouts returns the rollouts matching f, newest first. A rollout
// is of BRC f.BRC when its source is the BRC itself (its generations and
// schedule ticks), a manual request of the snapshot in force naming it,
// or an approval request pinning it; a manual request whose file is gone
// from the repository no longer says its BRC (the engine's rollout record
// does not keep it).
func (h *Hub) ListRollouts(ctx context.Context, f api.RolloutFilter) ([]fleetwave.Rollout, error) {
	rs, err := h.eng.Rollouts(ctx)
	if err != nil {
		return nil, h.apiError(ctx, err)
	}
	snap := h.Snapshot()
	var approvals map[string]string // id -> brc, read once when needed
	brcOf := func(r fleetwave.Rollout) (string, error) {
		obj := r.Source.Object
		switch obj.Kind() {
		case fleetwave.KindTrigger:
			return obj.Name(), nil
		case fleetwave.KindRollout:
			if snap != nil && snap.Rollouts[obj.Name()] != nil {
				return snap.Rollouts[obj.Name()].BRC, nil
			}
		case fleetwave.KindApproval:
			if approvals == nil {
				list, err := h.eng.Approvals(ctx)
				if err != nil {
					return "", h.apiError(ctx, err)
				}
				approvals = map[string]string{}
				for _, a := range list {
					approvals[a.ID] = a.BRC
				}
			}
			return approvals[obj.Name()], nil
		}
		return "", nil
	}
	var lanes map[string][]string
	if f.Lane != "" {
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		if lanes, err = h.eng.RolloutLanes(ctx, ids); err != nil {
			return nil, h.apiError(ctx, err)
		}
	}
	out := make([]fleetwave.Rollout, 0, len(rs))
	for _, r := range rs {
		if f.State != "" && r.Status != f.State {
			continue
		}
		if f.Lane != "" && !slices.Contains(lanes[r.ID], f.Lane) {
			continue
		}
		if f.BRC != "" {
			brc, err := brcOf(r)
			if err != nil {
				return nil, err
			}
			if brc != f.BRC {
				continue
			}
		}
		out = append(out, r)
	}
	return out, nil
}
