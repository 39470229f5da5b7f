package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Hub is what the API reads and drives. The hub package implements it.
//
// Errors may wrap an *Error (its status and code are answered as is) or
// ErrNotFound (404 not_found); any other error is answered as 500 internal
// with a generic message, and its text is only logged.
type Hub interface {
	// AuthenticateAgent maps a per-node bearer token to its node.
	AuthenticateAgent(token string) (node string, ok bool)
	// RegisterAgent records an agent's full report at start; r.Node is the
	// token's node.
	RegisterAgent(ctx context.Context, r fleetwave.Report) error
	// PollAttempts returns the attempts queued for node, waiting up to wait
	// for one to appear.
	PollAttempts(ctx context.Context, node string, wait time.Duration) ([]fleetwave.Attempt, error)
	// CompleteAttempt applies the result of one of node's attempts.
	CompleteAttempt(ctx context.Context, node string, res fleetwave.AttemptResult) error
	// Report stores a full report; r.Node is the token's node.
	Report(ctx context.Context, r fleetwave.Report) error
	// Summary returns the dashboard counters, the last sync and the rollouts.
	Summary(ctx context.Context) (fleetwave.Summary, error)
	// Rollout returns one rollout and its items, or an error matching
	// ErrNotFound.
	Rollout(ctx context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error)
	// TriggerSync asks for a fetch of the config repository now.
	TriggerSync()
	// Ready returns nil when the hub can serve (store reachable, a snapshot
	// in force).
	Ready(ctx context.Context) error
	// VerifyGitHook checks a webhook's signature (nil when none is
	// configured); an error refuses the hook with 401.
	VerifyGitHook(header http.Header, body []byte) error
	// AuthenticateUser maps an API caller's bearer token to an identity.
	AuthenticateUser(token string) (Identity, bool)
	// SetRolloutState pauses, resumes or cancels a rollout for actor.
	SetRolloutState(ctx context.Context, id, action string, actor Identity) error
}

// Identity is an API caller: a name and a role (admin, operator, viewer).
type Identity struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// Roles of API callers.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleViewer   = "viewer"
)

// ErrNotFound is the sentinel a Hub wraps when the requested object does not
// exist; the API answers 404 not_found.
var ErrNotFound = errors.New("not found")

// Error is an error with a user-safe answer: HTTP status, stable code,
// message and optional details. A Hub returns it (possibly wrapped) to choose
// the answer.
type Error struct {
	Status  int
	Code    string
	Message string
	Details any
}

// Error returns "code: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// MaxPollWait caps the wait of the agents' long poll.
const MaxPollWait = 30 * time.Second

// DefaultMaxBody is the default cap of request bodies.
const DefaultMaxBody = 1 << 20

// Option configures New.
type Option func(*server)

// WithLogger sets the logger (default: a disabled logger).
func WithLogger(l zerolog.Logger) Option { return func(s *server) { s.log = l } }

// WithMaxBody caps request bodies at n bytes (default 1 MiB); n <= 0 keeps
// the default.
func WithMaxBody(n int64) Option {
	return func(s *server) {
		if n > 0 {
			s.maxBody = n
		}
	}
}

// WithMetrics registers the API's metrics on reg and serves g at /metrics.
// Without it, the API uses a private registry with the Go and process
// collectors.
func WithMetrics(reg prometheus.Registerer, g prometheus.Gatherer) Option {
	return func(s *server) { s.reg, s.gatherer = reg, g }
}

// WithErrorMapping answers e for hub errors matching target (errors.Is), so a
// hub can pass its own sentinels instead of wrapping *Error.
func WithErrorMapping(target error, e Error) Option {
	return func(s *server) { s.mappings = append(s.mappings, mapping{target, e}) }
}

type mapping struct {
	target error
	answer Error
}

type server struct {
	hub      Hub
	log      zerolog.Logger
	maxBody  int64
	reg      prometheus.Registerer
	gatherer prometheus.Gatherer
	mappings []mapping
	metrics  *metrics
	mux      *http.ServeMux
}

