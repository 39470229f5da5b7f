package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/schema"
)

// NodeHub is the part of Hub the node endpoints, rollout requests and the
// filtered rollout list use. Writes are commits to the config repository
// (the hub authors them, the actor in a Fleetwave-Actor trailer, the reason
// in Fleetwave-Reason): the repository stays the one source of truth.
type NodeHub interface {
	// IdentitiesConfigured reports whether API identities are configured:
	// then every read of the API needs at least a viewer token.
	IdentitiesConfigured() bool
	// Nodes returns, sorted by id, at most limit nodes whose id sorts
	// after after ("" for the first page), and whether more follow.
	Nodes(ctx context.Context, after string, limit int) (nodes []NodeView, more bool, err error)
	// Node returns one node, or an error matching ErrNotFound.
	Node(ctx context.Context, id string) (NodeView, error)
	// SetNodeLabels replaces the whole label set of node id for actor
	// (an operator or admin): labels passed schema.CheckLabels; an empty
	// map removes them. Commit is "" when the file already said so.
	SetNodeLabels(ctx context.Context, actor Identity, id string, labels map[string]string, reason string) (NodeWrite, error)
	// SetNodeDrain sets (drain) or removes (undrain) `drain: true` in node
	// id's file for actor.
	SetNodeDrain(ctx context.Context, actor Identity, id string, drain bool, reason string) (NodeWrite, error)
	// RequestRollout plans a manual rollout request as a rollouts/<name>
	// file would be planned and, unless req.DryRun, commits it for actor
	// with the resolved nodes pinned. Errors: *Error with the codes of
	// POST /api/v1/rollouts (package doc).
	RequestRollout(ctx context.Context, actor Identity, req RolloutCreate) (RolloutPlan, error)
	// ListRollouts returns the rollouts matching f, newest first.
	ListRollouts(ctx context.Context, f RolloutFilter) ([]fleetwave.Rollout, error)
}

// NodeView is a node as the API shows it (GET /api/v1/nodes[/{id}]): its
// record in the config repository, its agent's last report, and what the
// hub sees of it. Lists and maps are never null.
type NodeView struct {
	ID           string `json:"id"`
	Organization string `json:"organization,omitempty"`
	Workspace    string `json:"workspace,omitempty"`
	// Criticality is the effective one: the node's, else its
	// workspace's, else its organization's, else medium.
	Criticality fleetwave.Criticality `json:"criticality,omitempty"`
	Labels      map[string]string     `json:"labels"`
	Drain       bool                  `json:"drain"`
	// MaintenanceWindows are the windows the node is bound by: its own,
	// else its workspace's, else its organization's.
	MaintenanceWindows []string `json:"maintenance_windows"`
	// UnknownNode: an agent reported the node but the repository has no
	// record of it (criticality and windows are then empty).
	UnknownNode bool `json:"unknown_node,omitempty"`
	// Reported is whether the node's agent ever sent a full report;
	// LastReportAt when the hub received the last one.
	Reported     bool      `json:"reported"`
	LastReportAt time.Time `json:"last_report_at,omitzero"`
	AgentVersion string    `json:"agent_version,omitempty"`
	// Stale: no report within the hub's stale_after (or never).
	Stale bool `json:"stale"`
	// Capabilities and the names of the data addresses, from the last
	// report.
	Capabilities  []string       `json:"capabilities"`
	DataAddresses []string       `json:"data_addresses"`
	Instances     []NodeInstance `json:"instances"`
	// Drift is how observed differs from desired on the node (the
	// reconciler's drift entries, stale_node included).
	Drift []NodeDrift `json:"drift"`
	// Waiting are the items of unfinished rollouts that wait on the node
	// (pending, ambiguous), with why.
	Waiting []WaitingItem `json:"waiting"`
	// Held are the instances the reconciler holds or cannot plan on the
	// node (node_draining, invalid config, ...).
	Held []HeldInstance `json:"held"`
	// ObservedVersions are, per block, the versions the node ever
	// reported (the rollback guard of the approval policy reads them).
	ObservedVersions map[string][]string `json:"observed_versions"`
}

