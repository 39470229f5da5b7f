package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Node is one simulated node: its id and its agent token.
type Node struct {
	ID    string
	Token string
}

// Options configure a Fleet. HubURL (or HubURLs) and Nodes are required.
type Options struct {
	// HubURL is the hub's base URL (http://host:port).
	HubURL string
	// HubURLs, when given, are the base URLs of hub replicas sharing one
	// Redis: the k-th node's agent talks to HubURLs[k mod len], as agents
	// behind a load balancer each keep to one replica, and moves to the
	// next replica when its own refuses connections (it is down).
	HubURLs []string
	Nodes   []Node
	// Duration is how long an action "runs" (default 1s); each attempt
	// takes Duration +- Jitter x Duration (Jitter 0..1, default 0).
	Duration time.Duration
	Jitter   float64
	// Transient and Permanent are the shares of attempts that end in a
	// transient or permanent failure (the rest succeed).
	Transient, Permanent float64
	// Pollers is the most long polls open at once (default: one per node
	// up to 15,000). A fleet larger than that takes turns.
	Pollers int
	// Wait is the long poll's wait when every agent has a poller (default
	// 25s); RotateWait when agents take turns (default 1s).
	Wait, RotateWait time.Duration
	// Posters is the most results and reports posted at once (default 256).
	Posters int
	// ReportEvery sends each agent's full report this often (jittered);
	// 0 = only at registration and when the hub asks.
	ReportEvery time.Duration
	// H2C speaks unencrypted HTTP/2 (prior knowledge) to the hub: every
	// request shares a few connections. The hub must serve h2c.
	H2C bool
	// LocalAddrs are the source addresses the connections are spread over
	// (e.g. 127.0.0.2, 127.0.0.3 for a hub on loopback): each gives
	// another range of ephemeral ports. Empty: the system's choice.
	LocalAddrs []string
	// Seed seeds the durations and the failure draws.
	Seed uint64
	// OnAttempt is called for each attempt as it arrives, OnResult once a
	// result was posted (err nil: the hub took it). Both may be called
	// from many goroutines at once.
	OnAttempt func(a fleetwave.Attempt, at time.Time)
	OnResult  func(a fleetwave.Attempt, res fleetwave.AttemptResult, err error, at time.Time)
	Logger    zerolog.Logger
}

// Stats counts what the fleet did.
type Stats struct {
	Registered   int64 // agents registered
	Polls        int64 // long polls answered
	PollErrors   int64 // long polls that failed
	Attempts     int64 // attempts received
	Redelivered  int64 // attempts received again (not run twice)
	Succeeded    int64 // success results the hub took
	Transient    int64 // transient results the hub took
	Permanent    int64 // permanent results the hub took
	Refused      int64 // results the hub refused (4xx)
	PostErrors   int64 // results or reports that could not be posted
	Reports      int64 // full reports sent after registration
	ReportsAsked int64 // polls that asked for a full report
	InFlight     int64 // attempts running now
}

// Fleet is a set of simulated agents sharing one HTTP transport and a pool
// of pollers. Create it with New, then call Run.
type Fleet struct {
	opts   Options
	bases  []string // the hubs' base URLs
	spread []int    // the agents New gave each hub
	client *http.Client
	agents []*simAgent
	queue  chan *simAgent
	posts  chan struct{}
	log    zerolog.Logger

	rngMu sync.Mutex
	rng   *rand.Rand

	registered, polls, pollErrors, attempts, redelivered         atomic.Int64
	succeeded, transient, permanent, refused, postErrs, inFlight atomic.Int64
	reports, reportsAsked                                        atomic.Int64

	succMu    sync.Mutex
	successes map[string]int // item -> success results the hub took
}

// simAgent is one node's agent: its state only, no goroutine.
type simAgent struct {
	node Node
	path string       // /api/v1/agent/nodes/<node>, after its hub's base URL
	hub  atomic.Int32 // its hub: Fleet.bases[hub]

	mu         sync.Mutex
	registered bool
	wantReport bool
	nextReport time.Time
	instances  map[string]fleetwave.InstanceStatus
	journal    []string        // attempt ids run, newest last (bounded)
	seen       map[string]bool // the same ids, to never run one twice
	// delivered is the highest delivery number of the attempts it ran,
	// said in each poll; resume says its previous poll failed (or it has
	// not polled yet), as fleetwave agent does
	delivered int64
	polled    bool
}

// journalCap bounds the attempt ids an agent keeps and reports.
const journalCap = 32

