package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Config configures one node's agent.
type Config struct {
	// HubURL is the hub's base URL, e.g. "https://hub.example:8080".
	HubURL string
	// Node is this node's id; Token is its bearer token.
	Node, Token string
	// StateDir holds state.json and the block instances (blocks/<block>/).
	StateDir string
	// Capabilities and DataAddresses are advertised in every full report.
	Capabilities  []string
	DataAddresses map[string]string
	// PollWait is the long-poll wait, default 10s (the hub caps it at its
	// agents.max_poll_wait, 30s unless set).
	PollWait time.Duration
	// ReportInterval is the period of full reports, default 30s.
	ReportInterval time.Duration
	// HTTPClient talks to the hub, default a client without a global
	// timeout (long polls are bounded per request).
	HTTPClient *http.Client
	// Logger receives the agent's logs; the zero value discards them.
	Logger zerolog.Logger
	// Shell runs the block commands as Shell -c command, default "/bin/sh".
	Shell string
	// SelfUpgrade lets the built-in upgrade of the fleetwave-agent block
	// replace this program's binary and re-execute it (upgrade.go): set by
	// `fleetwave agent`, a process that is the agent and nothing else. An
	// agent embedded in another program leaves it off: the built-in then
	// records the target version without replacing anything.
	SelfUpgrade bool
	// UpgradeTimeout is how long a new build has to start and report to
	// the hub before the previous build is restored, default
	// DefaultUpgradeTimeout (never past the attempt's deadline).
	UpgradeTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultPollWait       = 10 * time.Second
	DefaultReportInterval = 30 * time.Second
	DefaultShell          = "/bin/sh"
	// DefaultTimeout bounds a command whose payload sets no timeout.
	DefaultTimeout = fleetwave.DefaultActionTimeout
)

// Backoff bounds for hub errors.
const (
	minBackoff = 250 * time.Millisecond
	// maxBackoff stays short: a hub restarting (a crash, a failover) is
	// back within seconds, and every agent must find it soon after
	maxBackoff = 3 * time.Second
)

func (c Config) withDefaults() (Config, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{{"hub URL", c.HubURL}, {"node", c.Node}, {"token", c.Token}, {"state dir", c.StateDir}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("agent config lacks %s", strings.Join(missing, ", "))
	}
	if !strings.HasPrefix(c.HubURL, "http://") && !strings.HasPrefix(c.HubURL, "https://") {
		return c, fmt.Errorf("hub URL %q is not http(s)", c.HubURL)
	}
	c.HubURL = strings.TrimRight(c.HubURL, "/")
	if c.PollWait <= 0 {
		c.PollWait = DefaultPollWait
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Shell == "" {
		c.Shell = DefaultShell
	}
	return c, nil
}

// agent is one running agent.
type agent struct {
	cfg    Config
	log    zerolog.Logger
	client *client

	mu    sync.Mutex // guards store
	store *store
	det   detector // instances installed by hand (detect.go)
}

// Run runs the agent until ctx is cancelled, then returns nil. It returns an
// error only at start-up: an invalid Config, a state directory it cannot
// lock or write, or a state file it cannot trust (ErrStateCorrupted). Hub
// outages are retried, never returned.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if done, err := answerProbe(); done {
		return err
	}
	st, err := openStore(cfg.StateDir, cfg.Node, time.Now().UTC())
	if err != nil {
		return err
	}
	defer st.close()
	a := &agent{
		cfg:    cfg,
		log:    cfg.Logger,
		client: &client{base: cfg.HubURL, node: cfg.Node, token: cfg.Token, http: cfg.HTTPClient},
		store:  st,
	}
	a.log.Info().Str("node", cfg.Node).Str("agent_version", fleetwave.Version).Int("instances", len(st.st.Instances)).Msg("agent starting")
	upgrade, err := a.resumeUpgrade(ctx)
	if err != nil {
		return err
	}

	a.detect(ctx, true)
	if err := a.retry(ctx, "register", func() error { return a.client.register(ctx, a.fullReport()) }); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		// A 4xx other than auth: the hub will not take this agent's report
		// as is; keep going, the periodic report tells the operator again.
		a.log.Error().Err(err).Str("node", cfg.Node).Msg("registration refused")
	} else {
		a.log.Info().Str("node", cfg.Node).Msg("agent registered")
		upgrade.reported()
	}
	a.deliverPending(ctx)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.reportLoop(ctx)
	}()
	a.pollLoop(ctx)
	wg.Wait()
	a.log.Info().Str("node", cfg.Node).Msg("agent stopped")
	return nil
}