// NodeInstance is one block instance as the node's agent last reported it.
type NodeInstance struct {
	Block      string                 `json:"block"`
	Version    string                 `json:"version,omitempty"`
	ConfigHash string                 `json:"config_hash,omitempty"`
	State      fleetwave.DesiredState `json:"state,omitempty"`
	Generation int64                  `json:"generation"`
	ManagedBy  string                 `json:"managed_by,omitempty"`
}

// NodeDrift is one difference between desired and observed on a node.
type NodeDrift struct {
	Block    string `json:"block,omitempty"`
	Trigger  string `json:"trigger,omitempty"`
	Kind     string `json:"kind"`
	Desired  string `json:"desired,omitempty"`
	Observed string `json:"observed,omitempty"`
}

// WaitingItem is an item that waits on a node, as status/nodes lists it.
type WaitingItem struct {
	Rollout string `json:"rollout"`
	Item    string `json:"item"`
	Block   string `json:"block"`
	Action  string `json:"action"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
}

// HeldInstance is an instance the reconciler holds or cannot plan.
type HeldInstance struct {
	Block   string `json:"block"`
	Trigger string `json:"brc"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// NodeWrite is the answer of a node write: the commit ("" when the file
// already said so) and the node as it is with the write applied.
type NodeWrite struct {
	Commit string   `json:"commit"`
	Node   NodeView `json:"node"`
}

// LabelsBody is the body of PUT /api/v1/nodes/{id}/labels.
type LabelsBody struct {
	// Labels is the whole new set; {} removes every label.
	Labels map[string]string `json:"labels"`
	// Reason is recorded in the commit's Fleetwave-Reason trailer.
	Reason string `json:"reason,omitempty"`
}

// ReasonBody is the optional body of the drain and undrain endpoints.
type ReasonBody struct {
	Reason string `json:"reason,omitempty"`
}

// Limits of the node and rollout endpoints.
const (
	// DefaultPageLimit and MaxPageLimit bound the items of one page
	// (limit query parameter); a larger limit is capped.
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	// MaxReasonLen caps a write's reason, in bytes.
	MaxReasonLen = 1024
)

// nodeRoutes registers the node endpoints (the package doc's lines to
// add, with POST /api/v1/rollouts and the query of GET /api/v1/rollouts
// in rollouts_create.go):
//
//	GET  /api/v1/nodes?limit=N&cursor=C   viewer when identities are configured
//	     -> 200 {"nodes": [NodeView], "next": "<cursor>" | ""}; sorted by id; limit
//	        default 100, capped at 1000; cursor opaque (the last page's "next")
//	GET  /api/v1/nodes/{id}               -> 200 NodeView; 404 not_found
//	PUT  /api/v1/nodes/{id}/labels        operator or admin
//	     body {"labels": {...}, "reason"?: "..."}: the WHOLE new set, {} removes all
//	     -> 200 {"commit": "<hash>" | "", "node": NodeView}; 400 invalid_labels
//	        (details.labels: [{"key", "problem"}]); 404 not_found; 409 conflict;
//	        422 invalid_change | not_editable; 503 not_ready | git_unavailable | git_busy
//	POST /api/v1/nodes/{id}/drain         operator or admin; no body, {} or {"reason": "..."}
//	POST /api/v1/nodes/{id}/undrain       -> as labels
func (s *server) nodeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/nodes", s.listNodes)
	mux.HandleFunc("GET /api/v1/nodes/{id}", s.getNode)
	mux.HandleFunc("PUT /api/v1/nodes/{id}/labels", s.user(RoleOperator, s.putLabels))
	mux.HandleFunc("POST /api/v1/nodes/{id}/drain", s.user(RoleOperator, s.drainNode(true)))
	mux.HandleFunc("POST /api/v1/nodes/{id}/undrain", s.user(RoleOperator, s.drainNode(false)))
}

// page reads the limit and cursor query parameters; a cursor is opaque to
// clients (the last key of the previous page).
func page(r *http.Request) (limit int, after string, e *Error) {
	q := r.URL.Query()
	limit = DefaultPageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, "", &Error{Status: http.StatusBadRequest, Code: "invalid_query",
				Message: fmt.Sprintf("limit %s: want a positive integer (at most %d)", quote(v), MaxPageLimit), Details: map[string]string{"field": "limit"}}
		}
		limit = min(n, MaxPageLimit)
	}
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || textProblem(string(b), MaxFieldLen, true) != "" {
			return 0, "", &Error{Status: http.StatusBadRequest, Code: "invalid_query",
				Message: "cursor: not a cursor this API gave; start again without one", Details: map[string]string{"field": "cursor"}}
		}
		after = string(b)
	}
	return limit, after, nil
}

