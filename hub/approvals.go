package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
	"github.com/fleetwave/fleetwave/status"
)

// The approval gate (hub.yaml approval): two-person control of config
// rollouts.
//
//   - Gated paths: with approval.required, the reconciler's config items
//     (a new version or rendered config: install, upgrade, apply, rollback,
//     a BRC's action_name) are not created; the BRC waits with reason
//     approval_required in status, the API and plan, naming the BRC,
//     version and generation an approval must pin. A manual request that
//     applies config is refused with approval_required. With scope "all"
//     lifecycle and operational items are gated too. A rollback to a
//     version that every affected node has reported before (the
//     observation history in status/nodes) is exempt.
//   - Submit: an approvals/<id> file added by a commit signed by an
//     operator or admin (the signature verified against hub.yaml keys), or
//     POST /api/v1/config-approvals with such a token. The BRC must exist
//     and target the pinned version now; the nodes (or the selector,
//     resolved once) are pinned; nothing is created. An unsigned or
//     unknown-signer commit submits nothing: the attempt is a refused
//     record.
//   - Decide: an admin who is not the submitter, by a signed commit that
//     sets decision in the file, or POST .../approve|reject.
//   - TTL: counted on the hub's clock from when it first saw the request.
//   - Approved: the rollout approval-<id> is created from the pinned nodes
//     with the approver as actor, held (claim) until a status commit holds
//     the request's record; then consumed. One request, one rollout, ever:
//     the rollout's id and event identity are the request's, and the
//     records live in the engine (under the leader's fence) and in Git.

// approvalPath is where an approval request file lives.
func approvalPath(id string) string { return "approvals/" + id + ".yaml" }

// identityRole returns the role of identity name in hub.yaml, "" for none.
func (h *Hub) identityRole(name string) string {
	for _, id := range h.cfg.Identities {
		if id.Name == name {
			return id.Role
		}
	}
	return ""
}

// canSubmit: operators and admins submit; admins decide.
func canSubmit(role string) bool { return role == api.RoleOperator || role == api.RoleAdmin }

// approvalWarning returns why releases that need approval are frozen
// under the policy, "" when approvals can be given: approval is required
// and fewer than two identities can take part (submit or decide) with at
// least one admin.
func approvalWarning(cfg Config) string {
	if !cfg.Approval.Required {
		return ""
	}
	admins, parts := 0, 0
	for _, id := range cfg.Identities {
		switch id.Role {
		case api.RoleAdmin:
			admins++
			parts++
		case api.RoleOperator:
			parts++
		}
	}
	switch {
	case admins == 0:
		return "approval.required is on but no identity has the admin role: nobody can approve, releases that need approval are frozen"
	case parts < 2:
		return "approval.required is on but only one identity can take part: the submitter cannot approve their own request, releases that need approval are frozen"
	}
	return ""
}

// ApprovalSubmission is what a submitter asks for: the fields of an
// approvals/<id> file.
type ApprovalSubmission = api.ApprovalSubmission

// ApprovalError is a refused submission or decision, with the code the
// API answers and the status records.
type ApprovalError struct {
	Code    string
	Message string
}

func (e *ApprovalError) Error() string { return e.Code + ": " + e.Message }

// apiError is the API's answer to a refused submission or decision.
func (e *ApprovalError) apiError() *api.Error {
	status := http.StatusUnprocessableEntity
	switch e.Code {
	case "forbidden", "self_approval":
		status = http.StatusForbidden
	case "not_leader", "not_ready":
		status = http.StatusServiceUnavailable
	case "not_found":
		status = http.StatusNotFound
	case "not_pending", "already_exists":
		status = http.StatusConflict
	}
	return &api.Error{Status: status, Code: e.Code, Message: e.Message}
}

