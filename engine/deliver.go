package engine

import (
	"context"
	"errors"
	"hash/maphash"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave/internal/clock"
)

// Delivery. Attempts wait in their node's queue (q:<node>), each as the
// agent will receive it; popping one delivers it. A Poll that finds its
// queue empty waits in memory, holding no Redis connection: every script
// that queues attempts publishes the nodes it queued for on the channel
// "fw{p}:ready", once per script, and one subscriber per Engine (the
// mux) claims the waiting Polls of those nodes and pops their queues in
// pipelines of up to popChunk pops. A wave of 200 attempts thus costs one
// message and one round trip to hand out, whatever the number of agents
// waiting.
//
// Nothing is lost to the mux, and a waiting agent costs Redis nothing: a
// Poll registers, and looks at its queue itself only when the mux may
// have missed an announcement for its node: the subscription is not
// confirmed yet, the node was not looked at since it was (each
// confirmation starts a new epoch), or an announcement came while no Poll
// of the node waited (unclaimed). Any other attempt is queued after the
// node's last look, so its announcement reaches the mux. When the
// subscription (re)starts every waiting Poll is claimed and its queue
// looked at, since messages published while it was down are gone. A
// claimed Poll whose caller gave up still takes what was popped for it,
// so a popped attempt is always handed out (or marked undelivered when
// past its deadline).

// muxIdle is how long the mux keeps its subscription without any waiting
// Poll before it ends (it starts again with the next one).
const muxIdle = 30 * time.Second

// muxRetry is the pause before the mux subscribes again after an error.
const muxRetry = 500 * time.Millisecond

// popChunk bounds the pops of one pipeline: the waiters of an
// announcement are popped chunk by chunk, each chunk handed out as soon as
// its pipeline returns. At 100,000 agents a wave of 5,000 was popped in one
// pipeline, and its first agent got its attempt only once the last pop
// was read.
const popChunk = 256

// muxHandlers bounds the announcements the mux hands out at once. Each is
// popped by a goroutine of its own, so a small one does not wait for a
// large one: a one-node rollout started during a wave of 5,000 was popped
// only after the whole wave had been. Beyond the bound the mux waits, as
// it did for each announcement before.
const muxHandlers = 4

// muxShards divides the registry of waiting Polls by node. At 100,000
// agents one lock over the registry had, on two cores, some five Polls
// waiting for it at any time: a holder preempted with it held kept them
// all waiting, and the mux's claim of a wave's nodes behind them.
const muxShards = 64

// waiter is a Poll waiting for its node's queue.
type waiter struct {
	node string
	max  int
	// delivered is what its agent says it holds (pop.lua)
	delivered int64
	// got receives what the mux popped for the claimed waiter (nil and
	// err when the pop failed: the waiter then looks itself); capacity 1.
	got chan popped
}

// popped is what the mux popped for a waiter; woken: nothing, the waiter
// was woken (Wake).
type popped struct {
	raw   []string
	first int64 // the first entry's delivery number, the next ones following it (pop.lua)
	err   error
	woken bool
	// report: an item of the node awaits its full report (a Poll's own
	// look asked: popArgs.Ask)
	report bool
}

// mux is the Engine's delivery multiplexer (see above). Its waiting Polls
// are kept in shards by node, each under its own lock. The subscription's
// state (subscribed, epoch) is read under any one shard's lock and
// written with every shard's held (on a confirmation or a loss, rare), so
// a Poll registering sees it as the claim of every waiter does.
type mux struct {
	shards [muxShards]muxShard

	ctl     sync.Mutex // guards run and the changes of running
	running atomic.Bool
	run     int // which subscriber runs (an ending one may still finish)

	subscribed bool          // its subscription is confirmed (every shard's lock to write)
	epoch      int           // confirmations so far (the same)
	idle       time.Duration // muxIdle unless a test sets it before the first Poll

	handlers chan struct{} // one token per announcement being handed out (capacity muxHandlers)
	// beforePop, when a test sets it before the first Poll, is called with
	// the nodes of each pipeline of pops before it runs
	beforePop func(nodes []string)
}