func cursorOf(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// NodesAnswer is the body of GET /api/v1/nodes.
type NodesAnswer struct {
	Nodes []NodeView `json:"nodes"`
	// Next is the cursor of the next page, "" on the last one.
	Next string `json:"next"`
}

func (s *server) listNodes(w http.ResponseWriter, r *http.Request) {
	limit, after, perr := page(r)
	if perr != nil {
		writeJSONError(w, perr)
		return
	}
	nodes, more, err := s.hub.Nodes(r.Context(), after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(nodes) > limit {
		nodes, more = nodes[:limit], true
	}
	a := NodesAnswer{Nodes: nodes}
	if a.Nodes == nil {
		a.Nodes = []NodeView{}
	}
	if more && len(nodes) > 0 {
		a.Next = cursorOf(nodes[len(nodes)-1].ID)
	}
	writeJSON(w, http.StatusOK, a)
}

// nodeID returns the node of the path, or answers 404 for an id no node
// can have.
func nodeID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if textProblem(id, MaxFieldLen, true) != "" {
		writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such node"})
		return "", false
	}
	return id, true
}

func (s *server) getNode(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	n, err := s.hub.Node(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// checkReason refuses an over-long reason or one with control characters
// (it becomes a commit trailer).
func checkReason(reason string) *Error {
	return checkText("invalid_body", "reason", reason, MaxReasonLen, false)
}

func (s *server) putLabels(w http.ResponseWriter, r *http.Request, actor Identity) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	body, rerr := s.readBody(w, r)
	if rerr != nil {
		s.fail(w, r, rerr)
		return
	}
	var req LabelsBody
	if err := decodeJSON(body, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Labels == nil {
		writeJSONError(w, fieldError("invalid_body", "labels", "is required: the whole new label set ({} removes every label)"))
		return
	}
	if err := checkReason(req.Reason); err != nil {
		writeJSONError(w, err)
		return
	}
	if probs := schema.CheckLabels(req.Labels); len(probs) > 0 {
		writeJSONError(w, invalidLabels(probs))
		return
	}
	res, err := s.hub.SetNodeLabels(r.Context(), actor, id, req.Labels, req.Reason)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("node", id).Str("actor", actor.Name).Str("commit", res.Commit).Int("labels", len(req.Labels)).Msg("node labels written")
	writeJSON(w, http.StatusOK, res)
}

// invalidLabels is the 400 answer to a label set the schema refuses: each
// bad label and why.
func invalidLabels(probs []schema.LabelProblem) *Error {
	var msg string
	if p := probs[0]; p.Key != "" {
		msg = fmt.Sprintf("labels[%s]: %s", quote(p.Key), p.Problem)
	} else {
		msg = "labels: " + p.Problem
	}
	if len(probs) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(probs)-1)
	}
	return &Error{Status: http.StatusBadRequest, Code: "invalid_labels", Message: msg,
		Details: map[string]any{"field": "labels", "labels": probs, "max_labels": schema.MaxLabels}}
}

func (s *server) drainNode(drain bool) func(http.ResponseWriter, *http.Request, Identity) {
	return func(w http.ResponseWriter, r *http.Request, actor Identity) {
		id, ok := nodeID(w, r)
		if !ok {
			return
		}
		body, rerr := s.readBody(w, r)
		if rerr != nil {
			s.fail(w, r, rerr)
			return
		}
		var req ReasonBody
		if len(bytes.Trim(body, jsonSpace)) > 0 {
			if err := decodeJSON(body, &req); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		if err := checkReason(req.Reason); err != nil {
			writeJSONError(w, err)
			return
		}
		res, err := s.hub.SetNodeDrain(r.Context(), actor, id, drain, req.Reason)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.log.Info().Str("node", id).Str("actor", actor.Name).Str("commit", res.Commit).Bool("drain", drain).Msg("node drain written")
		writeJSON(w, http.StatusOK, res)
	}
}
