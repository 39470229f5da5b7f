package api

import (
	"bytes"
	"context"
	"net/http"

	"github.com/fleetwave/fleetwave"
)

// ApprovalSubmission is the body of POST /api/v1/config-approvals: the
// fields of an approvals/<id> file. ID is optional (the hub names the
// request); Nodes or Selector say the targets, resolved once and pinned.
type ApprovalSubmission struct {
	ID            string              `json:"id,omitempty"`
	BRC           string              `json:"brc"`
	TargetVersion string              `json:"target_version"`
	Nodes         []string            `json:"nodes,omitempty"`
	Selector      *fleetwave.Selector `json:"selector,omitempty"`
	BatchSize     int                 `json:"batch_size,omitempty"`
}

// ApprovalHub is the part of Hub the approval endpoints use. Errors are
// *Error with the codes of the package doc (forbidden, self_approval,
// not_pending, not_found, unknown_brc, version_mismatch, no_matching_nodes,
// unknown_node, invalid_request, already_exists, not_leader).
type ApprovalHub interface {
	// SubmitApproval records a request by actor (operator or admin),
	// pinned; nothing is created until another admin approves it.
	SubmitApproval(ctx context.Context, actor Identity, s ApprovalSubmission) (fleetwave.Approval, error)
	// DecideApproval records an admin's decision (approved or rejected) on
	// a pending request that actor did not submit.
	DecideApproval(ctx context.Context, actor Identity, id string, decision fleetwave.ApprovalState) (fleetwave.Approval, error)
	// Approvals lists every request; Approval returns one.
	Approvals(ctx context.Context) ([]fleetwave.Approval, error)
	Approval(ctx context.Context, id string) (fleetwave.Approval, error)
}

func (s *server) approvalRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/config-approvals", s.listApprovals)
	mux.HandleFunc("GET /api/v1/config-approvals/{id}", s.getApproval)
	mux.HandleFunc("POST /api/v1/config-approvals", s.user(RoleOperator, s.submitApproval))
	mux.HandleFunc("POST /api/v1/config-approvals/{id}/{decision}", s.user(RoleAdmin, s.decideApproval))
}

func (s *server) listApprovals(w http.ResponseWriter, r *http.Request) {
	list, err := s.hub.Approvals(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if list == nil {
		list = []fleetwave.Approval{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
}

func (s *server) getApproval(w http.ResponseWriter, r *http.Request) {
	a, err := s.hub.Approval(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *server) submitApproval(w http.ResponseWriter, r *http.Request, id Identity) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var sub ApprovalSubmission
	if err := decodeJSON(body, &sub); err != nil {
		s.fail(w, r, err)
		return
	}
	switch {
	case sub.BRC == "":
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "brc is required", Details: map[string]string{"field": "brc"}})
		return
	case sub.TargetVersion == "":
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "target_version is required", Details: map[string]string{"field": "target_version"}})
		return
	case len(sub.Nodes) == 0 && sub.Selector == nil:
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "nodes or selector is required", Details: map[string]string{"field": "nodes"}})
		return
	case len(sub.Nodes) > 0 && sub.Selector != nil:
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "give nodes or a selector, not both", Details: map[string]string{"field": "selector"}})
		return
	case len(sub.Nodes) > maxApprovalNodes:
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "too many nodes", Details: map[string]any{"field": "nodes", "max": maxApprovalNodes}})
		return
	}
	a, herr := s.hub.SubmitApproval(r.Context(), id, sub)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	s.log.Info().Str("approval", a.ID).Str("brc", a.BRC).Str("actor", id.Name).Msg("approval submitted")
	writeJSON(w, http.StatusCreated, map[string]any{"id": a.ID, "approval": a})
}

// maxApprovalNodes caps the explicit nodes of one submission.
const maxApprovalNodes = 100_000

func (s *server) decideApproval(w http.ResponseWriter, r *http.Request, id Identity) {
	var decision fleetwave.ApprovalState
	switch r.PathValue("decision") {
	case "approve":
		decision = fleetwave.ApprovalApproved
	case "reject":
		decision = fleetwave.ApprovalRejected
	default:
		writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such approval action; want approve or reject"})
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(bytes.Trim(body, jsonSpace)) > 0 {
		var none struct{}
		if err := decodeJSON(body, &none); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	a, herr := s.hub.DecideApproval(r.Context(), id, r.PathValue("id"), decision)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	s.log.Info().Str("approval", a.ID).Str("decision", string(decision)).Str("actor", id.Name).Msg("approval decided")
	writeJSON(w, http.StatusOK, a)
}