// New returns the HTTP handler of the API and the console. It panics only
// when WithMetrics is given a registerer that refuses the API's collectors for
// another reason than their being already registered.
func New(h Hub, opts ...Option) http.Handler {
	s := &server{hub: h, log: zerolog.Nop(), maxBody: DefaultMaxBody}
	for _, o := range opts {
		o(s)
	}
	if s.reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		s.reg, s.gatherer = r, r
	}
	if s.gatherer == nil {
		s.gatherer = prometheus.DefaultGatherer
	}
	s.metrics = newMetrics(s.reg)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.console)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("GET /api/v1/summary", s.summary)
	mux.HandleFunc("GET /api/v1/rollouts", s.rollouts)
	mux.HandleFunc("GET /api/v1/rollouts/{id}", s.rollout)
	mux.HandleFunc("POST /api/v1/hooks/git", s.hookGit)
	mux.HandleFunc("POST /api/v1/rollouts/{id}/{action}", s.user(RoleOperator, s.rolloutState))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/register", s.agent(s.register))
	mux.HandleFunc("GET /api/v1/agent/nodes/{node}/attempts", s.agent(s.poll))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/attempts/{attempt}/result", s.agent(s.result))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/report", s.agent(s.report))
	mux.HandleFunc("/api/", s.notFound)
	s.mux = mux
	return s
}