// pin validates a submission against snap and returns the approval it
// pins: the BRC is a reconciliation trigger targeting that version now,
// the nodes exist (or the selector matches some, resolved now).
func pin(snap *fleetwave.Snapshot, s ApprovalSubmission) (fleetwave.Approval, *ApprovalError) {
	a := fleetwave.Approval{ID: s.ID, BRC: s.BRC, TargetVersion: s.TargetVersion, BatchSize: s.BatchSize}
	if snap == nil {
		return a, &ApprovalError{"not_ready", "the hub has no valid snapshot of the repository yet"}
	}
	t := snap.Triggers[s.BRC]
	switch {
	case t == nil:
		return a, &ApprovalError{"unknown_brc", fmt.Sprintf("brc %q is not defined", s.BRC)}
	case t.TriggerType == fleetwave.TriggerSchedule:
		return a, &ApprovalError{"invalid_request", fmt.Sprintf("brc %s is a schedule: approvals pin a reconciliation brc's version", s.BRC)}
	case s.TargetVersion == "":
		return a, &ApprovalError{"invalid_request", "target_version is required"}
	case s.TargetVersion != t.TargetVersion:
		return a, &ApprovalError{"version_mismatch", fmt.Sprintf("brc %s targets %q, not %q: an approval pins the version the brc asks for", s.BRC, t.TargetVersion, s.TargetVersion)}
	case s.BatchSize < 0:
		return a, &ApprovalError{"invalid_request", "batch_size must be positive"}
	}
	a.Generation = snap.Generation(fleetwave.Key(fleetwave.KindTrigger, s.BRC))
	targets, err := reconciler.ResolveTargets(snap, &fleetwave.RolloutRequest{Name: s.ID, BRC: s.BRC, Nodes: s.Nodes, Selector: s.Selector})
	if err != nil {
		var re *reconciler.RequestError
		if errors.As(err, &re) {
			return a, &ApprovalError{re.Code, re.Message}
		}
		return a, &ApprovalError{"invalid_request", err.Error()}
	}
	a.Nodes = targets
	if s.Selector != nil && len(s.Nodes) == 0 {
		b, _ := json.Marshal(s.Selector)
		a.Selector = string(b)
	}
	return a, nil
}

// approvalIDPattern is a DNS-label-like request id, like every object name.
var approvalIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// SubmitApproval submits a request through the API as identity id (an
// operator or admin): it is validated and pinned, recorded, and committed
// to the repository as approvals/<id>.yaml with the actor in a trailer.
// Nothing is created until an admin other than the submitter approves.
func (h *Hub) SubmitApproval(ctx context.Context, id api.Identity, s ApprovalSubmission) (fleetwave.Approval, error) {
	a, err := h.submitApproval(ctx, id, s)
	var aerr *ApprovalError
	if errors.As(err, &aerr) {
		return a, aerr.apiError()
	}
	return a, err
}

func (h *Hub) submitApproval(ctx context.Context, id api.Identity, s ApprovalSubmission) (fleetwave.Approval, error) {
	if !canSubmit(id.Role) {
		return fleetwave.Approval{}, &ApprovalError{"forbidden", "only operators and admins submit approval requests"}
	}
	fence := h.currentFence()
	if fence == 0 {
		return fleetwave.Approval{}, &ApprovalError{"not_leader", "this hub does not lead: send the request to the leader"}
	}
	if s.ID == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		s.ID = strings.Trim(sanitizeName(s.BRC+"-"+s.TargetVersion), "-")
		if len(s.ID) > 50 {
			s.ID = strings.Trim(s.ID[:50], "-")
		}
		s.ID += "-" + hex.EncodeToString(b[:])
	}
	if !approvalIDPattern.MatchString(s.ID) {
		return fleetwave.Approval{}, &ApprovalError{"invalid_request", fmt.Sprintf("id %q: want a DNS-label-like name (a-z, 0-9, -; at most 63)", s.ID)}
	}
	if _, err := h.eng.Approval(ctx, s.ID); err == nil {
		return fleetwave.Approval{}, &ApprovalError{"already_exists", fmt.Sprintf("approval %s exists: a resubmission is a new request", s.ID)}
	}
	a, aerr := pin(h.Snapshot(), s)
	if aerr != nil {
		return fleetwave.Approval{}, aerr
	}
	a.State, a.SubmittedBy, a.SubmittedVia = fleetwave.ApprovalPending, id.Name, "api"
	got, err := h.eng.SubmitApproval(ctx, fence, a)
	if err != nil {
		return fleetwave.Approval{}, h.apiError(ctx, err)
	}
	h.log.Info().Str("approval", a.ID).Str("brc", a.BRC).Str("target_version", a.TargetVersion).Int("nodes", len(a.Nodes)).
		Str("actor", id.Name).Msg("approval submitted")
	h.commitApprovalFile(ctx, got, id.Name, "submit")
	h.kick(h.statusNow)
	return got, nil
}

