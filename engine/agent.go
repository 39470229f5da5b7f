package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/clock"
)

// Poll returns up to max attempts queued for node (rarely more, when the
// mux popped for it while it looked itself): popping them from the node's
// queue delivers them. When none is queued it waits up to wait
// (real time: this is network long-polling, not engine logic) for one, in
// memory: the Engine's delivery mux wakes it when a script queues for its
// node (see deliver.go), so a waiting Poll holds no Redis connection and a
// wake-up costs a share of one pipelined round trip. It returns with
// ctx.Err() when ctx ends first. An attempt popped after its deadline is
// not handed out: it is marked undelivered (undeliver.lua), so Step treats
// it as never delivered. Poll is PollWith an agent that says nothing of
// what it received.
func (e *Engine) Poll(ctx context.Context, node string, max int, wait time.Duration) ([]fleetwave.Attempt, error) {
	return e.PollWith(ctx, node, max, wait, 0)
}

// PollWith is Poll for an agent that holds the deliveries up to delivered
// (the highest it journalled): they are no longer kept for Resume. Each
// attempt popped is numbered, in the order handed out
// (fleetwave.Attempt.Delivery).
//
// A held poll spends its life blocked in here, under the HTTP server's and
// the API's frames: the Go runtime halves a blocked goroutine's stack only
// while less than a quarter of it is in use, so every frame on that path
// counts (at 100,000 held polls, each KiB of stack kept is 100 MB). The
// work before and after the wait is therefore in functions of their own
// (look, settle), off the stack while it waits in await.
func (e *Engine) PollWith(ctx context.Context, node string, max int, wait time.Duration, delivered int64) ([]fleetwave.Attempt, error) {
	if max <= 0 {
		max = 1
	}
	var wall clock.Real
	end := wall.Now().Add(wait)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var p popped
		w := e.look(ctx, node, max, wait, delivered, &p)
		if w != nil && len(p.raw) == 0 && p.err == nil && !p.woken && w.await(ctx, end.Sub(wall.Now()), &p) {
			w = nil // claimed: p is what the mux popped for it
		}
		if out, done, err := e.settle(ctx, node, w, &p, wait, end); done {
			return out, err
		}
	}
}

// look registers a waiter for node when the poll may wait (before looking:
// an attempt queued after the look is announced to it), then pops node's
// queue into p itself unless the mux says it has missed nothing.
//
// A look also asks whether an item of node awaits its full report (its
// attempt's result lost or late): the announcement of such nodes on
// "fw{p}:report" reaches only the Engines subscribed when it is made, and
// a look comes exactly when this one may have missed it (the first poll
// of the node since the subscription was confirmed). The callback of
// WithReportWanted then learns node, and the poll ends at once, as if
// woken (once a minute at most: askNow), so its agent is asked for the
// report now.
func (e *Engine) look(ctx context.Context, node string, max int, wait time.Duration, delivered int64, p *popped) *waiter {
	var w *waiter
	look := true
	if wait > 0 {
		w = &waiter{node: node, max: max, delivered: delivered, got: make(chan popped, 1)}
		look = e.register(w)
	}
	if look {
		got, err := e.pop(ctx, node, max, delivered)
		*p = got
		p.err = err
		if got.report && e.wanted != nil {
			e.wanted([]string{node})
			p.woken = e.askNow(node)
		}
	}
	return w
}