// New checks opts and builds the fleet; nothing is sent before Run.
func New(opts Options) (*Fleet, error) {
	bases := opts.HubURLs
	if len(bases) == 0 {
		bases = []string{opts.HubURL}
	}
	for _, b := range bases {
		if b == "" {
			return nil, errors.New("fleetsim: no hub URL")
		}
	}
	if len(opts.Nodes) == 0 {
		return nil, errors.New("fleetsim: no nodes")
	}
	if opts.Transient < 0 || opts.Permanent < 0 || opts.Transient+opts.Permanent > 1 {
		return nil, fmt.Errorf("fleetsim: failure shares transient=%g permanent=%g: want each >= 0 and a sum <= 1", opts.Transient, opts.Permanent)
	}
	if opts.Jitter < 0 || opts.Jitter > 1 {
		return nil, fmt.Errorf("fleetsim: jitter %g: want 0..1", opts.Jitter)
	}
	if opts.Duration <= 0 {
		opts.Duration = time.Second
	}
	if opts.Pollers <= 0 {
		opts.Pollers = 15000
	}
	opts.Pollers = min(opts.Pollers, len(opts.Nodes))
	if opts.Wait <= 0 {
		opts.Wait = 25 * time.Second
	}
	if opts.RotateWait <= 0 {
		opts.RotateWait = time.Second
	}
	if opts.Posters <= 0 {
		opts.Posters = 256
	}
	f := &Fleet{
		opts:      opts,
		bases:     make([]string, len(bases)),
		spread:    make([]int, len(bases)),
		queue:     make(chan *simAgent, len(opts.Nodes)),
		posts:     make(chan struct{}, opts.Posters),
		log:       opts.Logger.With().Str("component", "fleetsim").Logger(),
		rng:       rand.New(rand.NewPCG(opts.Seed, 0x5ca1e)),
		successes: map[string]int{},
	}
	for i, b := range bases {
		f.bases[i] = strings.TrimRight(b, "/")
	}
	f.client = &http.Client{Transport: newTransport(opts)}
	seen := map[string]bool{}
	for _, n := range opts.Nodes {
		if n.ID == "" || n.Token == "" {
			return nil, fmt.Errorf("fleetsim: node %q: id and token are required", n.ID)
		}
		if seen[n.ID] {
			return nil, fmt.Errorf("fleetsim: node %s listed twice", n.ID)
		}
		seen[n.ID] = true
		a := &simAgent{node: n, path: "/api/v1/agent/nodes/" + url.PathEscape(n.ID),
			instances: map[string]fleetwave.InstanceStatus{}, seen: map[string]bool{}}
		hub := len(f.agents) % len(bases)
		a.hub.Store(int32(hub))
		f.spread[hub]++
		f.agents = append(f.agents, a)
		f.queue <- a
	}
	return f, nil
}

func newTransport(opts Options) http.RoundTripper {
	conns := opts.Pollers + 2*opts.Posters + 16
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	var next atomic.Uint64
	dial := d.DialContext
	if len(opts.LocalAddrs) > 0 {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			ip := opts.LocalAddrs[next.Add(1)%uint64(len(opts.LocalAddrs))]
			dd := *d
			dd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
			return dd.DialContext(ctx, network, addr)
		}
	}
	if !opts.H2C {
		return &http.Transport{
			DialContext:         dial,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
	}
	// One HTTP/2 transport opens a new connection whenever its
	// connections are at the hub's stream limit, and requests that start
	// together each dial their own: 10,000 polls started at once opened
	// over 20,000 connections. So each transport here dials one
	// connection, the pool lets at most streamsPerConn requests use it at
	// once (net/http's own strict limit hung with hundreds of requests
	// waiting), and the fleet spreads its polls over enough of them.
	// Results and reports have their own transports, so a connection full
	// of polls never holds a result back; and results have theirs apart
	// from reports and registrations: a real agent posts its result on its
	// own connection, where at 100,000 agents the fleet's 500 reports a
	// second took most of a shared set's streams and results waited for
	// one past their deadline (attempt 18 of docs/scale.md).
	pool := func(n int) []*h2cConn {
		cs := make([]*h2cConn, (n+streamsPerConn-1)/streamsPerConn)
		for i := range cs {
			t := &http.Transport{
				DialContext:        dial,
				MaxConnsPerHost:    1,
				IdleConnTimeout:    90 * time.Second,
				DisableCompression: true,
			}
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
			cs[i] = &h2cConn{t: t, slots: make(chan struct{}, streamsPerConn)}
		}
		return cs
	}
	return &h2cPool{polls: pool(opts.Pollers + 16), posts: pool(opts.Posters + 16), results: pool(opts.Posters + 16)}
}

