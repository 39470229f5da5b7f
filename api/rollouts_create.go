package api

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"

	"github.com/fleetwave/fleetwave"
)

// RolloutCreate is the body of POST /api/v1/rollouts: the fields of a
// rollouts/<name> request file, plus DryRun and a Reason for the commit.
// Exactly one of Nodes and Selector says the targets; they are resolved
// once and the request file pins the resolved nodes.
type RolloutCreate struct {
	// Name is the request's name (a DNS label); the hub makes one up when
	// it is empty. The rollout is "manual-<name>".
	Name          string              `json:"name,omitempty"`
	BRC           string              `json:"brc"`
	ActionName    string              `json:"action_name,omitempty"`
	TargetVersion string              `json:"target_version,omitempty"`
	Nodes         []string            `json:"nodes,omitempty"`
	Selector      *fleetwave.Selector `json:"selector,omitempty"`
	BatchSize     int                 `json:"batch_size,omitempty"`
	// DryRun plans and answers without writing anything.
	DryRun bool   `json:"dry_run,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RolloutPlan is what a rollout request plans (and, without dry run,
// what it committed).
type RolloutPlan struct {
	Name string `json:"name"`
	// Rollout is the id of the rollout the request creates.
	Rollout string `json:"rollout"`
	// Targets are the resolved nodes, sorted: what the request pins.
	Targets []string `json:"targets"`
	// Items are the planned items in dispatch (criticality) order.
	Items []RolloutPlanItem `json:"items,omitempty"`
	// ApprovalRequired: the hub's approval policy gates the request (it
	// applies config): it must go through POST /api/v1/config-approvals.
	ApprovalRequired bool `json:"approval_required"`
	// Commit is the commit that added rollouts/<name>.yaml.
	Commit string `json:"commit,omitempty"`
}

// RolloutPlanItem is one planned item of a rollout request. Skipped and
// Blocked say why an item would be created skipped (e.g. not_installed,
// cli_managed) or blocked (invalid_config, with Message); never a config.
type RolloutPlanItem struct {
	Node          string `json:"node"`
	Block         string `json:"block"`
	Action        string `json:"action"`
	TargetVersion string `json:"target_version,omitempty"`
	Skipped       string `json:"skipped,omitempty"`
	Blocked       string `json:"blocked,omitempty"`
	Message       string `json:"message,omitempty"`
}

// RolloutFilter selects rollouts (GET /api/v1/rollouts): by state, by BRC
// and by lane (a rollout with at least one item in that lane, its
// managed_by); an empty field selects all.
type RolloutFilter struct {
	State fleetwave.RolloutStatus
	BRC   string
	Lane  string
}

// RolloutsPage is the body of GET /api/v1/rollouts with a query.
type RolloutsPage struct {
	Rollouts []fleetwave.Rollout `json:"rollouts"`
	// Next is the cursor of the next page, "" on the last one.
	Next string `json:"next"`
}

// requestName is a request's name: a DNS label like every object name.
var requestName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// rolloutStates are the states ?state= accepts.
var rolloutStates = []fleetwave.RolloutStatus{fleetwave.RolloutActive, fleetwave.RolloutPaused, fleetwave.RolloutBlocked,
	fleetwave.RolloutCompleted, fleetwave.RolloutCancelled, fleetwave.RolloutSuperseded}

// listRollouts answers GET /api/v1/rollouts: the bare list of every
// rollout without a query (as before), a page of the matching ones with
// one of limit, cursor, state, brc or lane.
func (s *server) listRollouts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("limit") && !q.Has("cursor") && !q.Has("state") && !q.Has("brc") && !q.Has("lane") {
		s.rollouts(w, r)
		return
	}
	limit, after, perr := page(r)
	if perr != nil {
		writeJSONError(w, perr)
		return
	}
	var f RolloutFilter
	if f.Lane = q.Get("lane"); textProblem(f.Lane, MaxFieldLen, false) != "" {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "lane: not a lane name",
			Details: map[string]string{"field": "lane"}})
		return
	}
	if st := q.Get("state"); st != "" {
		if !slices.Contains(rolloutStates, fleetwave.RolloutStatus(st)) {
			writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query",
				Message: fmt.Sprintf("state %s: want active, paused, blocked, completed, cancelled or superseded", quote(st)),
				Details: map[string]string{"field": "state"}})
			return
		}
		f.State = fleetwave.RolloutStatus(st)
	}
	if f.BRC = q.Get("brc"); textProblem(f.BRC, MaxFieldLen, false) != "" {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: "brc: not a BRC name",
			Details: map[string]string{"field": "brc"}})
		return
	}
	list, err := s.hub.ListRollouts(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	start := 0
	if after != "" {
		i := slices.IndexFunc(list, func(ro fleetwave.Rollout) bool { return ro.ID == after })
		if i < 0 {
			writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query",
				Message: "cursor: its rollout is not in this list (another filter?); start again without one", Details: map[string]string{"field": "cursor"}})
			return
		}
		start = i + 1
	}
	end := min(start+limit, len(list))
	a := RolloutsPage{Rollouts: list[start:end]}
	if a.Rollouts == nil {
		a.Rollouts = []fleetwave.Rollout{}
	}
	if end < len(list) {
		a.Next = cursorOf(list[end-1].ID)
	}
	writeJSON(w, http.StatusOK, a)
}

// checkRolloutCreate refuses a request body the hub cannot plan as
// written (400 invalid_body naming the field).
func checkRolloutCreate(req *RolloutCreate) *Error {
	const code = "invalid_body"
	switch {
	case req.BRC == "":
		return fieldError(code, "brc", "is required")
	case len(req.Nodes) == 0 && req.Selector == nil:
		return fieldError(code, "nodes", "nodes or selector is required")
	case len(req.Nodes) > 0 && req.Selector != nil:
		return fieldError(code, "selector", "give nodes or a selector, not both")
	case len(req.Nodes) > maxApprovalNodes:
		return fieldError(code, "nodes", fmt.Sprintf("holds %d nodes; at most %d", len(req.Nodes), maxApprovalNodes))
	case req.BatchSize < 0:
		return fieldError(code, "batch_size", "must be positive (0 or absent: the brc's concurrency)")
	case req.Name != "" && !requestName.MatchString(req.Name):
		return fieldError(code, "name", fmt.Sprintf("%s: want a DNS-label-like name (1-63 of a-z, 0-9, '-', alphanumeric at both ends)", quote(req.Name)))
	}
	for _, f := range []struct{ name, v string }{{"brc", req.BRC}, {"action_name", req.ActionName}, {"target_version", req.TargetVersion}} {
		if err := checkText(code, f.name, f.v, MaxFieldLen, false); err != nil {
			return err
		}
	}
	for i, n := range req.Nodes {
		if err := checkText(code, fmt.Sprintf("nodes[%d]", i), n, MaxFieldLen, true); err != nil {
			return err
		}
	}
	return checkReason(req.Reason)
}

// createRollout answers POST /api/v1/rollouts.
func (s *server) createRollout(w http.ResponseWriter, r *http.Request, actor Identity) {
	body, rerr := s.readBody(w, r)
	if rerr != nil {
		s.fail(w, r, rerr)
		return
	}
	var req RolloutCreate
	if err := decodeJSON(body, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkRolloutCreate(&req); err != nil {
		writeJSONError(w, err)
		return
	}
	plan, err := s.hub.RequestRollout(r.Context(), actor, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if plan.Targets == nil {
		plan.Targets = []string{}
	}
	if req.DryRun {
		if plan.Items == nil {
			plan.Items = []RolloutPlanItem{}
		}
		writeJSON(w, http.StatusOK, struct {
			Name             string            `json:"name"`
			Rollout          string            `json:"rollout"`
			Targets          []string          `json:"targets"`
			Items            []RolloutPlanItem `json:"items"`
			ApprovalRequired bool              `json:"approval_required"`
		}{plan.Name, plan.Rollout, plan.Targets, plan.Items, plan.ApprovalRequired})
		return
	}
	s.log.Info().Str("request", plan.Name).Str("brc", req.BRC).Str("actor", actor.Name).Str("commit", plan.Commit).
		Int("targets", len(plan.Targets)).Msg("rollout request committed")
	writeJSON(w, http.StatusCreated, struct {
		Name    string   `json:"name"`
		Commit  string   `json:"commit"`
		Rollout string   `json:"rollout"`
		Targets []string `json:"targets"`
	}{plan.Name, plan.Commit, plan.Rollout, plan.Targets})
}
