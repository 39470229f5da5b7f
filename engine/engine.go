package engine

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrNotLeader: the lease is held by another owner, or was lost.
	ErrNotLeader = errors.New("not the leader")
	// ErrStaleFence: the caller's fence is not the current leader epoch; a
	// deposed leader changes nothing.
	ErrStaleFence = errors.New("stale fence")
	// ErrUnknownAttempt: no such attempt.
	ErrUnknownAttempt = errors.New("unknown attempt")
	// ErrStaleAttempt: the attempt is not its item's current one, the item
	// is no longer in progress, or the result carries another fence.
	ErrStaleAttempt = errors.New("stale attempt")
	// ErrResultRecorded is no failure: the same result (attempt, fence,
	// class and exit code) was recorded before and nothing changed. An
	// agent sends a result again when its answer was lost. (A group of
	// results the Redis client sends again, its reply late, answers as its
	// first sending did for a minute, and only after that with this.)
	ErrResultRecorded = errors.New("result recorded before")
	// ErrWrongNode: the attempt belongs to another node.
	ErrWrongNode = errors.New("attempt of another node")
	// ErrNotFound: no such rollout.
	ErrNotFound = errors.New("not found")
	// ErrInvalidResult: the result class is not success, transient or permanent.
	ErrInvalidResult = errors.New("invalid result class")
	// ErrInvalidState: the rollout cannot take that action in its state
	// (e.g. resume a completed rollout), or the action is unknown.
	ErrInvalidState = errors.New("invalid rollout state change")
	// ErrNotReplicated: Campaign's write was not acknowledged by any of
	// the primary's connected replicas in time; the fence is not used.
	ErrNotReplicated = errors.New("not acknowledged by a replica")
)

// Defaults of the options.
const (
	// DefaultPrefix is the key prefix: keys are "fw{fleetwave}:...".
	DefaultPrefix = "fleetwave"
	// DefaultDeliveryGrace is the time after the action timeout before an
	// attempt's result counts as lost.
	DefaultDeliveryGrace = 30 * time.Second
	// DefaultBackoffBase is the first retry delay (before jitter).
	DefaultBackoffBase = 10 * time.Second
	// DefaultBackoffMax caps the retry delay.
	DefaultBackoffMax = 10 * time.Minute
	// DefaultActionTimeout bounds an attempt whose payload sets no timeout.
	DefaultActionTimeout = fleetwave.DefaultActionTimeout
)

// ReasonPlacementRejected is the reason of an item blocked before dispatch
// because its node (or a node of its split group) does not advertise one of
// its requirements in its last full report. It is permanent until a newer
// generation.
const ReasonPlacementRejected = "placement_rejected"

// batchLimit bounds the deadlines and retries one Step handles, so a script
// never runs long; Step is re-entrant and the rest waits for the next call.
const batchLimit = 1000

// jitterCount is how many jitter values one Step receives.
const jitterCount = 8

type options struct {
	clock       clock.Clock
	log         zerolog.Logger
	prefix      string
	rnd         *rand.Rand
	grace       time.Duration
	backoffBase time.Duration
	backoffMax  time.Duration
	floor       func(ctx context.Context) (int64, error)
	agentCalls  int
	wanted      func(nodes []string)
}

// Option configures an Engine.
type Option func(*options)

// WithClock sets the clock every timestamp, deadline and lease expiry comes
// from (default the real clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithPrefix sets the key prefix p: every key is "fw{p}:..." so all keys
// share one Cluster hash slot. p must not contain '{' or '}'.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithRand sets the source of backoff jitter (default seeded from the clock).
func WithRand(r *rand.Rand) Option { return func(o *options) { o.rnd = r } }

// WithDeliveryGrace sets the time after the action timeout before an
// attempt's result counts as lost (default 30s).
func WithDeliveryGrace(d time.Duration) Option { return func(o *options) { o.grace = d } }

// WithBackoff sets the retry backoff: base*2^retry_count, capped at max,
// with jitter in [delay/2, delay) (defaults 10s and 10m).
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) { o.backoffBase, o.backoffMax = base, max }
}

// WithFenceFloor sets where Campaign learns the highest fence ever used
// outside Redis (e.g. the fence trailers of the status commits in Git).
// When the epoch is missing (Redis lost its data) or lower than that floor,
// Campaign raises it so the new fence is floor+1 or more: a fence never goes
// back across a Redis restart or loss. An error of floor fails Campaign.
func WithFenceFloor(floor func(ctx context.Context) (int64, error)) Option {
	return func(o *options) { o.floor = floor }
}

