package api

import (
	"context"
	"net/http"

	"github.com/fleetwave/fleetwave"
)

// DetectHub is the part of a Hub that hands agents the detect commands of
// the blocks their node is in scope of (fleetwave.DetectCommand), so that
// they report instances installed by hand (managed_by cli). It is
// optional: the API answers an empty list for a Hub without it.
type DetectHub interface {
	// DetectCommands returns node's detect commands, sorted by block. A
	// hub that has not read its config repository yet answers an *Error
	// 503 not_ready: the agent then waits instead of reporting without.
	DetectCommands(ctx context.Context, node string) ([]fleetwave.DetectCommand, error)
}

// DetectAnswer is the body of GET /api/v1/agent/nodes/{node}/detect.
type DetectAnswer struct {
	Blocks []fleetwave.DetectCommand `json:"blocks"`
}

func (s *server) detectRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/agent/nodes/{node}/detect", s.agent(s.detectCommands))
}

func (s *server) detectCommands(w http.ResponseWriter, r *http.Request, node string) {
	out := DetectAnswer{Blocks: []fleetwave.DetectCommand{}}
	if dh, ok := s.hub.(DetectHub); ok {
		cmds, err := dh.DetectCommands(r.Context(), node)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if cmds != nil {
			out.Blocks = cmds
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}
