package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Hub is what the API reads and drives. The hub package implements it.
//
// Errors may wrap an *Error (its status and code are answered as is) or
// ErrNotFound (404 not_found); any other error is answered as 500 internal
// with a generic message, and its text is only logged. A hub maps the
// failures of its own dependencies (e.g. 503 redis_unavailable) to *Error.
type Hub interface {
	// AuthenticateAgent maps a per-node bearer token to its node.
	AuthenticateAgent(token string) (node string, ok bool)
	// RegisterAgent records an agent's full report at start; r.Node is the
	// token's node and r passed the API's checks (see the package doc).
	RegisterAgent(ctx context.Context, r fleetwave.Report) error
	// WantsReport says whether the hub wants a full report of node now (it
	// holds no observation of it); the poll then answers at once asking for
	// one. It must be cheap: every poll asks.
	WantsReport(node string) bool
	// PollAttempts returns the attempts queued for node, waiting up to wait
	// for one to appear; rc is what the agent says it received (the
	// "delivered" and "resume" of its query).
	PollAttempts(ctx context.Context, node string, wait time.Duration, rc fleetwave.Receipt) ([]fleetwave.Attempt, error)
	// NotHanded says that attempts PollAttempts returned for node did not
	// reach its agent: its client was gone before the answer was written
	// (written false), or the answer's write failed (written true: the
	// agent may have them). ctx may be done already.
	NotHanded(ctx context.Context, node string, atts []fleetwave.Attempt, written bool)
	// CompleteAttempt applies the result of one of node's attempts; res
	// passed the API's checks. The hub answers an attempt of another node
	// with 403 forbidden before anything else.
	CompleteAttempt(ctx context.Context, node string, res fleetwave.AttemptResult) error
	// AttemptNode returns the node an attempt was dispatched to, or an
	// error (an *Error such as 404 unknown_attempt when there is no such
	// attempt). The API asks it only before refusing a result, so that a
	// node learns nothing about another node's attempts from the answer.
	AttemptNode(ctx context.Context, attemptID string) (node string, err error)
	// Report stores a full report; r.Node is the token's node and r passed
	// the API's checks.
	Report(ctx context.Context, r fleetwave.Report) error
	// Summary returns the dashboard counters, the last sync and the rollouts.
	Summary(ctx context.Context) (fleetwave.Summary, error)
	// RolloutPage returns one rollout, at most limit of its items in
	// dispatch order (those after item after, "" for the first page) and
	// whether more follow, or an error matching ErrNotFound. The rollout's
	// counters are those of every item, not the page's. A cursor that is
	// not an item of the rollout is an *Error (400 invalid_query).
	RolloutPage(ctx context.Context, id, after string, limit int) (r fleetwave.Rollout, items []fleetwave.Item, more bool, err error)
	// TriggerSync asks for a fetch of the config repository now.
	TriggerSync()
	// Readiness checks the hub's dependencies; it must answer within about
	// a second (probes time out).
	Readiness(ctx context.Context) Readiness
	// VerifyGitHook checks a webhook's signature (nil when none is
	// configured); an error refuses the hook with 401.
	VerifyGitHook(header http.Header, body []byte) error
	// AuthenticateUser maps an API caller's bearer token to an identity.
	AuthenticateUser(token string) (Identity, bool)
	// SetRolloutState pauses, resumes or cancels a rollout for actor.
	SetRolloutState(ctx context.Context, id, action string, actor Identity) error
	// ApprovalHub: approval requests (submit, decide, list, get).
	ApprovalHub
	// NodeHub: nodes (list, get, labels, drain), rollout requests, the
	// filtered list of rollouts, and whether reads need a token.
	NodeHub
}