// ServeHTTP instruments every request and turns panics into 500 answers.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error().Str("method", r.Method).Str("path", r.URL.Path).Str("panic", fmt.Sprint(p)).Msg("handler panicked")
			if !rw.wrote {
				writeJSONError(rw, &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"})
			}
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		code := rw.status
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	s.mux.ServeHTTP(rw, r)
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.hub.Ready(r.Context()); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			s.log.Warn().Err(err).Msg("hub not ready")
			e = &Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "hub not ready"}
		}
		writeJSONError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (s *server) summary(w http.ResponseWriter, r *http.Request) {
	sum, err := s.hub.Summary(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if sum.Rollouts == nil {
		sum.Rollouts = []fleetwave.Rollout{}
	}
	writeJSON(w, http.StatusOK, sum)
}

func (s *server) rollouts(w http.ResponseWriter, r *http.Request) {
	sum, err := s.hub.Summary(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if sum.Rollouts == nil {
		sum.Rollouts = []fleetwave.Rollout{}
	}
	writeJSON(w, http.StatusOK, sum.Rollouts)
}

// RolloutAnswer is the body of GET /api/v1/rollouts/{id}.
type RolloutAnswer struct {
	Rollout fleetwave.Rollout `json:"rollout"`
	Items   []fleetwave.Item  `json:"items"`
}

func (s *server) rollout(w http.ResponseWriter, r *http.Request) {
	s.writeRollout(w, r)
}

// writeRollout answers the rollout named in the path with its items.
func (s *server) writeRollout(w http.ResponseWriter, r *http.Request) {
	ro, items, err := s.hub.Rollout(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if items == nil {
		items = []fleetwave.Item{}
	}
	writeJSON(w, http.StatusOK, RolloutAnswer{Rollout: ro, Items: items})
}

func (s *server) hookGit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		s.fail(w, r, bodyError(err))
		return
	}
	if err := s.hub.VerifyGitHook(r.Header, body); err != nil {
		s.log.Warn().Err(err).Str("remote", r.RemoteAddr).Msg("webhook refused")
		writeJSONError(w, &Error{Status: http.StatusUnauthorized, Code: "invalid_signature", Message: "webhook signature does not verify"})
		return
	}
	s.hub.TriggerSync()
	s.log.Info().Msg("sync requested by webhook")
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
}

func (s *server) notFound(w http.ResponseWriter, _ *http.Request) {
	writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such endpoint"})
}

// unauthorized answers 401 with its WWW-Authenticate challenge, for a
// missing token or (invalid) one that matches no node or identity.
func unauthorized(w http.ResponseWriter, invalid bool) {
	if invalid {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleetwave", error="invalid_token"`)
		writeJSONError(w, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "invalid bearer token"})
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="fleetwave"`)
	writeJSONError(w, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing bearer token"})
}

// agent authenticates an agent request: the bearer token must belong to the
// node named in the path.
func (s *server) agent(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			unauthorized(w, false)
			return
		}
		node, ok := s.hub.AuthenticateAgent(token)
		if !ok {
			s.log.Warn().Str("node", r.PathValue("node")).Str("remote", r.RemoteAddr).Msg("agent token refused")
			unauthorized(w, true)
			return
		}
		if node != r.PathValue("node") {
			s.log.Warn().Str("node", node).Str("path_node", r.PathValue("node")).Msg("agent addressed another node")
			writeJSONError(w, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "token does not belong to this node"})
			return
		}
		next(w, r, node)
	}
}

// user authenticates an API caller and requires at least role (admin >
// operator > viewer).
func (s *server) user(role string, next func(http.ResponseWriter, *http.Request, Identity)) http.HandlerFunc {
	rank := map[string]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			unauthorized(w, false)
			return
		}
		id, ok := s.hub.AuthenticateUser(token)
		if !ok {
			s.log.Warn().Str("remote", r.RemoteAddr).Msg("api token refused")
			unauthorized(w, true)
			return
		}
		if rank[id.Role] < rank[role] {
			writeJSONError(w, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "role " + id.Role + " may not do this; " + role + " required"})
			return
		}
		next(w, r, id)
	}
}

func (s *server) rolloutState(w http.ResponseWriter, r *http.Request, id Identity) {
	action := r.PathValue("action")
	switch action {
	case "pause", "resume", "cancel":
	default:
		writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such rollout action; want pause, resume or cancel"})
		return
	}
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, s.maxBody)); err != nil {
		s.fail(w, r, bodyError(err))
		return
	}
	if err := s.hub.SetRolloutState(r.Context(), r.PathValue("id"), action, id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("rollout", r.PathValue("id")).Str("action", action).Str("actor", id.Name).Msg("rollout state changed")
	s.writeRollout(w, r)
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (s *server) register(w http.ResponseWriter, r *http.Request, node string) {
	s.takeReport(w, r, node, s.hub.RegisterAgent)
}

func (s *server) report(w http.ResponseWriter, r *http.Request, node string) {
	s.takeReport(w, r, node, s.hub.Report)
}

func (s *server) takeReport(w http.ResponseWriter, r *http.Request, node string, store func(context.Context, fleetwave.Report) error) {
	var rep fleetwave.Report
	if err := s.decode(w, r, &rep); err != nil {
		s.fail(w, r, err)
		return
	}
	if rep.Node != "" && rep.Node != node {
		writeJSONError(w, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "report names another node"})
		return
	}
	rep.Node = node
	rep.ReceivedAt = time.Time{}
	if err := store(r.Context(), rep); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// AttemptsAnswer is the body of GET /api/v1/agent/nodes/{node}/attempts.
type AttemptsAnswer struct {
	Attempts []fleetwave.Attempt `json:"attempts"`
}

func (s *server) poll(w http.ResponseWriter, r *http.Request, node string) {
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: err.Error()})
		return
	}
	atts, err := s.hub.PollAttempts(r.Context(), node, wait)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if atts == nil {
		atts = []fleetwave.Attempt{}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, AttemptsAnswer{Attempts: atts})
}

// parseWait reads a Go duration ("10s") or whole seconds ("10"), clamped to
// [0, MaxPollWait].
func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("wait %q is neither a duration nor seconds", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, fmt.Errorf("wait %q is negative", v)
	}
	return min(d, MaxPollWait), nil
}

func (s *server) result(w http.ResponseWriter, r *http.Request, node string) {
	var res fleetwave.AttemptResult
	if err := s.decode(w, r, &res); err != nil {
		s.fail(w, r, err)
		return
	}
	if res.AttemptID != r.PathValue("attempt") {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "attempt_mismatch",
			Message: "attempt_id in the body differs from the attempt in the path"})
		return
	}
	if err := s.hub.CompleteAttempt(r.Context(), node, res); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decode reads one JSON value from a capped body, refusing unknown fields
// and trailing data.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "body holds more than one JSON value"}
	}
	return nil
}

func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("body exceeds %d bytes", tooLarge.Limit)}
	}
	if errors.Is(err, io.EOF) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "empty body"}
	}
	// json errors name fields and offsets, never values: safe to answer.
	return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: strings.TrimPrefix(err.Error(), "json: ")}
}

// fail answers err: an *Error as is, mapped sentinels, ErrNotFound as 404,
// anything else as a logged 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, ErrNotFound):
		e = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "not found"}
	default:
		for _, m := range s.mappings {
			if errors.Is(err, m.target) {
				answer := m.answer
				e = &answer
				break
			}
		}
	}
	if e == nil {
		if r.Context().Err() != nil {
			// The client went away; nobody reads the answer.
			s.log.Debug().Err(err).Str("path", r.URL.Path).Msg("request cancelled")
			e = &Error{Status: 499, Code: "cancelled", Message: "request cancelled"}
		} else {
			s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("request failed")
			e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
		}
	}
	writeJSONError(w, e)
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
}

func writeJSONError(w http.ResponseWriter, e *Error) {
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	code := e.Code
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	}
	writeJSON(w, status, errorBody{Error: errorFields{Code: code, Message: e.Message, Details: e.Details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, status = []byte(`{"error":{"code":"internal","message":"cannot encode answer"}}`), http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// statusWriter records the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
