package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/credstore"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
	"github.com/fleetwave/fleetwave/status"
)

// Hub follows the config repository and drives the fleet.
type Hub struct {
	cfg   Config
	log   zerolog.Logger
	clock clock.Clock
	// owner is this process's name in the leader lease: the hub id and an
	// instance of its own (engine.NewOwner), so a restarted hub never holds
	// its previous process's lease or fence.
	owner string

	redis     *redisBackend
	creds     *credstore.Store
	sealer    *sealer // seals credentials into rendered configs (nil without creds)
	eng       *engine.Engine
	repo      *gitsync.Repo
	validator *schema.Validator
	// sequence loads the commits the sync follows, each from the last
	sequence      *schema.Sequence
	tokens        map[string]string       // hex sha256(token) -> node
	users         map[string]api.Identity // hex sha256(token) -> API caller
	webhookSecret []byte
	listener      net.Listener
	server        *http.Server

	metrics *metrics
	syncNow chan struct{}
	// syncAsked is when a sync was first asked for (askSync) and not yet
	// started, in Unix nanoseconds; 0 when none waits.
	syncAsked    atomic.Int64
	reconcileNow chan struct{}
	// reconcileSoon and statusSoon are kicked by reports and results:
	// paced (pacing.go), not at once.
	reconcileSoon chan struct{}
	statusNow     chan struct{}
	statusSoon    chan struct{}
	// stepNow runs an engine step at once (a rollout was created).
	stepNow chan struct{}
	// pushNow plans the BRCs a new snapshot changed (pushStep); pushAsked
	// is when the sync asked for it (Unix nanoseconds, 0 once started).
	pushNow   chan struct{}
	pushAsked atomic.Int64
	// pushSlots bounds the push plans running beside the push loop
	// (pushPlans), pushing counts them (Run waits for them).
	pushSlots chan struct{}
	pushing   sync.WaitGroup
	// planning is held shared by each push plan while it reads and plans;
	// a reconcile takes it whole before it starts (planPush).
	planning sync.RWMutex
	// beforeCreate, if set, runs before a rollout is handed to the engine
	// (tests use it to hold one creation while others run).
	beforeCreate func(fleetwave.RolloutSpec)
	// duringPushPlan, if set, runs in a push plan before it reads the
	// observations (tests hold a plan there).
	duringPushPlan func()

	mu       sync.Mutex
	fence    int64
	snapshot *fleetwave.Snapshot
	pushed   *fleetwave.Snapshot // the snapshot pushStep last looked at
	sent     sentItems           // items created moments ago (its own lock)
	actorOf  commitAuthor        // the last commit commitActor read (mu)
	sync     fleetwave.SyncState
	syncGen  int64 // bumped when sync changes, so status is rewritten
	// waitsMark fingerprints what status says waits and why outside the
	// engine (gated BRCs, quiescence, approvals waiting for reports,
	// requests waiting): status is rewritten when it changes.
	waitsMark string
	lastSeen  string      // newest commit looked at (applied or rejected)
	led       ledSnapshot // the snapshot and fence lead last ran for
	// followAsked asks this hub, a follower, to catch up with the status
	// branch at its next sync (the leader missed a renewal); catchingUp is
	// set while that fetch runs, beside the sync loop (catchUp).
	followAsked atomic.Bool
	catchingUp  atomic.Bool
	// floorSeen is the highest fence floor read from Git; floorReading is
	// set while a read waits for the mirror (fenceFloor).
	floorSeen    atomic.Int64
	floorReading atomic.Bool
	statusMark   string // engine version + sync generation last written
	// rolloutsWritten holds the finished rollouts whose final document
	// status/rollouts/<id>.yaml a landed status commit already holds: later
	// status writes leave that file as it is (reading no item) unless the
	// outbox names the rollout again (statusStep's goroutine only).
	rolloutsWritten map[string]bool
	holds           []reconciler.Problem
	problems        []reconciler.Problem
	nextFire        map[string]time.Time
	// seen is when this hub first saw each trigger's newest generation;
	// quiet the triggers whose new generation waits for its
	// quiescence_seconds, until when (reconcileStep).
	seen  map[fleetwave.ObjectKey]genSeen
	quiet map[string]time.Time
	// gitRequests are the manual requests the status committed to Git
	// records as handled, read once per leadership (gitFence): after a
	// total loss of Redis they are what says a request already ran.
	gitRequests map[string]fleetwave.RequestStatus
	// records are what the status in Git records, followed from one
	// status commit to the next by the leader (records.go).
	records statusRecords
	// lostDocs are the closed documents of the rollouts Git says were
	// unfinished but Redis no longer has (closeLostRollouts), by rollout
	// id, until a status commit holds them.
	lostDocs map[string]map[string][]byte
	gitFence int64
	// heldAt says, for one fence, whether Redis held the status commit the
	// remote's status branch pointed to when that leadership began
	// (redisHoldsStatus); recordsLoading is the fence whose records are
	// read in the background (0: none), recordsLoads those reads and the
	// catch-ups' fetches (Run waits for them).
	heldAt         statusHeld
	recordsLoading atomic.Int64
	recordsLoads   sync.WaitGroup
	// beforeRecords, if set, runs as a read of the records begins (tests
	// use it to hold one while the hub plans); beforeCatchUp as a
	// catch-up's fetch begins (tests hold one while the hub syncs).
	beforeRecords func()
	beforeCatchUp func()
	// rendered remembers, per path of a status document that is
	// rewritten only when it changed (a node's document, a part of a large
	// rollout's items), the digest of its bytes and, until
	// a status commit landed it, its bytes (writeRendered; statusStep's
	// goroutine only; forgotten when the fence changes).
	rendered      map[string]*renderedDoc
	renderedFence int64
	// nodeInputs are what each node's status document was last built
	// from (statusFiles), kept and forgotten with rendered; marksVersion
	// is the version of the generation marks last rendered (0: none yet),
	// marks those marks (HighWaterChanges).
	nodeInputs   map[string]*nodeInputs
	marksVersion uint64
	marks        map[fleetwave.ObjectKey]int64
	// nodesLast is when statusFiles last built the nodes' documents and
	// nodesTook how long that took; nodesOwed says a status write since
	// left them out (nodesDue), nodesForce that the next write builds them
	// whatever (the last one, at shutdown). statusStep's goroutine only.
	nodesLast             time.Time
	nodesTook             time.Duration
	nodesOwed, nodesForce bool
	// nodesPerWrite is the most nodes' documents one status write builds
	// (0: no limit), nodesAll that the next write builds all of them
	// whatever (the last one, at shutdown).
	nodesPerWrite int
	nodesAll      bool
	// nodesYielded says the last write left the nodes' documents to the
	// next one because its rollouts' parts took its share (partsTake).
	nodesYielded bool
	// nodesLeftOut are the nodes whose documents the last write left for
	// a later one (nodesPerWrite), in the order they were first left: the
	// next write builds them first, in that order.
	nodesLeftOut []string
	// partItems are the items each part of a large rollout's items was
	// last built from (statusFiles), kept and forgotten with rendered.
	partItems map[string][]fleetwave.Item
	// itemsBuf holds a rollout's items for statusFiles, kept between
	// writes (at 100,000 items, 39 MB a write otherwise).
	itemsBuf []fleetwave.Item
	// drift is each node's drift as the last status write worked it out
	// (statusStep's goroutine only), again only for the nodes whose
	// report or snapshot changed since.
	drift reconciler.DriftCache
	// requestsWaiting are requests not handled yet, with why.
	requestsWaiting map[string]string
	// The approval gate (approvals.go): the last commit whose approvals/
	// changes were processed; the records read from Git at leadership;
	// the approved requests waiting (why); the BRCs whose config items
	// wait for an approval.
	approvalCursor string
	gitApprovals   map[string]fleetwave.Approval
	approvalWaits  map[string]string
	gated          map[string]approvalWait
	// writeFiles commits files to the tracked branch as the hub, with the
	// actor in a trailer (nil: API writes are recorded in status only).
	writeFiles func(ctx context.Context, files map[string][]byte, message, actor string) error
	crashHook  func(point string)
	// own are the commits this hub wrote for API callers; signerLog the
	// latest commits that changed BRCs, blocks or nodes with their signer.
	own       ownCommits
	signerLog []commitSigner
	// statusApplied is the commit the status in Git says was in force
	// (read at start).
	statusApplied string
	// asks decides whether a node owes a full report (WantsReport) and
	// history keeps the versions nodes reported, each under its own lock
	// (agentstate.go).
	asks    reportAsks
	history versionHistory
	// renders keeps the configs rendered for the snapshot in force from
	// one plan (and status commit's drift) to the next.
	renders reconciler.RenderCache
}