// await waits up to d for what the mux pops for w, into p; false when d
// or ctx ended first.
func (w *waiter) await(ctx context.Context, d time.Duration, p *popped) bool {
	t := time.NewTimer(d)
	claimed := false
	select {
	case *p = <-w.got:
		claimed = true
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	return claimed
}

// settle ends one round of PollWith: w, when still registered, leaves the
// mux (taking what it was claimed for meanwhile), then what was popped is
// delivered. done says whether PollWith returns out and err, or looks
// again.
func (e *Engine) settle(ctx context.Context, node string, w *waiter, p *popped, wait time.Duration, end time.Time) (out []fleetwave.Attempt, done bool, err error) {
	var got []popped
	if len(p.raw) > 0 {
		got = append(got, *p)
	}
	if w != nil && !e.unregister(w) {
		// claimed meanwhile: what its pop takes is ours (rarely, with
		// what the look took, more than max)
		if q := <-w.got; len(q.raw) > 0 {
			got = append(got, q)
		}
	}
	if len(got) > 0 {
		// popped is delivered: hand them out even when ctx ended
		// meanwhile, or they would expire as lost
		if out := e.deliver(context.WithoutCancel(ctx), node, got); len(out) > 0 {
			return out, true, nil
		}
	}
	if p.err != nil {
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
		return nil, true, fmt.Errorf("poll node %s: %w", node, p.err)
	}
	var wall clock.Real
	if p.woken || wait <= 0 || !wall.Now().Before(end) {
		return nil, true, ctx.Err()
	}
	return nil, false, nil
}

// pop takes up to max attempts of node's queue and numbers the delivery
// (pop.lua).
func (e *Engine) pop(ctx context.Context, node string, max int, delivered int64) (popped, error) {
	release, err := e.agentCall(ctx)
	if err != nil {
		return popped{}, err
	}
	defer release()
	st, v, err := e.run(ctx, "pop", "", e.nowMS(), popRecord.append(nil, popArgs{Node: node, Max: max, Delivered: delivered, Token: e.token(), Ask: e.wanted != nil})...)
	if err != nil {
		return popped{}, err
	}
	p := poppedOf(v)
	p.report = st == "report"
	return p, nil
}

// token names one pop, creation or group of results: unique to this
// Engine (whatever other hubs do), and the same when the Redis client
// sends that script again after its answer was late or lost (pop.lua,
// create_rollout.lua and complete.lua then answer what the first sending
// did).
func (e *Engine) token() string {
	return e.tokenID + "." + strconv.FormatUint(e.tokens.Add(1), 36)
}

// poppedOf reads pop.lua's reply past its status word: the first entry's
// delivery number, then the entries.
func poppedOf(v []any) popped {
	if len(v) < 2 {
		return popped{}
	}
	p := popped{first: asInt(v[0]), raw: make([]string, 0, len(v)-1)}
	for _, x := range v[1:] {
		p.raw = append(p.raw, asString(x))
	}
	return p
}

// Resume is for the poll of an agent whose previous poll failed: the
// attempts delivered to node after delivered, the highest delivery its
// agent journalled, never reached it (a hub that died between popping
// them and answering, or an answer cut on its way). They are marked never
// delivered, so the next Step retries them instead of waiting out their
// timeouts (then counting them lost). It returns their ids. It cannot
// fail: what it cannot mark waits for its deadline, as it did before
// agents said what they received.
//
// The deliveries are read, marked, and only then dropped from what is
// kept, each by its id: every step is safe to send twice (the Redis
// client sends a command again when its reply is late), and a mark that
// fails leaves them for the agent's next Resume. Read and dropped in one
// transaction, a transaction sent twice answered nothing the second time,
// and those attempts waited for their deadlines.
func (e *Engine) Resume(ctx context.Context, node string, delivered int64) (ids []string) {
	key := e.key("dlv", node)
	above := "(" + strconv.FormatInt(delivered, 10)
	release, err := e.agentCall(ctx)
	if err == nil {
		ids, err = e.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: above, Max: "+inf"}).Result()
		release() // before NotHanded takes one of its own
	}
	if err != nil {
		e.log.Warn().Err(err).Str("node", node).Int64("delivered", delivered).
			Msg("deliveries the agent did not receive not looked up: left to their deadlines")
		return nil
	}
	if len(ids) == 0 {
		return nil
	}
	e.log.Warn().Str("node", node).Int64("delivered", delivered).Strs("attempts", ids).
		Msg("attempts delivered that the agent never received: to be sent again")
	ctx = context.WithoutCancel(ctx)
	if err := e.NotHanded(ctx, node, ids, false); err != nil {
		e.log.Warn().Err(err).Str("node", node).Msg("attempts the agent never received: kept for its next resume, else left to their deadlines")
		return nil
	}
	// these only: a delivery popped since the read stays
	if release, err = e.agentCall(ctx); err == nil {
		err = e.rdb.ZRem(ctx, key, anys(ids)...).Err()
		release()
	}
	if err != nil {
		e.log.Debug().Err(err).Str("node", node).Msg("deliveries marked not dropped: a later resume marks them again, to no effect")
	}
	return ids
}