// WithAgentCalls bounds the calls to Redis an Engine makes at once on
// agents' behalf, one request each (a poll's look at its queue and its
// resumption, a report, attempts not handed out), to n (default: no
// bound). Those beyond wait in the Engine, not in rdb's connection pool:
// when thousands of agents connect at once (a fleet registering, a hub
// restarted), their calls took every connection of the pool for
// seconds, and the leader's own work (waves, plans, status reads, the
// API's reads) waited behind them, each of its calls about a second.
// With n below the pool's size, the rest of the pool is left to that
// work. The results' group commit and the delivery mux are not bounded:
// each is one call for many agents.
func WithAgentCalls(n int) Option { return func(o *options) { o.agentCalls = n } }

// WithReportWanted calls wanted with the nodes whose full report an item
// now awaits (its attempt's result lost, or a success its report did not
// show), as any leader's Step announces them to every Engine on the same
// Redis while Polls wait on it; the Engine then ends those nodes' waiting
// Polls (Wake). The leader's own Step also returns them (AwaitingReport).
// An Engine that missed the announcement (no Poll waited on it, or its
// subscription was down) calls wanted with a node when a Poll of it looks
// at its queue and finds such an item (see look).
func WithReportWanted(wanted func(nodes []string)) Option {
	return func(o *options) { o.wanted = wanted }
}

// Engine is the Redis wave scheduler. It is safe for concurrent use.
type Engine struct {
	rdb     redis.UniversalClient
	clock   clock.Clock
	log     zerolog.Logger
	grace   time.Duration
	base    time.Duration
	max     time.Duration
	keyBase string // "fw{p}:"
	keys    []string

	mu  sync.Mutex // guards rnd
	rnd *rand.Rand

	obs decodedObs // the observations last read, decoded (readObservationChunk)
	// omu serialises Observe, which brings obs up to date: obsAt is where
	// the last full or incremental read left it.
	omu   sync.Mutex
	obsAt obsMark

	kept    keptRollouts // the items of open rollouts as last read (Rollout)
	warming warming      // the rollouts being created whose items are read as they come (warm)

	// afterChunk, set by tests, runs after each chunk of a chunked
	// creation with how many of the spec's items were sent so far
	afterChunk func(sent int)

	floor func(ctx context.Context) (int64, error)
	lmu   sync.Mutex // guards runID, maxFence
	// runID is the Redis run_id seen at the last Campaign or Renew ("" =
	// unknown); maxFence the highest fence this Engine held. Both let
	// Campaign detect a Redis restart and never hand out an older fence.
	runID    string
	maxFence int64

	wmu   sync.Mutex            // guards wsets
	wsets map[string]*windowSet // parsed window sets by id

	scripts map[string]*redis.Script

	cq  completions // results waiting to be committed together (Complete)
	mux mux         // Polls waiting for their queue (deliver.go)
	// tokenID and tokens make the token of each pop, creation and group
	// of results (token)
	tokenID string
	tokens  atomic.Uint64
	// wanted hears the nodes whose report an item awaits (WithReportWanted)
	wanted func(nodes []string)

	// agentSlots holds a token per call to Redis made on an agent's
	// behalf (WithAgentCalls); nil: no bound.
	agentSlots chan struct{}
	// agentWaits counts the calls that waited for a slot, agentWaited
	// their waits (ns)
	agentWaits, agentWaited atomic.Int64
}

//go:embed lua/*.lua
var luaFS embed.FS

// scriptNames are the scripts of lua/ (each prefixed with lua/lib.lua but
// bareScripts).
var scriptNames = []string{
	"campaign", "renew", "resign", "create_rollout", "step", "complete", "report", "set_state",
	"ack_outbox", "undeliver", "set_drain", "release", "record", "approval", "pop", "status_tip",
}

// bareScripts go without lib.lua: they run for every poll that finds work.
var bareScripts = map[string]bool{"pop": true}

// leaseScripts keep their caller's now: a lease's expiry is its holder's
// clock plus its TTL, as the hub that renews it counts. The other scripts
// of lib.lua take the engine's time in Redis (advance_clock in lib.lua).
var leaseScripts = map[string]bool{"campaign": true, "renew": true, "resign": true}

// waveScripts are the scripts that start waves: lua/wave.lua follows
// lua/lib.lua in them. The others go without it, since a script defines
// its functions anew on every call.
var waveScripts = map[string]bool{"step": true, "complete": true}