// Option configures a Hub.
type Option func(*Hub)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(h *Hub) { h.log = l } }

// WithCrashHook calls hook at named points of the multi-step operations
// (approval_decided, approval_created, approval_consumed, claim_committed,
// attempts_popped: attempts taken for a poll, not yet answered, and
// result_recorded: an agent's result recorded, not yet answered): crash
// tests end the process there to prove each step is recovered.
func WithCrashHook(hook func(point string)) Option { return func(h *Hub) { h.crashHook = hook } }

// crashPoint is a point of WithCrashHook.
func (h *Hub) crashPoint(point string) {
	if h.crashHook != nil {
		h.crashHook(point)
	}
}

// WithClock sets the clock of the hub and its engine.
func WithClock(c clock.Clock) Option { return func(h *Hub) { h.clock = c } }

// New checks the configuration, opens Redis, the repository mirror and the
// listener. Call Run to start working and Close after Run returned.
func New(ctx context.Context, cfg Config, opts ...Option) (*Hub, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{
		cfg: cfg, log: zerolog.Nop(),
		nodesPerWrite: nodesPerWrite,
		syncNow:       make(chan struct{}, 1),
		reconcileNow:  make(chan struct{}, 1),
		reconcileSoon: make(chan struct{}, 1),
		statusNow:     make(chan struct{}, 1),
		statusSoon:    make(chan struct{}, 1),
		stepNow:       make(chan struct{}, 1),
		pushNow:       make(chan struct{}, 1),
		pushSlots:     make(chan struct{}, pushPlans),
		tokens:        map[string]string{},
		sent:          sentItems{ttl: cfg.ReconcileInterval.D()},
	}
	for _, o := range opts {
		o(h)
	}
	h.clock = clock.Or(h.clock)
	base := h.log.With().Str("hub", cfg.HubID).Logger() // the hub id on every line; "component" on the leaf loggers only
	h.log = base.With().Str("component", "hub").Logger()
	h.owner = engine.NewOwner(cfg.HubID)
	for node, hash := range cfg.Agents.Tokens {
		h.tokens[hash] = node
	}
	h.users = map[string]api.Identity{}
	for _, id := range cfg.Identities {
		h.users[id.TokenSHA256] = api.Identity{Name: id.Name, Role: id.Role}
	}
	if cfg.WebhookSecretFile != "" {
		secret, err := os.ReadFile(cfg.WebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("webhook secret: %w", err)
		}
		if h.webhookSecret = bytes.TrimSpace(secret); len(h.webhookSecret) == 0 {
			return nil, fmt.Errorf("webhook secret file %s is empty", cfg.WebhookSecretFile)
		}
	}
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	var err error
	if h.validator, err = schema.New(); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	h.sequence = h.validator.Sequence()
	if h.creds, err = openCredentials(cfg); err != nil {
		return nil, err
	}
	if h.sealer, err = openSealer(cfg); err != nil {
		return nil, err
	}
	if h.redis, err = openRedis(ctx, cfg.Redis, cfg.DataDir, base); err != nil {
		return nil, err
	}
	h.writeFiles = h.commitFiles
	h.eng = engine.New(h.redis.client, engine.WithClock(h.clock), engine.WithLogger(base), engine.WithFenceFloor(h.fenceFloor),
		engine.WithAgentCalls(h.redis.agentCalls()), engine.WithReportWanted(h.asks.await))
	if err := h.eng.Load(ctx); err != nil {
		return nil, fmt.Errorf("load engine scripts: %w", err)
	}
	h.repo, err = gitsync.Open(ctx, gitsync.Source{URL: cfg.Repo.URL, Branch: cfg.Repo.Branch, Dir: filepath.Join(cfg.DataDir, "mirror")},
		gitsync.WithLogger(base), gitsync.WithClock(h.clock), gitsync.WithNormalizer(normalizer{}),
		gitsync.WithAuthor("fleetwave hub", "hub@fleetwave.invalid"), gitsync.WithStatusBranch(cfg.Repo.StatusBranch))
	if err != nil {
		return nil, fmt.Errorf("open repository: %w", err)
	}
	if err := h.restoreMarks(ctx); err != nil {
		h.log.Warn().Err(err).Msg("generation marks not restored from status")
	}
	if h.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	h.metrics = newMetrics(h)
	h.server = newServer(api.New(h, api.WithLogger(base.With().Str("component", "api").Logger()), api.WithMetrics(h.metrics.reg, h.metrics.reg),
		api.WithMaxPollWait(cfg.Agents.MaxPollWait.D())),
		defaultServerLimits, base.With().Str("component", "http").Logger())
	if len(cfg.Agents.Tokens) == 0 {
		h.log.Warn().Msg("no agent tokens configured: no agent can connect")
	}
	if w := approvalWarning(cfg); w != "" {
		h.log.Warn().Int("identities", len(cfg.Identities)).Str("why", w).Msg("releases that need approval are frozen")
	}
	ok = true
	return h, nil
}