// streamsPerConn is how many requests the fleet puts on one h2c
// connection at most: the streams an HTTP/2 client may open before the
// server's settings arrive (more would open another connection), below
// the hub's 250.
const streamsPerConn = 100

// h2cConn is a transport of one connection and its free streams.
type h2cConn struct {
	t     *http.Transport
	slots chan struct{}
}

// h2cPool spreads requests over transports of one connection each:
// GETs (the long polls) over one set, results over another, the rest
// (reports, registrations) over a third. A request takes a stream of the
// first connection with one free, from a round robin start, and gives it
// back when its answer's body is closed.
type h2cPool struct {
	polls, posts, results []*h2cConn
	next                  atomic.Uint64
}

func (p *h2cPool) RoundTrip(req *http.Request) (*http.Response, error) {
	cs := p.posts
	switch {
	case req.Method == http.MethodGet:
		cs = p.polls
	case strings.HasSuffix(req.URL.Path, "/result"):
		cs = p.results
	}
	start := p.next.Add(1)
	c := cs[start%uint64(len(cs))]
	taken := false
	for i := range uint64(len(cs)) {
		if cc := cs[(start+i)%uint64(len(cs))]; tryTake(cc.slots) {
			c, taken = cc, true
			break
		}
	}
	if !taken {
		select {
		case c.slots <- struct{}{}:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	resp, err := c.t.RoundTrip(req)
	if err != nil {
		<-c.slots
		return nil, err
	}
	resp.Body = &slotBody{ReadCloser: resp.Body, free: func() { <-c.slots }}
	return resp, nil
}

func tryTake(slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// slotBody gives its stream back to the pool once closed.
type slotBody struct {
	io.ReadCloser
	once sync.Once
	free func()
}

func (b *slotBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.free)
	return err
}

// CloseIdleConnections closes every transport's idle connection.
func (p *h2cPool) CloseIdleConnections() {
	for _, c := range slices.Concat(p.polls, p.posts, p.results) {
		c.t.CloseIdleConnections()
	}
}

// Pollers is the number of long polls the fleet keeps open at most.
func (f *Fleet) Pollers() int { return f.opts.Pollers }

// Spread returns how many agents New gave each hub (Options.HubURLs, in
// their order), before any moved on.
func (f *Fleet) Spread() []int { return slices.Clone(f.spread) }

// Posters returns how many posts the fleet sends at once at most.
func (f *Fleet) Posters() int { return f.opts.Posters }

// Stats returns the counters so far.
func (f *Fleet) Stats() Stats {
	return Stats{
		Registered: f.registered.Load(), Polls: f.polls.Load(), PollErrors: f.pollErrors.Load(),
		Attempts: f.attempts.Load(), Redelivered: f.redelivered.Load(), Succeeded: f.succeeded.Load(),
		Transient: f.transient.Load(), Permanent: f.permanent.Load(), Refused: f.refused.Load(),
		PostErrors: f.postErrs.Load(), Reports: f.reports.Load(), ReportsAsked: f.reportsAsked.Load(),
		InFlight: f.inFlight.Load(),
	}
}

// Successes returns, per item id, how many success results the hub took.
func (f *Fleet) Successes() map[string]int {
	f.succMu.Lock()
	defer f.succMu.Unlock()
	out := make(map[string]int, len(f.successes))
	for k, v := range f.successes {
		out[k] = v
	}
	return out
}

// Run registers every agent and serves the fleet until ctx is done; it
// returns nil then. Results of attempts still running are not sent.
func (f *Fleet) Run(ctx context.Context) error {
	f.log.Info().Int("nodes", len(f.agents)).Int("pollers", f.opts.Pollers).Bool("h2c", f.opts.H2C).Msg("fleet started")
	var wg sync.WaitGroup
	for range f.opts.Pollers {
		wg.Go(func() { f.poller(ctx) })
	}
	wg.Wait()
	f.client.CloseIdleConnections()
	return nil
}

// poller serves agents from the queue, one long poll at a time.
func (f *Fleet) poller(ctx context.Context) {
	rotate := len(f.agents) > f.opts.Pollers
	wait := f.opts.Wait
	if rotate {
		wait = f.opts.RotateWait
	}
	for {
		var a *simAgent
		select {
		case <-ctx.Done():
			return
		case a = <-f.queue:
		}
		if err := f.serve(ctx, a, wait); err != nil && ctx.Err() == nil {
			// the hub is busy or away: this poller pauses, the others go on
			f.log.Debug().Err(err).Str("node", a.node.ID).Msg("agent call failed")
			_ = sleep(ctx, 200*time.Millisecond+f.randDur(800*time.Millisecond))
		}
		f.queue <- a
	}
}

// serve registers a, sends a full report when one is due and long-polls once.
func (f *Fleet) serve(ctx context.Context, a *simAgent, wait time.Duration) error {
	a.mu.Lock()
	registered := a.registered
	due := a.wantReport || (f.opts.ReportEvery > 0 && time.Now().After(a.nextReport))
	a.mu.Unlock()
	if !registered {
		if err := f.do(ctx, a, http.MethodPost, "/register", f.report(a), nil); err != nil {
			return fmt.Errorf("register: %w", err)
		}
		a.mu.Lock()
		a.registered = true
		a.nextReport = time.Now().Add(f.jittered(f.opts.ReportEvery))
		a.mu.Unlock()
		f.registered.Add(1)
	} else if due {
		if err := f.do(ctx, a, http.MethodPost, "/report", f.report(a), nil); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		a.mu.Lock()
		a.wantReport = false
		a.nextReport = time.Now().Add(f.jittered(f.opts.ReportEvery))
		a.mu.Unlock()
		f.reports.Add(1)
	}
	var out struct {
		Attempts []fleetwave.Attempt `json:"attempts"`
		Report   bool                `json:"report"`
	}
	a.mu.Lock()
	rc := fleetwave.Receipt{Delivered: a.delivered, Resume: !a.polled}
	a.mu.Unlock()
	u := "/attempts?wait=" + url.QueryEscape(wait.String()) + rc.Query()
	pctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	err := f.do(pctx, a, http.MethodGet, u, nil, &out)
	cancel()
	if err != nil {
		f.pollErrors.Add(1)
		a.mu.Lock()
		a.polled = false
		a.mu.Unlock()
		return fmt.Errorf("poll: %w", err)
	}
	f.polls.Add(1)
	a.mu.Lock()
	a.polled = a.polled || !out.Report // an answer asking for a report came before the hub looked
	a.mu.Unlock()
	if out.Report {
		f.reportsAsked.Add(1)
		a.mu.Lock()
		a.wantReport = true
		a.mu.Unlock()
	}
	now := time.Now()
	for _, att := range out.Attempts {
		f.start(ctx, a, att, now)
	}
	return nil
}

// report is a's full report.
func (f *Fleet) report(a *simAgent) fleetwave.Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := fleetwave.Report{Node: a.node.ID, AgentVersion: "sim-" + fleetwave.Version,
		Instances: make([]fleetwave.InstanceStatus, 0, len(a.instances)), Attempts: slices.Clone(a.journal), SentAt: time.Now().UTC()}
	for _, inst := range a.instances {
		r.Instances = append(r.Instances, inst)
	}
	slices.SortFunc(r.Instances, func(x, y fleetwave.InstanceStatus) int { return strings.Compare(x.Block, y.Block) })
	return r
}

// start "runs" att on a timer; an attempt already run is not run again.
func (f *Fleet) start(ctx context.Context, a *simAgent, att fleetwave.Attempt, at time.Time) {
	a.mu.Lock()
	if a.seen[att.ID] {
		a.mu.Unlock()
		f.redelivered.Add(1)
		return
	}
	a.seen[att.ID] = true
	a.delivered = max(a.delivered, att.Delivery)
	a.journal = append(a.journal, att.ID)
	if len(a.journal) > journalCap {
		delete(a.seen, a.journal[0])
		a.journal = a.journal[1:]
	}
	a.mu.Unlock()
	f.attempts.Add(1)
	f.inFlight.Add(1)
	if f.opts.OnAttempt != nil {
		f.opts.OnAttempt(att, at)
	}
	d := f.opts.Duration
	if f.opts.Jitter > 0 {
		span := time.Duration(float64(d) * f.opts.Jitter)
		d = d - span + f.randDur(2*span+1)
	}
	time.AfterFunc(d, func() {
		defer f.inFlight.Add(-1)
		if ctx.Err() != nil {
			return
		}
		f.finish(ctx, a, att)
	})
}

// finish draws the attempt's outcome, updates the instance as an agent
// does and posts the result.
func (f *Fleet) finish(ctx context.Context, a *simAgent, att fleetwave.Attempt) {
	res := fleetwave.AttemptResult{AttemptID: att.ID, Fence: att.Fence, Class: fleetwave.ResultSuccess}
	f.rngMu.Lock()
	draw := f.rng.Float64()
	f.rngMu.Unlock()
	switch {
	case draw < f.opts.Permanent:
		res.Class, res.ExitCode, res.Output = fleetwave.ResultPermanent, 2, "simulated permanent failure"
	case draw < f.opts.Permanent+f.opts.Transient:
		res.Class, res.ExitCode, res.Output = fleetwave.ResultTransient, 1, "simulated transient failure"
	}
	res.Instance = a.apply(att, res.Class == fleetwave.ResultSuccess, time.Now().UTC())
	err := f.post(ctx, a, "/attempts/"+url.PathEscape(att.ID)+"/result", res)
	switch {
	case err == nil:
		switch res.Class {
		case fleetwave.ResultSuccess:
			f.succeeded.Add(1)
			f.succMu.Lock()
			f.successes[att.Item]++
			f.succMu.Unlock()
		case fleetwave.ResultTransient:
			f.transient.Add(1)
		default:
			f.permanent.Add(1)
		}
	case !retryable(err):
		f.refused.Add(1)
		f.log.Warn().Err(err).Str("node", a.node.ID).Str("attempt", att.ID).Msg("result refused")
	default:
		f.postErrs.Add(1)
		f.log.Warn().Err(err).Str("node", a.node.ID).Str("attempt", att.ID).Msg("result not posted")
	}
	if f.opts.OnResult != nil {
		f.opts.OnResult(att, res, err, time.Now())
	}
}

// apply is the agent's instance update after an attempt: on success the
// instance shows the attempt's generation, version, config and state; an
// operational action or a failure leaves it as it was.
func (a *simAgent) apply(att fleetwave.Attempt, success bool, now time.Time) *fleetwave.InstanceStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, exists := a.instances[att.Block]
	if !success || att.Payload.Operational {
		if !exists {
			return nil
		}
		if success {
			cur.LastAttempt, cur.UpdatedAt = att.ID, now
			a.instances[att.Block] = cur
		}
		return &cur
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
	if att.ManagedBy != "" {
		next.ManagedBy = att.ManagedBy
	}
	next.Generation, next.State, next.LastAttempt, next.UpdatedAt = att.Generation, state, att.ID, now
	if state == fleetwave.StateAbsent {
		delete(a.instances, att.Block)
	} else {
		a.instances[att.Block] = next
	}
	return &next
}

// post sends body with at most Posters posts at once, retrying what may
// succeed later for up to a minute.
func (f *Fleet) post(ctx context.Context, a *simAgent, path string, body any) error {
	select {
	case f.posts <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.posts }()
	deadline := time.Now().Add(time.Minute)
	wait := 100 * time.Millisecond
	for {
		err := f.do(ctx, a, http.MethodPost, path, body, nil)
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if sleep(ctx, wait+f.randDur(wait)) != nil {
			return ctx.Err()
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// hubError is an error answer of the hub.
type hubError struct {
	Status int
	Code   string
}

func (e *hubError) Error() string { return fmt.Sprintf("hub answered %d %s", e.Status, e.Code) }

// retryable: transport errors, 5xx, 408 and 429 may succeed later.
func retryable(err error) bool {
	var he *hubError
	if !errors.As(err, &he) {
		return true
	}
	return he.Status >= 500 || he.Status == http.StatusRequestTimeout || he.Status == http.StatusTooManyRequests
}

// do sends one request of agent a to its hub (path follows the agent's
// own, simAgent.path) with its token. A hub that refuses the connection is
// down: the agent moves to the next one for its next request.
func (f *Fleet) do(ctx context.Context, a *simAgent, method, path string, body, out any) error {
	hub := a.hub.Load()
	err := f.send(ctx, a.node.Token, method, f.bases[hub]+a.path+path, body, out)
	if errors.Is(err, syscall.ECONNREFUSED) && len(f.bases) > 1 {
		a.hub.CompareAndSwap(hub, (hub+1)%int32(len(f.bases)))
	}
	return err
}

// send sends one request with a node's token.
func (f *Fleet) send(ctx context.Context, token, method, target string, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "fleetwave-sim/"+fleetwave.Version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		he := &hubError{Status: resp.StatusCode}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			he.Code = e.Error.Code
		}
		return he
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

func (f *Fleet) randDur(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	f.rngMu.Lock()
	defer f.rngMu.Unlock()
	return time.Duration(f.rng.Int64N(int64(n)))
}

// jittered is d +- 20%, so that agents started together spread out.
func (f *Fleet) jittered(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d*8/10 + f.randDur(d*4/10)
}

// sleep waits d or until ctx is done; it returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