// DecideApproval records an admin's decision on a pending request through
// the API; an approval creates its rollout at the next reconcile.
func (h *Hub) DecideApproval(ctx context.Context, id api.Identity, approvalID string, decision fleetwave.ApprovalState) (fleetwave.Approval, error) {
	a, err := h.decideApproval(ctx, id, approvalID, decision)
	var aerr *ApprovalError
	if errors.As(err, &aerr) {
		return a, aerr.apiError()
	}
	return a, err
}

func (h *Hub) decideApproval(ctx context.Context, id api.Identity, approvalID string, decision fleetwave.ApprovalState) (fleetwave.Approval, error) {
	if id.Role != api.RoleAdmin {
		return fleetwave.Approval{}, &ApprovalError{"forbidden", "only admins decide approval requests"}
	}
	fence := h.currentFence()
	if fence == 0 {
		return fleetwave.Approval{}, &ApprovalError{"not_leader", "this hub does not lead: send the decision to the leader"}
	}
	if a, err := h.eng.Approval(ctx, approvalID); err == nil && a.State == fleetwave.ApprovalPending && h.expired(a) {
		_, _ = h.eng.ExpireApproval(ctx, fence, approvalID, "expired")
		return fleetwave.Approval{}, &ApprovalError{"not_pending", fmt.Sprintf("approval %s expired", approvalID)}
	}
	a, err := h.eng.DecideApproval(ctx, fence, approvalID, id.Name, decision)
	var se *engine.ApprovalStateError
	switch {
	case errors.Is(err, engine.ErrSelfApproval):
		return fleetwave.Approval{}, &ApprovalError{"self_approval", "the submitter cannot decide their own request: another admin must"}
	case errors.As(err, &se):
		return fleetwave.Approval{}, &ApprovalError{"not_pending", fmt.Sprintf("approval %s is %s: only a pending request is decided", approvalID, se.State)}
	case errors.Is(err, engine.ErrNotFound):
		return fleetwave.Approval{}, &ApprovalError{"not_found", fmt.Sprintf("no approval %s", approvalID)}
	case err != nil:
		return fleetwave.Approval{}, h.apiError(ctx, err)
	}
	h.crashPoint("approval_decided")
	h.log.Info().Str("approval", approvalID).Str("decision", string(decision)).Str("actor", id.Name).Msg("approval decided")
	h.commitApprovalFile(ctx, a, id.Name, string(decision))
	h.kick(h.reconcileNow)
	h.kick(h.statusNow)
	return a, nil
}

// Approvals lists every approval request.
func (h *Hub) Approvals(ctx context.Context) ([]fleetwave.Approval, error) {
	list, err := h.eng.Approvals(ctx)
	if err != nil {
		return nil, h.apiError(ctx, err)
	}
	return list, nil
}

// Approval returns one approval request.
func (h *Hub) Approval(ctx context.Context, id string) (fleetwave.Approval, error) {
	a, err := h.eng.Approval(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return a, (&ApprovalError{"not_found", fmt.Sprintf("no approval %s", id)}).apiError()
	}
	if err != nil {
		return a, h.apiError(ctx, err)
	}
	return a, nil
}