// Addr is the address the API listens on.
func (h *Hub) Addr() string { return h.listener.Addr().String() }

// Engine exposes the engine (for tests and the demo's summary line).
func (h *Hub) Engine() *engine.Engine { return h.eng }

// ManagedRedisPID is the process id of the supervised redis-server (0 when
// Redis is not managed by this hub).
func (h *Hub) ManagedRedisPID() int {
	if h.redis.managed == nil {
		return 0
	}
	return h.redis.managed.Pid()
}

// RedisClient exposes the Redis client.
func (h *Hub) RedisClient() redis.UniversalClient { return h.redis.client }

// Close releases Redis, the mirror and the listener.
func (h *Hub) Close() {
	if h.listener != nil {
		_ = h.listener.Close()
	}
	if h.repo != nil {
		_ = h.repo.Close()
	}
	if h.redis != nil {
		h.redis.close()
	}
}

// Run serves the API and runs the loops until ctx is cancelled.
func (h *Hub) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = h.log.WithContext(ctx)
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() {
		if err := h.server.Serve(h.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
			cancel()
		}
	})
	h.log.Info().Str("addr", h.Addr()).Str("repo", h.cfg.Repo.URL).Str("branch", h.cfg.Repo.Branch).Str("redis", h.redis.mode).Msg("hub started")
	wg.Go(func() { h.leaseLoop(ctx) })
	wg.Go(func() { h.runDebug(ctx) })
	wg.Go(func() {
		if h.cfg.Repo.NoWatch {
			return
		}
		// A local remote is watched: a push is seen at once; polling stays
		// as the safety net (and is all there is for remote URLs).
		err := h.repo.Watch(ctx, h.askSync)
		if err != nil && ctx.Err() == nil {
			h.log.Info().Err(err).Int64("poll_interval_ms", h.cfg.Repo.PollInterval.D().Milliseconds()).Msg("repository not watched; polling")
		}
	})
	wg.Go(func() { h.loop(ctx, h.cfg.Repo.PollInterval.D(), h.syncNow, h.syncStep) })
	wg.Go(func() {
		h.runPaced(ctx, pacedLoop{every: h.cfg.ReconcileInterval.D(), spacing: h.reconcileSpacing,
			now: h.reconcileNow, soon: h.reconcileSoon, step: h.reconcileStep})
	})
	wg.Go(func() { h.loop(ctx, h.cfg.StepInterval.D(), h.stepNow, h.engineStep) })
	wg.Go(func() { h.loop(ctx, h.cfg.ReconcileInterval.D(), h.pushNow, h.pushStep) })
	wg.Go(func() {
		h.runPaced(ctx, pacedLoop{every: h.cfg.Status.Interval.D(), spacing: h.statusSpacing,
			now: h.statusNow, soon: h.statusSoon, step: h.statusStep})
	})
	h.kick(h.syncNow)
	<-ctx.Done()
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	_ = h.server.Shutdown(shutdownCtx)
	cancelShutdown()
	wg.Wait()
	h.pushing.Wait()
	h.recordsLoads.Wait()
	// a last status write so that what happened is in the repository,
	// the nodes' documents included
	h.nodesForce, h.nodesAll = true, true
	h.statusStep(context.Background())
	if fence := h.currentFence(); fence > 0 {
		_ = h.eng.Resign(context.Background(), h.owner, fence)
	}
	h.log.Info().Msg("hub stopped")
	select {
	case err := <-serveErr:
		return err
	default:
		return nil
	}
}