// muxShard is one shard of the waiting Polls.
type muxShard struct {
	mu        sync.Mutex
	waiters   map[string][]*waiter // by node, oldest first
	n         int                  // waiters in the map
	looked    map[string]int       // node -> epoch its queue was last looked at in
	unclaimed map[string]bool      // nodes announced while none of their Polls waited
	woken     map[string]bool      // nodes woken while none of their Polls waited
	asked     map[string]time.Time // nodes a look ended a Poll of for their report, when (askNow)
}

// ready makes the shard's maps on its first use; its lock held.
func (sh *muxShard) ready() {
	if sh.waiters == nil {
		sh.waiters = map[string][]*waiter{}
		sh.looked = map[string]int{}
		sh.unclaimed = map[string]bool{}
		sh.woken = map[string]bool{}
		sh.asked = map[string]time.Time{}
	}
}

var muxSeed = maphash.MakeSeed()

// shardOf is the index of node's shard; shard returns that shard.
func shardOf(node string) uint64 { return maphash.String(muxSeed, node) % muxShards }

func (m *mux) shard(node string) *muxShard { return &m.shards[shardOf(node)] }

// lockAll takes every shard's lock, in order; unlockAll releases them.
func (m *mux) lockAll() {
	for i := range m.shards {
		m.shards[i].mu.Lock()
	}
}

func (m *mux) unlockAll() {
	for i := range m.shards {
		m.shards[i].mu.Unlock()
	}
}

// waiting counts the waiting Polls; every shard's lock held.
func (m *mux) waiting() int {
	n := 0
	for i := range m.shards {
		n += m.shards[i].n
	}
	return n
}