// Readiness is the state of the hub's dependencies, as GET /readyz answers
// it.
type Readiness struct {
	// Checks maps each dependency ("redis", "git", ...) to "ok", a state
	// word (e.g. "leader", "follower") or "error: <cause>". Causes name the
	// failing dependency and never hold secrets.
	Checks map[string]string
	// Failing names the checks that keep the hub from serving; the hub is
	// ready when it is empty. A check may report an error without being
	// failing (e.g. git, while the last good snapshot stays in force).
	Failing []string
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

// DefaultMaxPollWait caps the wait of the agents' long poll unless
// WithMaxPollWait says otherwise.
const DefaultMaxPollWait = 30 * time.Second

// Defaults of the request limits (see the package doc).
const (
	// DefaultMaxBody is the default cap of request bodies.
	DefaultMaxBody = 1 << 20
	// DefaultBodyTimeout is the default time a request body has to arrive
	// in full: an agent's report is a few kilobytes, and 1 MiB takes under
	// 10 s even at 1 Mbit/s.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultWriteTimeout is the default time an answer has to be written
	// (the long poll adds its wait).
	DefaultWriteTimeout = 30 * time.Second
	// DefaultClientLimit is the default number of requests one client
	// address may have in flight on an unauthenticated endpoint with a
	// body (the git webhook): a git server sends one hook per push.
	DefaultClientLimit = 8
)

// Limits of agent bodies: larger lists and longer strings are refused with
// 400 invalid_report or invalid_result. They are far above what an agent
// sends (a node holds a handful of block instances; the agent keeps at most
// 1024 journal entries and an 8 KiB output tail) and keep one report's cost
// to the hub bounded.
const (
	// MaxReportInstances caps the instances of a report.
	MaxReportInstances = 1024
	// MaxReportAttempts caps the journalled attempt ids of a report.
	MaxReportAttempts = 4096
	// MaxReportCapabilities caps the capabilities of a report.
	MaxReportCapabilities = 256
	// MaxReportDataAddresses caps the data addresses of a report.
	MaxReportDataAddresses = 256
	// MaxFieldLen caps identifiers, names, versions, hashes and addresses,
	// in bytes.
	MaxFieldLen = 256
	// MaxOutputLen caps the output tail of a result, in bytes.
	MaxOutputLen = 64 << 10
)

// Option configures New.
type Option func(*server)

// WithLogger sets the logger (default: a disabled logger).
func WithLogger(l zerolog.Logger) Option { return func(s *server) { s.log = l } }

// WithMaxPollWait caps the wait of the agents' long poll (default
// DefaultMaxPollWait). An idle agent polls again when its poll ends: a
// fleet of n agents sends about n / wait polls a second that carry
// nothing, 3,300 a second for 100,000 agents at 30 s. Values below a
// second are ignored.
func WithMaxPollWait(d time.Duration) Option {
	return func(s *server) {
		if d >= time.Second {
			s.maxPollWait = d
		}
	}
}

// WithMaxBody caps request bodies at n bytes (default 1 MiB); n <= 0 keeps
// the default.
func WithMaxBody(n int64) Option {
	return func(s *server) {
		if n > 0 {
			s.maxBody = n
		}
	}
}

// WithBodyTimeout sets the time a request body has to arrive in full
// (default DefaultBodyTimeout); d <= 0 keeps the default. A slower body is
// answered 408 body_timeout and its connection closed.
func WithBodyTimeout(d time.Duration) Option {
	return func(s *server) {
		if d > 0 {
			s.bodyTimeout = d
		}
	}
}

// WithWriteTimeout sets the time an answer has to be written (default
// DefaultWriteTimeout; the long poll adds its wait); d <= 0 keeps the
// default.
func WithWriteTimeout(d time.Duration) Option {
	return func(s *server) {
		if d > 0 {
			s.writeTimeout = d
		}
	}
}

// WithClientLimit sets how many requests one client address may have in
// flight on the unauthenticated endpoints that read a body (default
// DefaultClientLimit); n <= 0 keeps the default. Requests over the limit
// are answered 429 too_many_requests with Retry-After.
func WithClientLimit(n int) Option {
	return func(s *server) {
		if n > 0 {
			s.limiter.max = n
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
	hub          Hub
	log          zerolog.Logger
	maxBody      int64
	bodyTimeout  time.Duration
	writeTimeout time.Duration
	maxPollWait  time.Duration
	limiter      *clientLimiter
	reg          prometheus.Registerer
	gatherer     prometheus.Gatherer
	mappings     []mapping
	metrics      *metrics
	view         *readView // the last answers of repeated reads (readview.go)
	mux          *http.ServeMux
	// notReady is the failing checks /readyz last logged: a probe polling
	// a hub that stays not ready logs the cause once, not per request.
	notReady atomic.Pointer[string]
}

// New returns the HTTP handler of the API and the console. It panics only
// when WithMetrics is given a registerer that refuses the API's collectors for
// another reason than their being already registered.
func New(h Hub, opts ...Option) http.Handler {
	s := &server{hub: h, log: zerolog.Nop(), maxBody: DefaultMaxBody, bodyTimeout: DefaultBodyTimeout,
		writeTimeout: DefaultWriteTimeout, maxPollWait: DefaultMaxPollWait, limiter: &clientLimiter{max: DefaultClientLimit, inFlight: map[string]int{}}}
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
	s.view = newReadView(time.Now)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.console)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("GET /api/v1/summary", s.summary)
	mux.HandleFunc("GET /api/v1/rollouts", s.listRollouts)
	mux.HandleFunc("GET /api/v1/rollouts/{id}", s.rollout)
	mux.HandleFunc("POST /api/v1/hooks/git", s.hookGit)
	mux.HandleFunc("POST /api/v1/rollouts", s.user(RoleOperator, s.createRollout))
	mux.HandleFunc("POST /api/v1/rollouts/{id}/{action}", s.user(RoleOperator, s.rolloutState))
	mux.HandleFunc("GET /api/v1/whoami", s.user(RoleViewer, s.whoami))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/register", s.agent(s.register))
	mux.HandleFunc("GET /api/v1/agent/nodes/{node}/attempts", s.agent(s.poll))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/attempts/{attempt}/result", s.agent(s.result))
	mux.HandleFunc("POST /api/v1/agent/nodes/{node}/report", s.agent(s.report))
	mux.HandleFunc("GET /api/v1/agent/nodes/{node}/artifacts/{version}", s.agent(s.artifact))
	s.approvalRoutes(mux)
	s.nodeRoutes(mux)
	s.detectRoutes(mux)
	mux.HandleFunc("/api/", s.notFound)
	// every read goes through the read check first
	s.mux = http.NewServeMux()
	s.mux.Handle("/", s.readAuth(mux))
	return s
}

// readAuth requires at least a viewer token of every read of the API (GET
// and HEAD under /api/, but the agents' endpoints, which have their
// per-node tokens) when the hub has identities (Hub.IdentitiesConfigured);
// without identities reads stay open. The console page, /healthz, /readyz
// and /metrics stay open: the console asks for a token in the browser. An
// unknown path under /api/ is answered 401 before 404.
func (s *server) readAuth(mux *http.ServeMux) http.Handler {
	viewer := s.user(RoleViewer, func(w http.ResponseWriter, r *http.Request, _ Identity) { mux.ServeHTTP(w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if read && strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasPrefix(r.URL.Path, "/api/v1/agent/") && s.hub.IdentitiesConfigured() {
			if _, pattern := mux.Handler(r); pattern != "" {
				r.Pattern = pattern // the route of a refused read, for the metrics
			}
			viewer(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ServeHTTP sets the request's deadlines, instruments it and turns panics
// into 500 answers. Held polls wait under this frame (see the engine's
// PollWith), so what comes before and after is in functions of their own.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := s.begin(w, r)
	defer s.end(rw, r)
	s.mux.ServeHTTP(rw, r)
}

// begin wraps w to record the answer and sets the request's deadlines.
func (s *server) begin(w http.ResponseWriter, r *http.Request) *statusWriter {
	rw := &statusWriter{ResponseWriter: w, start: time.Now(), hasBody: r.Body != nil && r.Body != http.NoBody, http1: r.ProtoMajor == 1}
	// Deadlines are set per request, not as the server's WriteTimeout,
	// which would cut the agents' long polls: the poll extends its own. A
	// writer without deadlines (a test recorder) is served without them.
	rc := http.NewResponseController(rw)
	_ = rc.SetWriteDeadline(rw.start.Add(s.writeTimeout))
	if rw.hasBody {
		// The body must arrive in time whether a handler reads it or the
		// server drains it after an early answer: a client dribbling a
		// byte a second holds a connection no longer than this.
		_ = rc.SetReadDeadline(rw.start.Add(s.bodyTimeout))
	}
	return rw
}

// end, deferred, turns a panic into a 500 answer and counts the request.
func (s *server) end(rw *statusWriter, r *http.Request) {
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
	s.metrics.duration.WithLabelValues(route).Observe(time.Since(rw.start).Seconds())
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// readyAnswer is the body of GET /readyz; a hub that is not ready also
// carries the usual error object.
type readyAnswer struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
	Error  *errorFields      `json:"error,omitempty"`
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	rd := s.hub.Readiness(r.Context())
	a := readyAnswer{Ready: len(rd.Failing) == 0, Checks: rd.Checks}
	if a.Checks == nil {
		a.Checks = map[string]string{}
	}
	w.Header().Set("Cache-Control", "no-store")
	if a.Ready {
		s.notReady.Store(nil)
		writeJSON(w, http.StatusOK, a)
		return
	}
	causes := make([]string, 0, len(rd.Failing))
	for _, name := range rd.Failing {
		cause := strings.TrimPrefix(a.Checks[name], "error: ")
		if cause == "" {
			cause = "failing"
		}
		causes = append(causes, name+": "+cause)
	}
	ev := s.log.Debug() // the same causes again
	key := strings.Join(causes, "\n")
	if prev := s.notReady.Swap(&key); prev == nil || *prev != key {
		ev = s.log.Warn()
	}
	ev.Strs("failing", rd.Failing).Msg("hub not ready")
	a.Error = &errorFields{Code: "not_ready", Message: "hub not ready: " + strings.Join(causes, "; "),
		Details: map[string][]string{"failing": rd.Failing}}
	writeJSON(w, http.StatusServiceUnavailable, a)
}

func (s *server) summary(w http.ResponseWriter, r *http.Request) {
	sum, err := viewed(s, w, r, "summary", s.hub.Summary)
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
	sum, err := viewed(s, w, r, "summary", s.hub.Summary)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if sum.Rollouts == nil {
		sum.Rollouts = []fleetwave.Rollout{}
	}
	writeJSON(w, http.StatusOK, sum.Rollouts)
}

// RolloutAnswer is the body of GET /api/v1/rollouts/{id} and of the
// rollout actions: the rollout, with the counters of all its items, and
// one page of its items.
type RolloutAnswer struct {
	Rollout fleetwave.Rollout `json:"rollout"`
	Items   []fleetwave.Item  `json:"items"`
	// Next is the cursor of the next page of items, "" on the last one.
	Next string `json:"next"`
}

// DefaultItemPageLimit is the page of items of GET /api/v1/rollouts/{id}
// without a limit (capped at MaxPageLimit, as every list): the console's
// rollout page shows it and reads it every second; a client that wants
// every item follows the cursors.
const DefaultItemPageLimit = 500

// rollout answers GET /api/v1/rollouts/{id}?limit=N&cursor=C.
func (s *server) rollout(w http.ResponseWriter, r *http.Request) {
	limit, after, perr := page(r)
	if perr != nil {
		writeJSONError(w, perr)
		return
	}
	if r.URL.Query().Get("limit") == "" {
		limit = DefaultItemPageLimit
	}
	s.writeRollout(w, r, after, limit)
}

// writeRollout answers the rollout named in the path with the page of its
// items after item after.
func (s *server) writeRollout(w http.ResponseWriter, r *http.Request, after string, limit int) {
	id := r.PathValue("id")
	type page struct {
		ro    fleetwave.Rollout
		items []fleetwave.Item
		more  bool
	}
	key := "rollout\x00" + id + "\x00" + after + "\x00" + strconv.Itoa(limit)
	p, err := viewed(s, w, r, key, func(ctx context.Context) (page, error) {
		ro, items, more, err := s.hub.RolloutPage(ctx, id, after, limit)
		return page{ro, items, more}, err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ro, items, more := p.ro, p.items, p.more
	if len(items) > limit {
		items, more = items[:limit], true
	}
	a := RolloutAnswer{Rollout: ro, Items: items}
	if a.Items == nil {
		a.Items = []fleetwave.Item{}
	}
	if more && len(items) > 0 {
		a.Next = cursorOf(items[len(items)-1].ID)
	}
	writeJSON(w, http.StatusOK, a)
}

// hookGit takes a git webhook. Its body is the git server's own payload:
// it is capped, read within the body timeout and verified, never decoded.
// The endpoint needs no token, so each client address gets a bounded
// number of requests in flight.
func (s *server) hookGit(w http.ResponseWriter, r *http.Request) {
	release, ok := s.limiter.acquire(clientKey(r.RemoteAddr))
	if !ok {
		s.tooMany(w, r)
		return
	}
	defer release()
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
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

// tooMany answers 429: a slot frees at the latest when the body timeout
// ends a request in flight, hence the Retry-After.
func (s *server) tooMany(w http.ResponseWriter, r *http.Request) {
	retry := max(1, int(math.Ceil(s.bodyTimeout.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	// Debug, not Warn: a flood would otherwise turn into a flood of logs;
	// the requests metric counts the 429 answers.
	s.log.Debug().Str("remote", r.RemoteAddr).Int("limit", s.limiter.max).Msg("client over its in-flight limit")
	writeJSONError(w, &Error{Status: http.StatusTooManyRequests, Code: "too_many_requests",
		Message: "too many requests in flight from this client; retry later", Details: map[string]int{"limit": s.limiter.max}})
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
		// a held poll waits under this frame: kept small (see ServeHTTP)
		if node, ok := s.agentNode(w, r); ok {
			next(w, r, node)
		}
	}
}

// agentNode is the node whose token the request bears, when it is the
// node its path names; otherwise it answers 401 or 403 (ok false).
func (s *server) agentNode(w http.ResponseWriter, r *http.Request) (string, bool) {
	token, ok := bearer(r)
	if !ok {
		unauthorized(w, false)
		return "", false
	}
	node, ok := s.hub.AuthenticateAgent(token)
	if !ok {
		s.log.Warn().Str("node", r.PathValue("node")).Str("remote", r.RemoteAddr).Msg("agent token refused")
		unauthorized(w, true)
		return "", false
	}
	if node != r.PathValue("node") {
		s.log.Warn().Str("node", node).Str("path_node", r.PathValue("node")).Msg("agent addressed another node")
		writeJSONError(w, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "token does not belong to this node"})
		return "", false
	}
	return node, true
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
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The action takes no parameters: no body, or an empty JSON object.
	if len(bytes.Trim(body, jsonSpace)) > 0 {
		var none struct{}
		if err := decodeJSON(body, &none); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if err := s.hub.SetRolloutState(r.Context(), r.PathValue("id"), action, id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info().Str("rollout", r.PathValue("id")).Str("action", action).Str("actor", id.Name).Msg("rollout state changed")
	s.writeRollout(w, r, "", DefaultItemPageLimit)
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
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var rep fleetwave.Report
	if err := decodeJSON(body, &rep); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkReport(&rep, node); err != nil {
		s.log.Warn().Str("node", node).Str("error", err.Message).Msg("report refused")
		s.fail(w, r, err)
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
	// Report asks the agent for a full report now: the hub holds no
	// observation of its node (e.g. Redis lost its data).
	Report bool `json:"report,omitempty"`
}

// AppendJSON appends the answer's JSON (encoding/json's bytes) to b, each
// attempt by its own codec: a poll's answer is encoded once per hand-out.
func (a AttemptsAnswer) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"attempts":`...)
	if a.Attempts == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, at := range a.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = at.AppendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if a.Report {
		b = append(b, `,"report":true`...)
	}
	return append(b, '}'), nil
}

func (s *server) poll(w http.ResponseWriter, r *http.Request, node string) {
	// A held poll waits under this frame, so what comes before and after
	// the wait is in functions of their own (see engine.PollWith).
	wait, rc, ok := s.pollQuery(w, r, node)
	if !ok {
		return
	}
	atts, err := s.hub.PollAttempts(r.Context(), node, wait, rc)
	s.answerPoll(w, r, node, wait, atts, err)
}

// pollQuery reads a poll's query and sets its write deadline; ok false
// when it has answered already (a bad query, or a report wanted first).
func (s *server) pollQuery(w http.ResponseWriter, r *http.Request, node string) (wait time.Duration, rc fleetwave.Receipt, ok bool) {
	wait, err := parseWait(r.URL.Query().Get("wait"), s.maxPollWait)
	if err != nil {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: err.Error()})
		return 0, rc, false
	}
	rc, err = parseReceipt(r.URL.Query())
	if err != nil {
		writeJSONError(w, &Error{Status: http.StatusBadRequest, Code: "invalid_query", Message: err.Error()})
		return 0, rc, false
	}
	// The poll may last wait, then its answer has the usual write time.
	// (Reading needs no extension: a request without a body is read in
	// full, and the server lifts the read deadline while it watches the
	// connection for the client hanging up.)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.writeTimeout))
	if s.hub.WantsReport(node) {
		// answered at once: the report comes before the next poll
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, AttemptsAnswer{Attempts: []fleetwave.Attempt{}, Report: true})
		return 0, rc, false
	}
	return wait, rc, true
}

// answerPoll answers a poll with what the hub handed out, or its error.
func (s *server) answerPoll(w http.ResponseWriter, r *http.Request, node string, wait time.Duration, atts []fleetwave.Attempt, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(atts) == 0 && wait > 0 && r.Context().Err() == nil && s.hub.WantsReport(node) {
		// the hub came to want the node's report while the poll waited
		// (it wakes such polls): asked now, not at the next poll
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, AttemptsAnswer{Attempts: []fleetwave.Attempt{}, Report: true})
		return
	}
	if atts == nil {
		atts = []fleetwave.Attempt{}
	}
	if len(atts) > 0 && r.Context().Err() != nil {
		// the client hung up while the attempts were taken for it: an
		// answer could not reach it, and the hub need not wait out their
		// deadlines to know
		s.hub.NotHanded(r.Context(), node, atts, false)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, AttemptsAnswer{Attempts: atts})
	if len(atts) > 0 {
		if err := http.NewResponseController(w).Flush(); err != nil {
			s.hub.NotHanded(r.Context(), node, atts, true)
		}
	}
}

// parseReceipt reads what a polling agent says it received: delivered, the
// highest delivery number it journalled (a whole number, 0 when absent),
// and resume (true or false, false when absent), that its previous poll
// failed.
func parseReceipt(q url.Values) (fleetwave.Receipt, error) {
	var rc fleetwave.Receipt
	if v := q.Get("delivered"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return rc, fmt.Errorf("delivered %s is not a whole number", quote(v))
		}
		rc.Delivered = n
	}
	if v := q.Get("resume"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return rc, fmt.Errorf("resume %s is neither true nor false", quote(v))
		}
		rc.Resume = b
	}
	return rc, nil
}

// parseWait reads a Go duration ("10s") or whole seconds ("10"), clamped to
// [0, most].
func parseWait(v string, most time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("wait %s is neither a duration nor seconds", quote(v))
		}
		d = time.Duration(min(max(n, -1), int(most/time.Second))) * time.Second
	}
	if d < 0 {
		return 0, fmt.Errorf("wait %s is negative", quote(v))
	}
	return min(d, most), nil
}

// result takes an attempt's result. Ownership comes first: a refusal of
// the body's content is answered only once the attempt is known to be the
// node's own, so another node's attempt is always 403 forbidden, whatever
// the body. A valid result goes to the hub, which checks ownership before
// anything else. Only transport refusals (413, 408) come earlier: they say
// nothing about the content or the attempt.
func (s *server) result(w http.ResponseWriter, r *http.Request, node string) {
	attempt := r.PathValue("attempt")
	if textProblem(attempt, MaxFieldLen, true) != "" {
		// no attempt can have such an id (attempt_id is held to the same rule)
		writeJSONError(w, &Error{Status: http.StatusNotFound, Code: "unknown_attempt", Message: "no such attempt"})
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var res fleetwave.AttemptResult
	refusal := decodeJSON(body, &res)
	if refusal == nil {
		refusal = checkResult(&res)
	}
	if refusal == nil && res.AttemptID != attempt {
		refusal = &Error{Status: http.StatusBadRequest, Code: "attempt_mismatch",
			Message: "attempt_id in the body differs from the attempt in the path", Details: map[string]string{"field": "attempt_id"}}
	}
	if refusal != nil {
		owner, err := s.hub.AttemptNode(r.Context(), attempt)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if owner != node {
			s.log.Warn().Str("node", node).Str("attempt", attempt).Msg("result for an attempt of another node")
			writeJSONError(w, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "attempt belongs to another node"})
			return
		}
		s.log.Warn().Str("node", node).Str("attempt", attempt).Str("code", refusal.Code).Str("error", refusal.Message).Msg("result refused")
		writeJSONError(w, refusal)
		return
	}
	if err := s.hub.CompleteAttempt(r.Context(), node, res); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readBody reads the whole body, capped at the maximum size and within the
// body deadline ServeHTTP set (once the body is read, the server lifts it).
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("body exceeds %d bytes", tooLarge.Limit)}
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
			s.log.Warn().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Int64("timeout_ms", s.bodyTimeout.Milliseconds()).Msg("request body too slow")
			return nil, &Error{Status: http.StatusRequestTimeout, Code: "body_timeout",
				Message: fmt.Sprintf("request body not received within %s", s.bodyTimeout)}
		}
		// the client hung up, or sent a broken chunked encoding
		return nil, &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "request body could not be read"}
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.bodyRead = true
	}
	return b, nil
}

// jsonSpace is the white space JSON allows between tokens.
const jsonSpace = " \t\r\n"

// decodeJSON decodes b, a whole body, into v: one JSON object, no unknown
// field, nothing after it.
func decodeJSON(b []byte, v any) *Error {
	trimmed := bytes.TrimLeft(b, jsonSpace)
	if len(trimmed) == 0 {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "empty body"}
	}
	if trimmed[0] != '{' {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "body is not a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body",
			Message: fmt.Sprintf("body holds more after the JSON object (byte %d)", end)}
	}
	return nil
}

// jsonError turns a decoding error into an invalid_body answer naming the
// field or byte offset. It quotes at most a short prefix of a value, and
// only of the client's own body.
func jsonError(err error) *Error {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	var tim *time.ParseError
	switch {
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return fieldError("invalid_body", field, fmt.Sprintf("want %s, got %s", jsonKind(typ.Type), truncate(typ.Value)))
	case errors.As(err, &syn):
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body",
			Message: fmt.Sprintf("invalid JSON at byte %d: %s", syn.Offset, truncate(syn.Error()))}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "body ends inside the JSON object"}
	case errors.As(err, &tim), strings.HasPrefix(err.Error(), "Time.UnmarshalJSON"):
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: "invalid time: want RFC 3339, e.g. 2026-01-01T00:00:00Z"}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(f); uerr == nil {
			return fieldError("invalid_body", name, "unknown field")
		}
	}
	return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Message: truncate(strings.TrimPrefix(err.Error(), "json: "))}
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Time]() {
		return "an RFC 3339 time string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer of %d bits", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a non-negative integer of %d bits", t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

// blockName is the DNS-label-like name of a block (the config repository's
// #Name), so an instance name is always one the hub could have sent.
var blockName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// checkReport refuses a report with a field out of its domain or limits
// (400 invalid_report naming the field). node is the path's (and token's)
// node.
func checkReport(rep *fleetwave.Report, node string) *Error {
	const code = "invalid_report"
	if rep.Node != "" && rep.Node != node {
		return fieldError(code, "node", fmt.Sprintf("names node %s, not the node of the path %s", quote(rep.Node), quote(node)))
	}
	if err := checkText(code, "agent_version", rep.AgentVersion, MaxFieldLen, false); err != nil {
		return err
	}
	if len(rep.Capabilities) > MaxReportCapabilities {
		return fieldError(code, "capabilities", fmt.Sprintf("holds %d entries; at most %d", len(rep.Capabilities), MaxReportCapabilities))
	}
	for i, c := range rep.Capabilities {
		if err := checkText(code, fmt.Sprintf("capabilities[%d]", i), c, MaxFieldLen, true); err != nil {
			return err
		}
	}
	if len(rep.DataAddresses) > MaxReportDataAddresses {
		return fieldError(code, "data_addresses", fmt.Sprintf("holds %d entries; at most %d", len(rep.DataAddresses), MaxReportDataAddresses))
	}
	for _, k := range slices.Sorted(maps.Keys(rep.DataAddresses)) {
		if problem := textProblem(k, MaxFieldLen, true); problem != "" {
			return fieldError(code, "data_addresses", "a name "+problem)
		}
		if err := checkText(code, "data_addresses["+quote(k)+"]", rep.DataAddresses[k], MaxFieldLen, false); err != nil {
			return err
		}
	}
	if len(rep.Instances) > MaxReportInstances {
		return fieldError(code, "instances", fmt.Sprintf("holds %d entries; at most %d", len(rep.Instances), MaxReportInstances))
	}
	seen := make(map[string]int, len(rep.Instances))
	for i := range rep.Instances {
		field := fmt.Sprintf("instances[%d]", i)
		if err := checkInstance(code, field, &rep.Instances[i]); err != nil {
			return err
		}
		b := rep.Instances[i].Block
		if j, dup := seen[b]; dup {
			return fieldError(code, field+".block", fmt.Sprintf("block %s is reported twice (also instances[%d])", quote(b), j))
		}
		seen[b] = i
	}
	if len(rep.Attempts) > MaxReportAttempts {
		return fieldError(code, "attempts", fmt.Sprintf("holds %d entries; at most %d", len(rep.Attempts), MaxReportAttempts))
	}
	for i, a := range rep.Attempts {
		if err := checkText(code, fmt.Sprintf("attempts[%d]", i), a, MaxFieldLen, true); err != nil {
			return err
		}
	}
	return nil
}

// checkResult refuses a result with a field out of its domain or limits
// (400 invalid_result naming the field). lost passes: the agent sends it
// for an attempt it was running when it stopped, and the hub decides.
func checkResult(res *fleetwave.AttemptResult) *Error {
	const code = "invalid_result"
	if err := checkText(code, "attempt_id", res.AttemptID, MaxFieldLen, true); err != nil {
		return err
	}
	if res.Fence < 0 {
		return fieldError(code, "fence", fmt.Sprintf("is %d; a fencing token is never negative", res.Fence))
	}
	switch res.Class {
	case fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent, fleetwave.ResultLost:
	case "":
		return fieldError(code, "class", "is required; want success, transient, permanent or lost")
	default:
		return fieldError(code, "class", fmt.Sprintf("is %s; want success, transient, permanent or lost", quote(string(res.Class))))
	}
	if len(res.Output) > MaxOutputLen {
		return fieldError(code, "output", fmt.Sprintf("is %d bytes; at most %d", len(res.Output), MaxOutputLen))
	}
	if res.Reason != "" && (res.Class != fleetwave.ResultPermanent || !slices.Contains(fleetwave.PermanentReasons, res.Reason)) {
		return fieldError(code, "reason", fmt.Sprintf("is %s; only a permanent result names a reason, one of %s",
			quote(res.Reason), strings.Join(fleetwave.PermanentReasons, ", ")))
	}
	if res.Instance != nil {
		return checkInstance(code, "instance", res.Instance)
	}
	return nil
}

// checkInstance refuses an observed block instance with a field out of its
// domain or limits.
func checkInstance(code, field string, in *fleetwave.InstanceStatus) *Error {
	if in.Block == "" {
		return fieldError(code, field+".block", "is required")
	}
	if !blockName.MatchString(in.Block) {
		return fieldError(code, field+".block", fmt.Sprintf("%s is not a block name (1-63 lowercase letters, digits and '-', alphanumeric at both ends)", quote(in.Block)))
	}
	if in.Generation < 0 {
		return fieldError(code, field+".generation", fmt.Sprintf("is %d; generations are never negative", in.Generation))
	}
	switch in.State {
	case "", fleetwave.StateInstalled, fleetwave.StateRunning, fleetwave.StateStopped, fleetwave.StateAbsent:
	default:
		return fieldError(code, field+".state", fmt.Sprintf("is %s; want installed, running, stopped or absent", quote(string(in.State))))
	}
	for _, f := range []struct{ name, v string }{
		{"version", in.Version}, {"config_hash", in.ConfigHash}, {"managed_by", in.ManagedBy}, {"last_attempt", in.LastAttempt},
	} {
		if err := checkText(code, field+"."+f.name, f.v, MaxFieldLen, false); err != nil {
			return err
		}
	}
	return nil
}

// checkText refuses a missing (when required) or over-long string, or one
// holding a control character (identifiers end up in logs and keys).
func checkText(code, field, v string, maxLen int, required bool) *Error {
	if problem := textProblem(v, maxLen, required); problem != "" {
		return fieldError(code, field, problem)
	}
	return nil
}

// textProblem says what is wrong with v for checkText, or "".
func textProblem(v string, maxLen int, required bool) string {
	switch {
	case v == "" && required:
		return "is required"
	case len(v) > maxLen:
		return fmt.Sprintf("is %d bytes; at most %d", len(v), maxLen)
	case strings.ContainsFunc(v, unicode.IsControl):
		return "holds a control character"
	}
	return ""
}

// fieldError is a 400 answer about one field, named in the message and in
// details.field.
func fieldError(code, field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: field + ": " + msg, Details: map[string]string{"field": field}}
}

// quote quotes a client-sent value for a message, cut to a short prefix.
func quote(v string) string {
	const keep = 64
	if len(v) <= keep {
		return strconv.Quote(v)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + "..."
}

// truncate bounds a message taken from an error of the standard library.
func truncate(msg string) string {
	const keep = 200
	if len(msg) <= keep {
		return msg
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}

// clientLimiter bounds the requests each client address has in flight.
type clientLimiter struct {
	max      int
	mu       sync.Mutex
	inFlight map[string]int
}

// acquire takes a slot of client key, or reports that it has none left.
func (l *clientLimiter) acquire(key string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[key] >= l.max {
		return nil, false
	}
	l.inFlight[key]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.inFlight[key]--; l.inFlight[key] <= 0 {
			delete(l.inFlight, key)
		}
	}, true
}

// clientKey is the address a client is limited by: its IP, or its /64 for
// IPv6, as one host commonly holds a whole /64. Forwarding headers are not
// trusted (any client can set them); behind a proxy, clients share its
// address.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.WithZone("").Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
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

// writeJSON answers v as JSON with its length: an answer flushed before
// its handler returns (a poll's, to learn whether it left) then goes out
// over HTTP/1.1 in one write, its header with its body, where a chunked
// one took a second write for its last chunk.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b []byte
	var err error
	if a, ok := v.(interface{ AppendJSON([]byte) ([]byte, error) }); ok {
		b, err = a.AppendJSON(make([]byte, 0, 1024))
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		b, status = []byte(`{"error":{"code":"internal","message":"cannot encode answer"}}`), http.StatusInternalServerError
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// statusWriter records the status code for metrics, and closes the
// connection after an answer given without reading the request's body.
type statusWriter struct {
	http.ResponseWriter
	start    time.Time // the request's arrival
	status   int
	wrote    bool
	hasBody  bool // the request came with a body
	http1    bool // over HTTP/1.x, where an unread body holds the connection
	bodyRead bool // a handler read it in full
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
		if w.http1 && w.hasBody && !w.bodyRead {
			// The server would drain an unread body, before answering and
			// again after, to reuse the connection: a client dribbling it
			// would hold the connection until the body deadline. An early
			// answer (401, 429, 413, ...) goes out at once instead, and the
			// connection closes right after it. Not over HTTP/2: there the
			// server resets the stream of an unread body once its handler
			// returns, and "Connection: close" would end the connection
			// (GOAWAY) of every other request multiplexed on it; every
			// HTTP/2 request has a Body, even a GET's.
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now())
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