func (h *Hub) kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop runs step every interval and whenever kick is signalled; steps never
// overlap. A panic in a step is logged and the loop goes on.
func (h *Hub) loop(ctx context.Context, every time.Duration, kick <-chan struct{}, step func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		h.runStep(ctx, step)
	}
}

// runStep runs one step of a loop; a panic is logged and the loop goes on.
func (h *Hub) runStep(ctx context.Context, step func(context.Context)) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error().Interface("panic", r).Msg("loop step panicked")
		}
	}()
	step(ctx)
}

func (h *Hub) currentFence() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fence
}

func (h *Hub) setFence(f int64) {
	h.mu.Lock()
	old := h.fence
	h.fence = f
	h.mu.Unlock()
	if old != f {
		if f > 0 {
			h.metrics.leaseHeld(f)
			h.log.Info().Int64("fence", f).Msg("leader lease acquired")
			h.kick(h.syncNow)
			h.kick(h.reconcileNow)
		} else {
			h.metrics.leaseGone()
			h.log.Warn().Int64("fence", old).Msg("leader lease lost")
		}
	}
}

func (h *Hub) leaseLoop(ctx context.Context) {
	ttl := h.cfg.LeaseTTL.D()
	// The lease is campaigned for, renewed and lost under this process's
	// owner, never the bare hub id: a restart with a fixed hub id takes a
	// new, higher fence, and a paused earlier process of the same hub id
	// finds its lease gone at its next Renew.
	log := h.log.With().Str("owner", h.owner).Logger()
	for {
		next := ttl / 3
		fence := h.currentFence()
		if fence == 0 {
			f, err := h.eng.Campaign(ctx, h.owner, ttl)
			var held *engine.LeaseHeldError
			switch {
			case err == nil:
				h.setFence(f)
			case errors.As(err, &held):
				// campaign again as the lease ends, not up to ttl/3 later:
				// a dead leader is replaced within one TTL of its last renewal
				left := held.ExpiresAt.Sub(h.clock.Now())
				next = min(next, max(left+10*time.Millisecond, 10*time.Millisecond))
				if left < ttl*3/5 {
					// a leader renews every third of the TTL: this one
					// missed a renewal and may be gone. Catching up with
					// the status it committed now, while its lease runs
					// out, starts a new leader warm.
					h.followAsked.Store(true)
					h.kick(h.syncNow)
				}
				log.Debug().Str("holder", held.Holder).Time("expires_at", held.ExpiresAt).Msg("another hub holds the lease")
			case errors.Is(err, engine.ErrNotLeader):
				log.Debug().Msg("another hub holds the lease")
			case ctx.Err() == nil:
				log.Warn().Err(err).Msg("campaign")
			}
		} else if err := h.eng.Renew(ctx, h.owner, fence, ttl); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Int64("fence", fence).Msg("renew lease")
			if errors.Is(err, engine.ErrNotLeader) || errors.Is(err, engine.ErrStaleFence) {
				h.setFence(0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

func (h *Hub) engineStep(ctx context.Context) {
	fence := h.currentFence()
	if fence == 0 {
		return
	}
	defer h.metrics.dispatchTimer()()
	res, err := h.eng.Step(ctx, fence)
	if err != nil {
		if errors.Is(err, engine.ErrStaleFence) || errors.Is(err, engine.ErrNotLeader) {
			h.setFence(0)
		}
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("engine step")
		}
		return
	}
	if len(res.AwaitingReport) > 0 {
		// their agents' held polls end now and ask for the report (the
		// API asks again when a poll ends empty): a wave waits for its
		// ambiguous items, and a poll may hold for most of a minute. The
		// Step announced them to every hub, this one included, whose
		// engine ends those polls (WithReportWanted); this hub learns them
		// here too, should its announcement not come (no poll waits here,
		// or the subscription is down).
		h.asks.await(res.AwaitingReport)
	}
	if res.Completed > 0 {
		h.kick(h.reconcileSoon)
	}
}

// Snapshot returns the snapshot in force (nil before the first good commit).
func (h *Hub) Snapshot() *fleetwave.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshot
}

// SyncState returns the result of the last sync.
func (h *Hub) SyncState() fleetwave.SyncState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sync
}

// normalizer adapts schema to gitsync's Normalizer without either package
// importing the other.
type normalizer struct{}

func (normalizer) ObjectKey(p string) (fleetwave.ObjectKey, bool) { return schema.ObjectKeyForPath(p) }
func (normalizer) Normalize(p string, data []byte) ([]byte, error) {
	return schema.Normalize(p, data)
}

// restoreMarks reads the status the hub committed: the commit that was in
// force (the signed-commit check starts after it), and, when the mirror
// has no generation high-water marks (first start, or the data dir was
// lost), the marks: generations then never go down, even after a
// force-push rewrote history.
func (h *Hub) restoreMarks(ctx context.Context) error {
	if _, _, err := h.repo.Fetch(ctx); err != nil {
		return err
	}
	tip, err := h.repo.StatusTip(ctx)
	if err != nil {
		return err
	}
	data, ok, err := h.repo.StatusFile(ctx, tip, status.SummaryPath)
	if err != nil || !ok {
		return err
	}
	doc, err := status.DecodeSummary(data)
	if err != nil {
		return fmt.Errorf("%s: %w", status.SummaryPath, err)
	}
	h.mu.Lock()
	h.statusApplied = doc.Sync.Applied
	h.mu.Unlock()
	// their own document; hubs before it wrote them into the summary
	marks := doc.GenerationMarks
	data, ok, err = h.repo.StatusFile(ctx, tip, status.GenerationMarksPath)
	if err != nil {
		return err
	}
	if ok {
		m, err := status.DecodeGenerationMarks(data)
		if err != nil {
			return fmt.Errorf("%s: %w", status.GenerationMarksPath, err)
		}
		marks = m.Marks
	}
	if len(marks) == 0 || len(h.repo.HighWater()) > 0 {
		return nil // nothing to restore, or the mirror kept its own
	}
	h.log.Info().Int("objects", len(marks)).Msg("generation marks restored from status")
	return h.repo.SeedHighWater(marks)
}

// fenceFloor is the highest fencing token committed to Git (the trailer of
// the newest status commit): after a total loss of Redis the next epoch
// starts above it, so agents never see a fence go back. It is read from
// the mirror, whose lock a follower's fetch of a large status branch held
// for 37 s at 100,000 nodes while the lease it was waiting for ran out: a
// read that takes longer than floorWait is left to finish in the
// background, and the highest floor read so far is used meanwhile. The
// floor matters only when Redis lost its data; the agents' fence check
// and the status commits' (a leader whose fence is below one in Git steps
// down) hold the line too.
func (h *Hub) fenceFloor(ctx context.Context) (int64, error) {
	if h.repo == nil {
		return 0, nil
	}
	if !h.floorReading.CompareAndSwap(false, true) {
		return h.floorSeen.Load(), nil // a read is waiting for the mirror
	}
	done := make(chan struct{})
	go func() {
		defer h.floorReading.Store(false)
		defer close(done)
		v, err := h.repo.LatestTrailer(context.WithoutCancel(ctx), gitsync.TrailerFence, 500)
		if err != nil || v == "" {
			return // no status yet: nothing to stay above
		}
		// the one read in flight is floorSeen's only writer
		if f, err := strconv.ParseInt(v, 10, 64); err == nil && f > h.floorSeen.Load() {
			h.floorSeen.Store(f)
		}
	}()
	select {
	case <-done:
	case <-time.After(floorWait):
		h.log.Info().Int64("floor", h.floorSeen.Load()).Msg("the mirror is busy: campaigning with the fence floor read before")
	}
	return h.floorSeen.Load(), nil
}

// floorWait is how long a campaign waits for the fence floor's read.
const floorWait = 500 * time.Millisecond