// commitApprovalFile writes the request (and its decision) as
// approvals/<id>.yaml to the tracked branch, authored by the hub with the
// actor in a trailer: the repository keeps the record of API writes. The
// engine's record was written first, so the hub's own commit is never
// taken for a new submission.
func (h *Hub) commitApprovalFile(ctx context.Context, a fleetwave.Approval, actor, step string) {
	if h.writeFiles == nil {
		return
	}
	doc := map[string]any{"kind": "approval", "name": a.ID, "brc": a.BRC, "target_version": a.TargetVersion, "nodes": a.Nodes}
	if a.BatchSize > 0 {
		doc["batch_size"] = a.BatchSize
	}
	if a.State == fleetwave.ApprovalApproved || a.State == fleetwave.ApprovalRejected {
		doc["decision"] = string(a.State)
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		h.log.Warn().Err(err).Str("approval", a.ID).Msg("encode approval file")
		return
	}
	msg := fmt.Sprintf("approvals: %s %s (%s %s)", step, a.ID, a.BRC, a.TargetVersion)
	if err := h.writeFiles(ctx, map[string][]byte{approvalPath(a.ID): data}, msg, actor); err != nil {
		h.log.Warn().Err(err).Str("approval", a.ID).Msg("approval file not committed; the record stays in status")
	}
}

// expired reports whether pending request a outlived the TTL on the hub's
// clock.
func (h *Hub) expired(a fleetwave.Approval) bool {
	return !a.SubmittedAt.IsZero() && h.clock.Now().Sub(a.SubmittedAt) > h.cfg.Approval.TTL.D()
}

// processApprovalCommits reads the approvals/ changes of the commits since
// the last one processed, up to head: a file added by a commit signed by
// an operator or admin is a submission; a change setting decision, signed
// by an admin who is not the submitter, is a decision; anything else
// (unsigned, unknown signer, wrong role) is recorded as refused and
// changes nothing. Idempotent: a request already known is never submitted
// again, a decision applies only to a pending request.
func (h *Hub) processApprovalCommits(ctx context.Context, fence int64, snap *fleetwave.Snapshot, head string) {
	h.mu.Lock()
	cursor := h.approvalCursor
	h.mu.Unlock()
	changes, err := h.repo.ChangesSince(ctx, cursor, head, "approvals/")
	if err != nil {
		h.log.Warn().Err(err).Msg("read approval commits")
		return
	}
	keys := h.cfg.SignerKeys()
	for _, c := range changes {
		signer, verr := h.repo.VerifyCommit(ctx, c.Commit, keys)
		who, why := "", ""
		if verr != nil {
			why = "unsigned"
			var ue *gitsync.UnknownSignerError
			if errors.As(verr, &ue) {
				why = "unknown_signer"
			}
		} else {
			who = cfgIdentity(signer.Identity)
		}
		for _, p := range c.Paths {
			key, ok := schema.ObjectKeyForPath(p)
			if !ok || key.Kind() != fleetwave.KindApproval {
				continue
			}
			data, present, err := h.repo.FileAt(ctx, c.Commit, p)
			if err != nil || !present {
				continue // deleted (the record stays) or unreadable
			}
			norm, err := schema.Normalize(p, data)
			if err != nil {
				continue // invalid at that commit: a later one is validated
			}
			var req fleetwave.ApprovalRequest
			if err := json.Unmarshal(norm, &req); err != nil {
				continue
			}
			h.applyApprovalFile(ctx, fence, snap, key.Name(), req, c.Commit, who, why)
		}
	}
	h.mu.Lock()
	h.approvalCursor = head
	h.mu.Unlock()
}

func cfgIdentity(signerKey string) string { return IdentityOfSigner(signerKey) }