// WaitingPolls returns how many Polls wait for their queue on this Engine.
func (e *Engine) WaitingPolls() int {
	n := 0
	for i := range e.mux.shards {
		sh := &e.mux.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// register adds a waiting Poll and starts the subscriber when needed; it
// reports whether the Poll must look at its queue itself (see above).
func (e *Engine) register(w *waiter) bool {
	m := &e.mux
	sh := m.shard(w.node)
	sh.mu.Lock()
	sh.ready()
	if sh.woken[w.node] {
		// woken while its last Poll was claimed (between two waits): this
		// one ends at once, as that one would have
		delete(sh.woken, w.node)
		w.got <- popped{woken: true}
	} else {
		sh.waiters[w.node] = append(sh.waiters[w.node], w)
		sh.n++
	}
	look := true
	if m.subscribed && sh.looked[w.node] == m.epoch && !sh.unclaimed[w.node] {
		look = false
	} else {
		if m.subscribed {
			sh.looked[w.node] = m.epoch
		}
		delete(sh.unclaimed, w.node)
	}
	sh.mu.Unlock()
	// after the waiter is in its shard: a subscriber that ends for lack
	// of waiters either saw it or left running false for this to see
	if !m.running.Load() {
		m.ctl.Lock()
		if !m.running.Load() {
			m.running.Store(true)
			m.run++
			go e.subscribe(m.run)
		}
		m.ctl.Unlock()
	}
	return look
}

// lookAskEvery bounds how often a look ends a Poll of one node at once
// because an item of the node awaits its report: while the subscription
// is down every Poll looks, and an item the report does not settle (a
// one-shot waiting for a later one) would end each of them.
const lookAskEvery = time.Minute

// askNow says whether a Poll of node, whose look found an item awaiting
// the node's report, ends at once: once per lookAskEvery per node.
func (e *Engine) askNow(node string) bool {
	var wall clock.Real
	now := wall.Now()
	sh := e.mux.shard(node)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.ready()
	if at, ok := sh.asked[node]; ok && now.Sub(at) < lookAskEvery {
		return false
	}
	if len(sh.asked) >= 1024 {
		for n, at := range sh.asked {
			if now.Sub(at) >= lookAskEvery {
				delete(sh.asked, n)
			}
		}
	}
	sh.asked[node] = now
	return true
}

// unregister removes w unless the mux claimed it; it reports whether it
// did (false: a pop for w is under way and will arrive on w.got).
func (e *Engine) unregister(w *waiter) bool {
	sh := e.mux.shard(w.node)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ws := sh.waiters[w.node]
	for i, x := range ws {
		if x == w {
			sh.waiters[w.node] = append(ws[:i:i], ws[i+1:]...)
			if len(sh.waiters[w.node]) == 0 {
				delete(sh.waiters, w.node)
			}
			sh.n--
			return true
		}
	}
	return false
}

// Wake ends the waiting Polls of nodes on this Engine at once, without
// attempts, so that their agents hear what the caller now has to ask them
// (the hub: a report, to settle an ambiguous item) rather than at the end
// of their wait. Their next Polls look at their queues as usual.
func (e *Engine) Wake(nodes []string) {
	var ws []*waiter
	for _, node := range nodes {
		sh := e.mux.shard(node)
		sh.mu.Lock()
		if len(sh.waiters[node]) == 0 {
			// none waits now (one may be claimed, about to wait again): the
			// node's next Poll ends at once
			sh.ready()
			sh.woken[node] = true
		} else {
			ws = append(ws, sh.waiters[node]...)
			sh.n -= len(sh.waiters[node])
			delete(sh.waiters, node)
		}
		sh.mu.Unlock()
	}
	for _, w := range ws {
		w.got <- popped{woken: true} // out of the map: nothing else sends
	}
}

// reportWanted hears nodes whose full report an item awaits, announced
// by a Step (step.lua, the channel "fw{p}:report"): the caller's callback
// (WithReportWanted) learns them, then their waiting Polls end, so that
// their agents are asked for the report now, whichever hub holds them.
func (e *Engine) reportWanted(nodes []string) {
	if e.wanted != nil {
		e.wanted(nodes)
	}
	e.Wake(nodes)
}

// claim takes the oldest waiting Poll of each of nodes out of the map,
// each shard's nodes under one hold of its lock.
func (e *Engine) claim(nodes []string) []*waiter {
	m := &e.mux
	var by [muxShards][]string
	for _, node := range nodes {
		i := shardOf(node)
		by[i] = append(by[i], node)
	}
	var out []*waiter
	for i := range by {
		if len(by[i]) == 0 {
			continue
		}
		sh := &m.shards[i]
		sh.mu.Lock()
		for _, node := range by[i] {
			ws := sh.waiters[node]
			if len(ws) == 0 {
				sh.ready()
				sh.unclaimed[node] = true // the node's next Poll looks
				continue
			}
			out = append(out, ws[0])
			if len(ws) == 1 {
				delete(sh.waiters, node)
			} else {
				sh.waiters[node] = ws[1:]
			}
			sh.n--
		}
		sh.mu.Unlock()
	}
	return out
}

// confirmed starts a new epoch once the subscription of subscriber run is
// confirmed (every node's next Poll looks at its queue) and claims every
// waiting Poll.
func (e *Engine) confirmed(run int) []*waiter {
	m := &e.mux
	m.ctl.Lock()
	defer m.ctl.Unlock()
	m.lockAll()
	defer m.unlockAll()
	m.subscribed = m.run == run
	m.epoch++
	var out []*waiter
	for i := range m.shards {
		sh := &m.shards[i]
		clear(sh.unclaimed)
		for _, ws := range sh.waiters {
			out = append(out, ws...)
		}
		clear(sh.waiters)
		sh.n = 0
	}
	return out
}

// unsubscribed says announcements may be missed until the next
// confirmation (unless a newer subscriber runs already).
func (e *Engine) unsubscribed(run int) {
	m := &e.mux
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.run == run {
		m.lockAll()
		m.subscribed = false
		m.unlockAll()
	}
}

// handOut pops the queues of claimed waiters and hands each its share, in
// a goroutine of its own (at most muxHandlers at once: beyond that it
// waits for one to end), chunk by chunk.
func (e *Engine) handOut(ctx context.Context, ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	e.mux.handlers <- struct{}{}
	go func() {
		defer func() { <-e.mux.handlers }()
		for chunk := range slices.Chunk(ws, popChunk) {
			e.popFor(ctx, chunk)
		}
	}()
}

// popFor pops the queues of claimed waiters in one pipeline and hands each
// its share.
func (e *Engine) popFor(ctx context.Context, ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	if hook := e.mux.beforePop; hook != nil {
		nodes := make([]string, len(ws))
		for i, w := range ws {
			nodes[i] = w.node
		}
		hook(nodes)
	}
	cmds := e.popPipeline(ctx, ws)
	if slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return redis.HasErrorPrefix(c.Err(), "NOSCRIPT") }) {
		// a Redis that lost its scripts (restarted, failed over): loaded
		// again, and the pops that did not run run again
		if err := e.scripts["pop"].Load(ctx, e.rdb).Err(); err == nil {
			var again []*waiter
			var at []int
			for i, c := range cmds {
				if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
					again, at = append(again, ws[i]), append(at, i)
				}
			}
			for j, c := range e.popPipeline(ctx, again) {
				cmds[at[j]] = c
			}
		}
	}
	for i, w := range ws {
		v, err := cmds[i].Result()
		if err == nil {
			var rest []any
			if _, rest, err = scriptReply("pop", v); err == nil {
				w.got <- poppedOf(rest)
				continue
			}
		}
		w.got <- popped{err: err}
	}
}