// scriptSource returns script name with its prefix: the Lua tables of the
// argument records it receives (args.go), lib.lua (not for bareScripts),
// and wave.lua for waveScripts.
func scriptSource(name string) string {
	parts := []string{"lib"}
	if bareScripts[name] {
		parts = nil
	}
	if waveScripts[name] {
		parts = append(parts, "wave")
	}
	var b strings.Builder
	b.WriteString(recordsPrelude(name))
	for _, p := range append(parts, name) {
		if p == name && !bareScripts[name] && !leaseScripts[name] {
			b.WriteString("advance_clock()\n")
		}
		src, err := luaFS.ReadFile("lua/" + p + ".lua")
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		b.Write(src)
		b.WriteString("\n")
	}
	return b.String()
}

// New returns an engine on rdb. Call Load before the first use.
func New(rdb redis.UniversalClient, opts ...Option) *Engine {
	o := options{
		log:         zerolog.Nop(),
		prefix:      DefaultPrefix,
		grace:       DefaultDeliveryGrace,
		backoffBase: DefaultBackoffBase,
		backoffMax:  DefaultBackoffMax,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.clock = clock.Or(o.clock)
	if o.rnd == nil {
		o.rnd = rand.New(rand.NewSource(o.clock.Now().UnixNano()))
	}
	if o.backoffMax < o.backoffBase {
		o.backoffMax = o.backoffBase
	}
	kb := "fw{" + o.prefix + "}:"
	e := &Engine{
		rdb:     rdb,
		clock:   o.clock,
		log:     o.log.With().Str("component", "engine").Logger(),
		grace:   o.grace,
		base:    o.backoffBase,
		max:     o.backoffMax,
		keyBase: kb,
		keys:    []string{kb + "epoch", kb + "lease", kb + "version", kb + "counters"},
		rnd:     o.rnd,
		floor:   o.floor,
		scripts: map[string]*redis.Script{},
		mux:     mux{handlers: make(chan struct{}, muxHandlers)},
		wsets:   map[string]*windowSet{},
		tokenID: strconv.FormatUint(randv2.Uint64(), 36),
		wanted:  o.wanted,
	}
	if o.agentCalls > 0 {
		e.agentSlots = make(chan struct{}, o.agentCalls)
	}
	for _, name := range scriptNames {
		e.scripts[name] = redis.NewScript(scriptSource(name))
	}
	return e
}

// Load loads every script into Redis (SCRIPT LOAD), so that later EVALSHA
// calls, pipelined or not, find them. Call it at start and after a failover.
func (e *Engine) Load(ctx context.Context) error {
	for _, name := range scriptNames {
		if err := e.scripts[name].Load(ctx, e.rdb).Err(); err != nil {
			return fmt.Errorf("load script %s: %w", name, err)
		}
	}
	return nil
}

func (e *Engine) key(parts ...string) string {
	k := e.keyBase
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}

func (e *Engine) nowMS() int64 { return e.clock.Now().UnixMilli() }

func (e *Engine) jitter() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rnd.Float64()
}

// run evaluates script name with the common ARGV head (prefix, fence, now)
// and returns its reply: a list whose first element is a status word.
func (e *Engine) run(ctx context.Context, name string, fence string, now int64, args ...any) (string, []any, error) {
	return e.runOn(ctx, e.rdb, name, fence, now, args...)
}

// runOn is run on c: the engine's client, or one connection of it (see
// Campaign).
func (e *Engine) runOn(ctx context.Context, c redis.Scripter, name string, fence string, now int64, args ...any) (string, []any, error) {
	argv := append([]any{e.keyBase, fence, now}, args...)
	v, err := e.scripts[name].Run(ctx, c, e.keys, argv...).Result()
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		return "", nil, fmt.Errorf("script %s: %w", name, err)
	}
	return scriptReply(name, v)
}

// scriptReply splits a script's reply: a list whose first element is a
// status word.
func scriptReply(name string, v any) (string, []any, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return "", nil, fmt.Errorf("script %s: unexpected reply %T", name, v)
	}
	status, _ := list[0].(string)
	return status, list[1:], nil
}

// fenceArg formats a fence for the scripts.
func fenceArg(f int64) string { return strconv.FormatInt(f, 10) }

// anys is ss as command arguments.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// asString converts a script reply element to a string.
func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// asInt converts a script reply element to an int64 (0 when not a number).
func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// msTime converts unix ms to a UTC time; 0 is the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