// applyApprovalFile applies one approvals/<id> file as commit (signed by
// identity who, or refused for why) left it.
func (h *Hub) applyApprovalFile(ctx context.Context, fence int64, snap *fleetwave.Snapshot, id string, req fleetwave.ApprovalRequest, commit, who, why string) {
	log := h.log.With().Str("approval", id).Str("commit", commit).Str("signer", who).Logger()
	known, err := h.eng.Approval(ctx, id)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		log.Warn().Err(err).Msg("read approval")
		return
	}
	if errors.Is(err, engine.ErrNotFound) {
		if g, ok := h.gitApproval(id); ok {
			known, err = g, nil
		}
	}
	if errors.Is(err, engine.ErrNotFound) {
		a := fleetwave.Approval{ID: id, BRC: req.BRC, TargetVersion: req.TargetVersion, BatchSize: req.BatchSize,
			SubmittedVia: commit, SubmittedBy: who}
		role := h.identityRole(who)
		var aerr *ApprovalError
		switch {
		case why != "":
			aerr = &ApprovalError{why, "the commit adding the request is not signed by a configured identity's key: it submits nothing"}
		case !canSubmit(role):
			aerr = &ApprovalError{"forbidden", fmt.Sprintf("%s (%s) cannot submit: only operators and admins do", who, role)}
		default:
			var pinned fleetwave.Approval
			pinned, aerr = pin(snap, ApprovalSubmission{ID: id, BRC: req.BRC, TargetVersion: req.TargetVersion,
				Nodes: req.Nodes, Selector: req.Selector, BatchSize: req.BatchSize})
			if aerr == nil {
				pinned.SubmittedBy, pinned.SubmittedVia = who, commit
				a = pinned
			}
		}
		if aerr != nil {
			a.State, a.Reason, a.Message = fleetwave.ApprovalRefused, aerr.Code, aerr.Message
			if a.Nodes == nil {
				a.Nodes = []string{}
			}
			log.Warn().Str("reason", aerr.Code).Str("error", aerr.Message).Msg("approval submission refused")
		} else {
			a.State = fleetwave.ApprovalPending
			log.Info().Str("brc", a.BRC).Str("target_version", a.TargetVersion).Int("nodes", len(a.Nodes)).Msg("approval submitted")
		}
		if _, err := h.eng.SubmitApproval(ctx, fence, a); err != nil {
			log.Warn().Err(err).Msg("record approval")
		}
		// a decision in the very commit that submits is not a second
		// identity's: it is ignored
		return
	}
	if req.Decision == "" || known.State != fleetwave.ApprovalPending {
		return
	}
	role := h.identityRole(who)
	switch {
	case why != "":
		log.Warn().Str("reason", why).Msg("decision by a commit not signed by a configured identity ignored")
		return
	case role != api.RoleAdmin:
		log.Warn().Str("role", role).Msg("decision by a non-admin ignored")
		return
	case h.expired(known):
		_, _ = h.eng.ExpireApproval(ctx, fence, id, "expired")
		return
	}
	if _, err := h.eng.DecideApproval(ctx, fence, id, who, fleetwave.ApprovalState(req.Decision)); err != nil {
		log.Warn().Err(err).Msg("decision refused")
		return
	}
	log.Info().Str("decision", req.Decision).Msg("approval decided")
}

// gitApproval returns the record Git status holds for approval id (read at
// leadership), for a request the engine lost.
func (h *Hub) gitApproval(id string) (fleetwave.Approval, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.gitApprovals[id]
	return a, ok
}