// deliver decodes popped queue entries into attempts, leaving out (and
// marking undelivered) those whose deadline passed. It cannot fail: an
// entry it cannot hand out is left to Step, which finds its attempt
// delivered without a result (ambiguous) unless it was marked undelivered.
func (e *Engine) deliver(ctx context.Context, node string, got []popped) []fleetwave.Attempt {
	now := e.nowMS()
	var out []fleetwave.Attempt
	for _, p := range got {
		for i, v := range p.raw {
			a, err := decodeQueued(v)
			if err != nil {
				// its size and leading id characters, never its payload
				e.log.Error().Err(err).Str("node", node).Int("bytes", len(v)).Str("head", idHead(v)).Msg("queued attempt unreadable")
				continue
			}
			if a.Deadline.UnixMilli() <= now {
				if _, _, err := e.run(ctx, "undeliver", "", now, undeliverRecord.append(nil, undeliverArgs{Attempt: a.ID, Unsent: 1})...); err != nil {
					e.log.Warn().Err(err).Str("node", node).Str("attempt", a.ID).
						Msg("attempt past its deadline not delivered, nor marked undelivered: it will count as lost")
					continue
				}
				e.log.Debug().Str("node", node).Str("attempt", a.ID).Msg("attempt past its deadline not delivered")
				continue
			}
			a.Delivery = p.first + int64(i) // each entry has its number, even one not handed out
			e.log.Debug().Str("node", node).Str("attempt", a.ID).Str("item", a.Item).
				Str("rollout", a.Rollout).Int64("delivery", a.Delivery).Msg("attempt delivered")
			out = append(out, a)
		}
	}
	return out
}

