package api

import "net/http"

// whoami answers GET /api/v1/whoami with the identity of the caller's
// bearer token, {"name": "...", "role": "admin" | "operator" | "viewer"}.
// It authenticates as the writes do (server.user): 401 unauthorized
// without a token or with one that matches no identity. A hub without
// identities has no valid token, so it always answers 401 there, as it
// does every write; its reads stay open and the console shows the fleet
// read-only.
func (s *server) whoami(w http.ResponseWriter, _ *http.Request, id Identity) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, id)
}