// retry calls fn until it succeeds, fails with a non-retryable error (which
// it returns) or ctx is done (ctx.Err()).
func (a *agent) retry(ctx context.Context, what string, fn func() error) error {
	b := backoff{min: minBackoff, max: maxBackoff}
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		d := b.next()
		a.log.Warn().Err(err).Str("node", a.cfg.Node).Str("call", what).Int64("retry_in_ms", d.Milliseconds()).Msg("hub call failed")
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

func (a *agent) pollLoop(ctx context.Context) {
	b := backoff{min: minBackoff, max: maxBackoff}
	// the first poll, and one after a failed poll, may follow an answer
	// lost on its way: the agent says so, with what it received
	resume := true
	for ctx.Err() == nil {
		a.mu.Lock()
		rc := a.store.receipt(resume)
		a.mu.Unlock()
		atts, report, err := a.client.poll(ctx, a.cfg.PollWait, rc)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			resume = true
			d := b.next()
			a.log.Warn().Err(err).Str("node", a.cfg.Node).Int64("retry_in_ms", d.Milliseconds()).Msg("poll failed")
			_ = sleep(ctx, d)
			continue
		}
		b.reset()
		// an answer asking for a report comes before the hub looks at
		// the poll: what it says is said again
		resume = resume && report
		if report {
			a.sendReport(ctx) // the hub lost what it knew of this node
		}
		if len(atts) == 0 {
			continue
		}
		for _, att := range atts {
			if ctx.Err() != nil {
				return
			}
			a.handle(ctx, att)
		}
		a.sendReport(ctx)
	}
}

func (a *agent) reportLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.sendReport(ctx)
		}
	}
}

// sendReport sends a full report, retrying transient failures.
func (a *agent) sendReport(ctx context.Context) {
	a.detect(ctx, false)
	err := a.retry(ctx, "report", func() error { return a.client.report(ctx, a.fullReport()) })
	if err != nil && ctx.Err() == nil {
		a.log.Error().Err(err).Str("node", a.cfg.Node).Msg("report refused")
	}
}

// fullReport observes every instance the node holds.
func (a *agent) fullReport() fleetwave.Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := fleetwave.Report{
		Node:          a.cfg.Node,
		AgentVersion:  fleetwave.Version,
		Capabilities:  a.cfg.Capabilities,
		DataAddresses: a.cfg.DataAddresses,
		Instances:     make([]fleetwave.InstanceStatus, 0, len(a.store.st.Instances)),
		SentAt:        time.Now().UTC(),
	}
	for _, in := range a.store.st.Instances {
		r.Instances = append(r.Instances, a.observedSelf(in))
	}
	sort.Slice(r.Instances, func(i, j int) bool { return r.Instances[i].Block < r.Instances[j].Block })
	for id := range a.store.st.Journal {
		r.Attempts = append(r.Attempts, id)
	}
	sort.Strings(r.Attempts)
	a.detectedInto(&r)
	return r
}