// NotHanded says that attempts a Poll of node returned did not reach its
// agent: its client was gone before the answer was written (written
// false: the agent never had them), or the answer's write failed (written
// true: it may have them). Their deadlines move to now, so the next Step
// closes them instead of waiting out their timeouts: one never sent counts
// as never delivered (retried), one perhaps sent as lost (the item waits
// for the node's report, which says whether it ran). An attempt closed
// meanwhile (its result came) is left as it is.
func (e *Engine) NotHanded(ctx context.Context, node string, ids []string, written bool) error {
	unsent := 1
	if written {
		unsent = 0
	}
	release, err := e.agentCall(ctx)
	if err != nil {
		return err
	}
	defer release()
	now := e.nowMS()
	var errs []error
	for _, id := range ids {
		if _, _, err := e.run(ctx, "undeliver", "", now, undeliverRecord.append(nil, undeliverArgs{Attempt: id, Unsent: unsent, Expire: 1})...); err != nil {
			errs = append(errs, fmt.Errorf("attempt %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// agentCall takes a slot for a call to Redis on an agent's behalf
// (WithAgentCalls), waiting for one while ctx lasts; release gives it
// back. A caller holds at most one slot at a time.
func (e *Engine) agentCall(ctx context.Context) (release func(), err error) {
	if e.agentSlots == nil {
		return func() {}, nil
	}
	release = func() { <-e.agentSlots }
	select {
	case e.agentSlots <- struct{}{}:
		return release, nil
	default: // all taken: the wait is counted
	}
	start := time.Now()
	defer func() {
		e.agentWaits.Add(1)
		e.agentWaited.Add(int64(time.Since(start)))
	}()
	select {
	case e.agentSlots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// AgentCallWaits returns how many calls made on agents' behalf waited
// for a slot (WithAgentCalls), and their waits summed.
func (e *Engine) AgentCallWaits() (int64, time.Duration) {
	return e.agentWaits.Load(), time.Duration(e.agentWaited.Load())
}

// Complete applies an agent's result for one of its attempts:
//   - success: the item is completed and res.Instance (when set) becomes the
//     observed instance of node/block;
//   - transient: retrying with retry_after = now + backoff*2^retry_count
//     (with jitter), or failed once retry_count reached the rollout's
//     max_retries;
//   - permanent: blocked (reason "permanent_failure"; the output's tail is
//     kept on the item);
//   - lost: the agent was stopped while it ran the attempt (it journals
//     every attempt before running it, and sends lost for one still
//     "started" at its next start): a one-shot action is blocked (reason
//     ambiguous_one_shot: it never runs twice), any other is retried as
//     after a transient failure.
//
// Errors: ErrUnknownAttempt, ErrWrongNode (the attempt of another node),
// ErrStaleAttempt (not the item's current attempt, item no longer in
// progress, or another fence), ErrInvalidResult; and ErrResultRecorded,
// which is no failure: this result was recorded before (sent again after
// its answer was lost), nothing changed, and the caller answers as the
// first time. The rollout completes when all its items are terminal.
// When the result leaves its lane's current wave with nothing in flight,
// the same script starts the lane's next wave, as Step would start it,
// under the fence of the current lease (not when the lease expired, nor
// when the wave would hold an item bound by maintenance windows: Step
// decides those).
//
// Results are committed in groups: concurrent Completes share one script
// run (complete.lua, up to completeBatch results, each checked on its own
// as if alone), so a wave's results cost a few scripts, not one each. A
// Complete that finds no group running runs one at once; the others wait
// for it and the next group takes everything queued meanwhile. A Complete
// returns once its result is committed (or failed), whatever its context
// says: the group runs without it.
func (e *Engine) Complete(ctx context.Context, node string, res fleetwave.AttemptResult) error {
	switch res.Class {
	case fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent, fleetwave.ResultLost:
	default:
		return fmt.Errorf("class %q: %w", res.Class, ErrInvalidResult)
	}
	args, err := resultArgs(node, res, e.jitter())
	if err != nil {
		return err
	}
	c := &completion{args: args, done: make(chan struct{}, 1)}
	e.cq.mu.Lock()
	e.cq.queue = append(e.cq.queue, c)
	lead := !e.cq.running
	e.cq.running = true
	e.cq.mu.Unlock()
	if !lead {
		<-c.done
		lead = c.lead
	}
	if lead {
		e.leadCompletions(context.WithoutCancel(ctx), c)
	}
	if c.err != nil {
		return c.err
	}
	ev := e.log.Info()
	if res.Class != fleetwave.ResultSuccess {
		ev = e.log.Warn()
	}
	ev.Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).
		Int("exit_code", res.ExitCode).Msg("attempt finished")
	return nil
}

// MaxOutputTail bounds the output tail an item keeps of its last failed
// attempt (the agent sends a redacted tail; the engine keeps its end).
const MaxOutputTail = 2048

// outputTail is what a result leaves on its item: the end of a failed
// attempt's output, at most MaxOutputTail bytes cut at a rune boundary;
// nothing for a success.
func outputTail(res fleetwave.AttemptResult) string {
	if res.Class == fleetwave.ResultSuccess {
		return ""
	}
	out := res.Output
	if len(out) > MaxOutputTail {
		out = out[len(out)-MaxOutputTail:]
		for i := 0; i < len(out) && i < 4 && !utf8.RuneStart(out[i]); i++ {
			out = out[1:]
		}
	}
	return out
}

// completeBatch bounds the results of one complete script.
const completeBatch = 256

// completion is one Complete in the group-commit queue.
type completion struct {
	args resultArg // the result as complete.lua reads it (resultArgs)
	err  error
	lead bool          // set before done is signalled: run the queue next
	done chan struct{} // capacity 1: committed (or failed), or lead
	ran  bool          // committed or failed (the leader's own)
}

// completions is the group-commit queue of Complete: running says a
// Complete leads it (runs groups); the others wait on their done.
type completions struct {
	mu      sync.Mutex
	queue   []*completion
	running bool
}

// leadCompletions runs groups of queued results, oldest first, until own
// (the leader's result) ran, then hands the lead to the oldest waiting
// Complete, or ends it when none waits.
func (e *Engine) leadCompletions(ctx context.Context, own *completion) {
	for !own.ran {
		e.cq.mu.Lock()
		n := min(len(e.cq.queue), completeBatch)
		batch := append([]*completion(nil), e.cq.queue[:n]...)
		e.cq.queue = e.cq.queue[n:]
		e.cq.mu.Unlock()
		e.runCompletions(ctx, batch)
		for _, c := range batch {
			c.ran = true
			if c != own {
				c.done <- struct{}{}
			}
		}
	}
	e.cq.mu.Lock()
	if len(e.cq.queue) > 0 {
		next := e.cq.queue[0]
		next.lead = true
		next.done <- struct{}{}
	} else {
		e.cq.running = false
	}
	e.cq.mu.Unlock()
}

// runCompletions commits one group with complete.lua and sets each
// result's error.
func (e *Engine) runCompletions(ctx context.Context, batch []*completion) {
	args := completeHeadRecord.append(make([]any, 0, len(completeHeadRecord.names)+len(resultRecord.names)*len(batch)),
		completeHead{BackoffBase: e.base.Milliseconds(), BackoffMax: e.max.Milliseconds(), Grace: e.grace.Milliseconds(),
			DefTimeout: DefaultActionTimeout.Milliseconds(), Limit: batchLimit, Results: len(batch), Token: e.token()})
	for _, c := range batch {
		args = resultRecord.append(args, c.args)
	}
	status, rest, err := e.run(ctx, "complete", "", e.nowMS(), args...)
	if err == nil && (status != "ok" || len(rest) < 4) {
		err = fmt.Errorf("complete: unexpected reply %q", status)
	}
	var statuses []any
	if err == nil {
		statuses, _ = rest[3].([]any)
		if len(statuses) != len(batch) {
			err = fmt.Errorf("complete: %d statuses for %d results", len(statuses), len(batch))
		}
	}
	if err != nil {
		var script redis.Error
		if errors.As(err, &script) && len(batch) > 1 {
			// the script failed outside a result (each result is guarded
			// on its own): what it applied stays, so a result already
			// committed comes back recorded; the others are committed alone
			e.log.Error().Err(err).Int("results", len(batch)).Msg("complete: group failed; committing its results one by one")
			for _, c := range batch {
				e.runCompletions(ctx, []*completion{c})
			}
			return
		}
		for _, c := range batch {
			c.err = err
		}
		return
	}
	e.logEvents(rest[2])
	for i, c := range batch {
		aid := c.args.Attempt
		switch asString(statuses[i]) {
		case "ok":
		case "unknown_attempt":
			c.err = fmt.Errorf("attempt %s: %w", aid, ErrUnknownAttempt)
		case "wrong_node":
			c.err = fmt.Errorf("attempt %s: %w", aid, ErrWrongNode)
		case "stale_attempt":
			c.err = fmt.Errorf("attempt %s: %w", aid, ErrStaleAttempt)
		case "recorded":
			c.err = fmt.Errorf("attempt %s: %w", aid, ErrResultRecorded)
		default:
			st := asString(statuses[i])
			if msg, ok := strings.CutPrefix(st, "error: "); ok {
				c.err = fmt.Errorf("complete attempt %s: %s", aid, msg)
				e.log.Error().Str("attempt", aid).Str("error", msg).Msg("result failed in the complete script")
			} else {
				c.err = fmt.Errorf("complete: unexpected status %q", st)
			}
		}
	}
}

// Report stores r as node r.Node's observation and resolves its ambiguous
// items, and its successes whose own result did not show their target
// (reason report_mismatch). When r was sent after the attempt's dispatch
// and shows the instance in effect (the health gate: generation at least
// the item's, its target version, its desired state, its config hash; for
// desired state absent, no instance) the item is completed. Otherwise an
// ambiguous item:
//   - whose agent reported success (its result disagreed) is blocked with
//     reason report_mismatch: never run again blindly;
//   - of a one-shot action whose attempt the agent journalled (r.Attempts)
//     is blocked with reason ambiguous_one_shot;
//   - of a one-shot action the report does not journal waits for a report
//     sent after the item became ambiguous (an attempt in transit before
//     may still reach the agent; one past its deadline is refused); then
//     it never ran, and becomes pending again;
//   - otherwise becomes pending again for a new attempt.
//
// A report sent before the dispatch leaves the item as it is. ReceivedAt is
// set from the clock when zero.
func (e *Engine) Report(ctx context.Context, r fleetwave.Report) error {
	if r.Node == "" {
		return fmt.Errorf("report without node")
	}
	now := e.nowMS()
	if r.ReceivedAt.IsZero() {
		r.ReceivedAt = msTime(now)
	}
	head := r
	head.Instances = nil
	hb, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	args := reportHeadRecord.append(make([]any, 0, len(reportHeadRecord.names)+len(instanceRecord.names)*len(r.Instances)),
		reportHead{Node: r.Node, Report: string(hb), SentAt: r.SentAt.UnixMilli(), Instances: len(r.Instances)})
	for _, in := range r.Instances {
		ib, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode instance %s: %w", in.Block, err)
		}
		args = instanceRecord.append(args, instanceArg{Block: in.Block, Generation: in.Generation,
			ConfigHash: in.ConfigHash, State: string(in.State), Version: in.Version, JSON: string(ib)})
	}
	release, err := e.agentCall(ctx)
	if err != nil {
		return err
	}
	status, rest, err := e.run(ctx, "report", "", now, args...)
	release()
	if err != nil {
		return err
	}
	if status != "ok" {
		return fmt.Errorf("report: unexpected status %q", status)
	}
	if n := asInt(rest[0]); n > 0 {
		e.log.Info().Str("node", r.Node).Int64("items", n).Msg("ambiguous items resolved")
	}
	return nil
}

// permanentReason is the item reason of a permanent result: the agent's
// when it is one the engine knows (fleetwave.PermanentReasons), else
// permanent_failure.
func permanentReason(res fleetwave.AttemptResult) string {
	if res.Class == fleetwave.ResultPermanent && slices.Contains(fleetwave.PermanentReasons, res.Reason) {
		return res.Reason
	}
	return "permanent_failure"
}

// resultArgs is one result as complete.lua reads it: the observed
// instance is left empty (generation -1) when the result carries none or is
// not a success; the output tail and the permanent reason are outputTail's
// and permanentReason's.
func resultArgs(node string, res fleetwave.AttemptResult, jitter float64) (resultArg, error) {
	a := resultArg{Node: node, Attempt: res.AttemptID, Fence: fenceArg(res.Fence), Class: string(res.Class),
		ExitCode: res.ExitCode, Jitter: jitter, InstanceGen: -1, Output: outputTail(res), Reason: permanentReason(res)}
	if res.Class == fleetwave.ResultSuccess && res.Instance != nil {
		b, err := json.Marshal(res.Instance)
		if err != nil {
			return resultArg{}, fmt.Errorf("encode instance: %w", err)
		}
		a.Instance, a.InstanceAt, a.InstanceGen = string(b), max(res.Instance.UpdatedAt.UnixMilli(), 0), res.Instance.Generation
		a.InstanceVer, a.InstanceStat = res.Instance.Version, string(res.Instance.State)
	}
	return a, nil
}

// idHead returns the leading characters of v that an attempt id may hold
// (at most 80): enough to tell what an unreadable queue entry is, without
// the attempt's payload.
func idHead(v string) string {
	n := 0
	for n < len(v) && n < 80 {
		c := v[n]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			break
		}
		n++
	}
	return v[:n]
}