// approvalsStep moves every request on (leader, each reconcile): a pending
// one past its TTL expires; an approved one whose BRC no longer targets
// its version goes stale; otherwise its rollout is created from the pinned
// nodes once each of them reported (held until its record is in Git) and
// the request is consumed.
func (h *Hub) approvalsStep(ctx context.Context, fence int64, snap *fleetwave.Snapshot, obs fleetwave.Observations, version int64, opts reconciler.Options) {
	list, err := h.eng.Approvals(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("read approvals")
		}
		return
	}
	waits := map[string]string{}
	for _, a := range list {
		log := h.log.With().Str("approval", a.ID).Str("brc", a.BRC).Logger()
		switch a.State {
		case fleetwave.ApprovalPending:
			if h.expired(a) {
				if _, err := h.eng.ExpireApproval(ctx, fence, a.ID, "expired"); err == nil {
					log.Info().Msg("approval expired")
				}
			}
		case fleetwave.ApprovalApproved:
			t := snap.Triggers[a.BRC]
			if t == nil || t.TargetVersion != a.TargetVersion {
				if _, err := h.eng.StaleApproval(ctx, fence, a.ID, "version_changed"); err == nil {
					log.Warn().Msg("approval stale: its brc no longer targets the approved version")
				}
				continue
			}
			ropts := opts
			ropts.RequireReport = true
			spec, problems, holds := reconciler.PlanApproval(snap, obs, t, a.Nodes, a.BatchSize, ropts)
			for _, p := range problems {
				log.Warn().Str("node", p.Node).Str("reason", p.Reason).Str("error", p.Message).Msg("approved instance cannot run as written")
			}
			if waiting := awaitingNodes(holds); len(waiting) > 0 {
				waits[a.ID] = fleetwave.ReasonAwaitingReport + ": " + strings.Join(waiting, ", ")
				continue
			}
			rid := fleetwave.ApprovalRolloutID(a.ID)
			spec.BaseID = rid
			spec.Source = fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindApproval, a.ID), Generation: max(a.Generation, 1),
				Commit: snap.Commit, Actor: a.DecidedBy, Kind: fleetwave.SourceApproval}
			spec.ObservedVersion, spec.Hold = version, fleetwave.ReasonClaim
			id, outcome := h.createRollout(ctx, fence, spec)
			if outcome == "" {
				continue // an error, logged: try again
			}
			if id == "" {
				if _, err := h.eng.RolloutRecord(ctx, rid); err == nil {
					id = rid // created before a crash: one request, one rollout
				}
			}
			h.crashPoint("approval_created")
			if _, err := h.eng.ConsumeApproval(ctx, fence, a.ID, id); err != nil {
				log.Warn().Err(err).Msg("consume approval")
				continue
			}
			h.crashPoint("approval_consumed")
			log.Info().Str("rollout", id).Str("actor", a.DecidedBy).Int("items", len(spec.Items)).Msg("approval consumed")
			h.kick(h.statusNow)
		}
	}
	h.mu.Lock()
	h.approvalWaits = waits
	h.mu.Unlock()
}

func awaitingNodes(holds []reconciler.Problem) []string {
	var out []string
	for _, p := range holds {
		if p.Reason == fleetwave.ReasonAwaitingReport {
			out = append(out, p.Node)
		}
	}
	sort.Strings(out)
	return out
}

// approvalWait is what status says of a BRC whose config rollout waits for
// an approval.
type approvalWait = fleetwave.Wait

// gateApprovals reads the approvals gate weighs: none when the hub requires
// no approval, as gate then passes every rollout. A push's plan waits for
// each read behind the scripts of a wave in progress.
func (h *Hub) gateApprovals(ctx context.Context) ([]fleetwave.Approval, error) {
	if !h.cfg.Approval.Required {
		return nil, nil
	}
	return h.eng.Approvals(ctx)
}

// gate applies the approval policy to the reconciliation specs: the items
// it gates are taken out (the spec stays, so a new generation still
// supersedes the old), and each BRC whose items wait is returned with what
// an approval must pin. A rollback to a version every affected node
// reported before is exempt.
func (h *Hub) gate(snap *fleetwave.Snapshot, specs []fleetwave.RolloutSpec, approvals []fleetwave.Approval) ([]fleetwave.RolloutSpec, map[string]approvalWait) {
	if !h.cfg.Approval.Required {
		return specs, nil
	}
	all := h.cfg.Approval.Scope == ApprovalScopeAll
	waits := map[string]approvalWait{}
	out := make([]fleetwave.RolloutSpec, 0, len(specs))
	for _, spec := range specs {
		var gated, kept []fleetwave.ItemSpec
		for _, it := range spec.Items {
			if (all || isConfigChange(it)) && it.SkipReason == "" && it.BlockReason == "" {
				gated = append(gated, it)
			} else {
				kept = append(kept, it)
			}
		}
		if len(gated) > 0 && !all && rollbackExempt(gated, h.history.reported) {
			out = append(out, spec)
			continue
		}
		brc := spec.Source.Object.Name()
		t := snap.Triggers[brc]
		w := approvalWait{Reason: fleetwave.ReasonApprovalRequired, Generation: spec.Source.Generation}
		if t != nil {
			w.TargetVersion = t.TargetVersion
		}
		// nodes an approved request of this version covers are its
		// rollout's, not waiting
		covered := map[string]bool{}
		for _, a := range approvals {
			if a.BRC != brc || a.TargetVersion != w.TargetVersion {
				continue
			}
			switch a.State {
			case fleetwave.ApprovalPending:
				w.Approvals = append(w.Approvals, a.ID)
			case fleetwave.ApprovalApproved, fleetwave.ApprovalConsumed:
				for _, n := range a.Nodes {
					covered[n] = true
				}
			}
		}
		for _, it := range gated {
			if !covered[it.Node] {
				w.Nodes++
			}
		}
		if w.Nodes > 0 {
			w.Message = fmt.Sprintf("%d node(s) wait for an approved request pinning brc %s at version %s (fleetwave approval submit --brc %s --target-version %s)",
				w.Nodes, brc, w.TargetVersion, brc, w.TargetVersion)
			waits[brc] = w
		}
		spec.Items = kept
		out = append(out, spec)
	}
	return out, waits
}