// blockName is a DNS-label-like block name: it can never address a path
// outside StateDir/blocks.
var blockName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// handle runs one attempt at most once and delivers its result.
func (a *agent) handle(ctx context.Context, att fleetwave.Attempt) {
	log := a.log.With().Str("node", a.cfg.Node).Str("attempt", att.ID).Str("item", att.Item).
		Str("block", att.Block).Str("action", att.Action).Int64("generation", att.Generation).Int64("fence", att.Fence).Logger()
	if att.ID == "" {
		log.Warn().Msg("attempt without id ignored")
		return
	}

	a.mu.Lock()
	if e, ok := a.store.st.Journal[att.ID]; ok {
		a.mu.Unlock()
		log.Info().Str("journal", e.Status).Msg("attempt already journalled; sending its result again")
		a.deliver(ctx, att.ID)
		return
	}
	now := time.Now().UTC()
	refusal, class := "", fleetwave.ResultPermanent
	switch {
	case att.Node != a.cfg.Node:
		refusal = "attempt is for another node"
	case !blockName.MatchString(att.Block):
		refusal = "invalid block name"
	case att.Fence < a.store.st.MaxFence:
		refusal = "stale fencing token"
	case !att.Deadline.IsZero() && !now.Before(att.Deadline):
		// the hub may already count it lost; running it now could race a
		// new attempt. Nothing ran, so the hub may retry it safely.
		refusal, class = "deadline passed before start", fleetwave.ResultTransient
	}
	prevDelivery := a.store.st.LastDelivery
	a.store.st.LastDelivery = max(prevDelivery, att.Delivery)
	if refusal != "" {
		a.store.record(att.ID, &journalEntry{Status: journalDone, Fence: att.Fence, StartedAt: now, DoneAt: now,
			Result: &fleetwave.AttemptResult{AttemptID: att.ID, Fence: att.Fence, Class: class, ExitCode: -1, Output: refusal}})
		maxFence := a.store.st.MaxFence
		err := a.store.save()
		a.mu.Unlock()
		if err != nil {
			log.Error().Err(err).Msg("state not saved")
		}
		log.Warn().Int64("max_fence", maxFence).Str("reason", refusal).Msg("attempt refused")
		a.deliver(ctx, att.ID)
		return
	}
	prevFence := a.store.st.MaxFence
	a.store.st.MaxFence = max(a.store.st.MaxFence, att.Fence)
	a.store.record(att.ID, &journalEntry{Status: journalStarted, Fence: att.Fence, StartedAt: now})
	err := a.store.save()
	if err != nil {
		// Without a durable "started" record a crash could run it twice:
		// do not run it.
		delete(a.store.st.Journal, att.ID)
		a.store.st.MaxFence, a.store.st.LastDelivery = prevFence, prevDelivery
		a.mu.Unlock()
		log.Error().Err(err).Msg("attempt not journalled; not run")
		return
	}
	a.mu.Unlock()

	log.Info().Msg("attempt started")
	res, interrupted := a.execute(ctx, att, log)
	if interrupted {
		// Left "started": the next start reports it lost, never re-runs it.
		log.Warn().Msg("attempt interrupted by shutdown")
		return
	}

	a.mu.Lock()
	inst, changed := a.applyInstance(att, res.Class == fleetwave.ResultSuccess, time.Now().UTC())
	res.Instance = inst
	e := a.store.st.Journal[att.ID]
	e.Status, e.DoneAt, e.Result = journalDone, time.Now().UTC(), &res
	err = a.store.save()
	a.mu.Unlock()
	if err != nil {
		log.Error().Err(err).Msg("state not saved")
	}
	log.Info().Str("class", string(res.Class)).Int("exit_code", res.ExitCode).Bool("instance_changed", changed).Msg("attempt finished")
	a.deliver(ctx, att.ID)
}

// applyInstance updates the block instance after an attempt (only on
// success) and returns it as observed; the caller holds a.mu.
func (a *agent) applyInstance(att fleetwave.Attempt, success bool, now time.Time) (*fleetwave.InstanceStatus, bool) {
	cur, exists := a.store.st.Instances[att.Block]
	cur, exists = a.adoptDetected(att, success, cur, exists)
	if !success || att.Payload.Operational {
		if !exists {
			return nil, false
		}
		if success { // an operational action ran on it: nothing else changes
			cur.LastAttempt, cur.UpdatedAt = att.ID, now
			a.store.st.Instances[att.Block] = cur
			return &cur, true
		}
		return &cur, false
	}
	state := fleetwave.StateAfter(att.Action, att.DesiredState, cur.State)
	next := cur
	next.Block = att.Block
	if att.TargetVersion != "" {
		next.Version = att.TargetVersion
	}
	if att.ConfigHash != "" {
		next.ConfigHash = att.ConfigHash
	}
	next.Generation = att.Generation
	next.State = state
	if att.ManagedBy != "" {
		next.ManagedBy = att.ManagedBy
	}
	next.LastAttempt = att.ID
	next.UpdatedAt = now
	if state == fleetwave.StateAbsent {
		delete(a.store.st.Instances, att.Block)
	} else {
		a.store.st.Instances[att.Block] = next
	}
	return &next, true
}

// deliver posts the journalled result of attempt id until the hub takes or
// definitively refuses it.
func (a *agent) deliver(ctx context.Context, id string) {
	a.mu.Lock()
	e, ok := a.store.st.Journal[id]
	if !ok || e.Status != journalDone {
		a.mu.Unlock()
		return
	}
	res := *e.Result
	a.mu.Unlock()

	err := a.retry(ctx, "result", func() error { return a.client.result(ctx, res) })
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil {
		var he *hubError
		if errors.As(err, &he) {
			a.log.Warn().Err(err).Str("node", a.cfg.Node).Str("attempt", id).Msg("result refused by the hub; dropped")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.store.st.Journal[id]; ok && !e.Delivered {
		e.Delivered = true
		if err := a.store.save(); err != nil {
			a.log.Error().Err(err).Str("node", a.cfg.Node).Str("attempt", id).Msg("state not saved")
		}
	}
}

// deliverPending sends results left undelivered by an earlier run.
func (a *agent) deliverPending(ctx context.Context) {
	a.mu.Lock()
	ids := a.store.undelivered()
	a.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		a.deliver(ctx, id)
	}
}

// ReadTokenFile reads a bearer token from path, trimming surrounding
// whitespace. An empty file is an error.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s holds more than one word", path)
	}
	return tok, nil
}