// popPipeline runs pop.lua for each waiter in one pipeline.
func (e *Engine) popPipeline(ctx context.Context, ws []*waiter) []*redis.Cmd {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ws))
	now := e.nowMS()
	for i, w := range ws {
		argv := append([]any{e.keyBase, "", now}, popRecord.append(nil, popArgs{Node: w.node, Max: w.max, Delivered: w.delivered, Token: e.token()})...)
		cmds[i] = e.scripts["pop"].EvalSha(ctx, pipe, e.keys, argv...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// subscribe is the mux: it follows the ready channel and hands out what
// the announced queues hold, and the report channel (reportWanted), until
// no Poll has waited for muxIdle.
func (e *Engine) subscribe(run int) {
	ctx := context.Background()
	lost := false // logged once per outage
	for {
		ps := e.rdb.Subscribe(ctx, e.key("ready"), e.key("report"))
		err := e.follow(ctx, ps, run, func() {
			if lost {
				lost = false
				e.log.Info().Msg("delivery subscription restored")
			}
		})
		e.unsubscribed(run)
		_ = ps.Close()
		if err == nil || e.muxDone(run) {
			return // idle: ended
		}
		if errors.Is(err, redis.ErrClosed) || errors.Is(err, net.ErrClosed) {
			// the client was closed (shutdown): the waiting Polls fail on
			// their own
			e.muxStop(run)
			return
		}
		if !lost {
			lost = true
			e.log.Warn().Err(err).Msg("delivery subscription lost; subscribing again")
		} else {
			e.log.Debug().Err(err).Msg("delivery subscription still down")
		}
		// whatever was announced meanwhile is found when the subscription
		// is confirmed again (every waiter is looked at)
		t := time.NewTimer(muxRetry)
		<-t.C
		if e.muxDone(run) {
			return
		}
	}
}

// follow reads ps until it fails (the error) or the mux ends for lack of
// waiters (nil); subscribed is called when the subscription is confirmed.
func (e *Engine) follow(ctx context.Context, ps *redis.PubSub, run int, subscribed func()) error {
	ready, reports := e.key("ready"), e.key("report")
	for {
		idle := e.mux.idle
		if idle <= 0 {
			idle = muxIdle
		}
		msg, err := ps.ReceiveTimeout(ctx, idle)
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				if e.muxDone(run) {
					return nil
				}
				continue
			}
			return err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == ready {
				subscribed()
				// announcements made before this are gone: look at every
				// waiting Poll's queue
				e.handOut(ctx, e.confirmed(run))
			}
		case *redis.Message:
			if m.Channel == reports {
				e.reportWanted(strings.Split(m.Payload, "\n"))
				continue
			}
			e.handOut(ctx, e.claim(strings.Split(m.Payload, "\n")))
		case *redis.Pong:
		}
	}
}

// muxStop ends subscriber run whatever waits (the next waiting Poll starts
// another).
func (e *Engine) muxStop(run int) {
	m := &e.mux
	m.ctl.Lock()
	if m.run == run {
		m.running.Store(false)
	}
	m.ctl.Unlock()
}

// muxDone reports whether subscriber run ends: when no Poll waits, or when
// a newer one took over.
func (e *Engine) muxDone(run int) bool {
	m := &e.mux
	m.ctl.Lock()
	defer m.ctl.Unlock()
	if m.run != run {
		return true
	}
	m.lockAll()
	defer m.unlockAll()
	if m.waiting() > 0 {
		return false
	}
	m.running.Store(false)
	return true
}

// state is the mux's subscription and waiting Polls, for tests.
func (m *mux) state() (subscribed, running bool, waiting int) {
	m.ctl.Lock()
	defer m.ctl.Unlock()
	m.lockAll()
	defer m.unlockAll()
	return m.subscribed, m.running.Load(), m.waiting()
}