// rollbackExempt reports whether every gated item moves its node to a
// version the node reported before for that block.
func rollbackExempt(items []fleetwave.ItemSpec, reported func(node, block, version string) bool) bool {
	for _, it := range items {
		if it.TargetVersion == "" || !reported(it.Node, it.Block, it.TargetVersion) {
			return false
		}
	}
	return true
}

// gatedRequest reports whether a manual request's plan needs an approval
// under the policy: it applies config (or, with scope all, anything).
func (h *Hub) gatedRequest(spec fleetwave.RolloutSpec) bool {
	if !h.cfg.Approval.Required {
		return false
	}
	var gated []fleetwave.ItemSpec
	for _, it := range spec.Items {
		if it.SkipReason != "" || it.BlockReason != "" {
			continue
		}
		if h.cfg.Approval.Scope == ApprovalScopeAll || (isConfigChange(it) && !it.Payload.Operational) {
			gated = append(gated, it)
		}
	}
	if len(gated) == 0 {
		return false
	}
	return h.cfg.Approval.Scope == ApprovalScopeAll || !rollbackExempt(gated, h.history.reported)
}

// restoreApprovals submits to the engine every approval record Git holds
// that the engine does not know (after a loss of Redis), as it is: its
// state, its pinned nodes, its decision, its rollout.
func (h *Hub) restoreApprovals(ctx context.Context, fence int64) {
	h.mu.Lock()
	records := make([]fleetwave.Approval, 0, len(h.gitApprovals))
	for _, a := range h.gitApprovals {
		records = append(records, a)
	}
	h.mu.Unlock()
	restored := 0
	for _, a := range records {
		if _, err := h.eng.Approval(ctx, a.ID); err == nil {
			continue
		}
		if _, err := h.eng.SubmitApproval(ctx, fence, a); err != nil {
			h.log.Warn().Err(err).Str("approval", a.ID).Msg("restore approval record")
			continue
		}
		restored++
	}
	if restored > 0 {
		h.log.Info().Int("approvals", restored).Int64("fence", fence).Msg("approval records restored from status")
	}
}

// approvalDocs renders the status document of every request.
func (h *Hub) approvalDocs(list []fleetwave.Approval, files map[string][]byte) error {
	h.mu.Lock()
	waits := h.approvalWaits
	h.mu.Unlock()
	for _, a := range list {
		data, err := status.EncodeApproval(status.Approval{Approval: a, Waiting: waits[a.ID]})
		if err != nil {
			return fmt.Errorf("approval %s: %w", a.ID, err)
		}
		files[status.ApprovalPath(a.ID)] = data
	}
	return nil
}

// approvalCounts counts the requests by state, for the summary.
func approvalCounts(list []fleetwave.Approval) map[string]int {
	out := map[string]int{}
	for _, a := range list {
		out[string(a.State)]++
	}
	return out
}

// sanitizeName lowercases s and turns what a name cannot hold into '-'.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}
