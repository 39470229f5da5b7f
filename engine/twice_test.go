package engine

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// The hub's Redis clients send a command again when its reply does not
// come within their read timeout (go-redis retries a timeout, up to
// MaxRetries), and a script is no exception: on a loaded Redis a script
// that ran, but whose reply came late, runs a second time, and the caller
// gets the second reply only. Callers do the same at their level (an agent
// posts a result again after a lost answer). Every script must therefore
// keep every invariant when it is sent twice with its first reply lost.

// sentTwice is a go-redis hook that sends one script in three twice and
// drops the first reply, as the client does after a read timeout. Which
// ones are drawn in the order they are sent, and the Engine's delivery
// goroutine sends some of them: a run's path differs from run to run.
type sentTwice struct {
	mu       sync.Mutex
	rnd      *rand.Rand
	every    bool // every script, not one in three
	commands bool // every command (and pipeline), not only scripts (with every)
	n        int  // sent twice (scripts, or any command with commands)
}

// again says whether to send this script twice.
func (h *sentTwice) again() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.every || h.rnd.Intn(3) == 0 {
		h.n++
		return true
	}
	return false
}

// sendTwice makes rdb send one script in three twice, drawn from seed.
func sendTwice(rdb redis.UniversalClient, seed int64) *sentTwice {
	h := &sentTwice{rnd: rand.New(rand.NewSource(seed))}
	rdb.AddHook(h)
	return h
}

// check fails a run that sent no script twice and logs how many it sent.
func (h *sentTwice) check(t *testing.T) {
	t.Helper()
	if h.n == 0 {
		t.Fatal("no script was sent twice")
	}
	t.Logf("%d scripts sent twice", h.n)
}

// resent says whether cmd is one the hook may send twice.
func (h *sentTwice) resent(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return h.commands || n == "evalsha" || n == "eval"
}

func (h *sentTwice) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentTwice) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.resent(cmd) && h.again() {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook sends a pipeline holding a script twice, whole, as
// the client sends a pipeline again.
func (h *sentTwice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.resent(c) {
				if h.again() {
					if err := next(ctx, cmds); err != nil {
						return err
					}
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestRandomizedScriptsSentTwice is TestRandomized with scripts sent
// twice: the same invariants after every operation (in flight within
// max_concurrent, one active item per instance, counters exact, every
// item where its status says), a replayed result never applied twice,
// and every rollout finished after the drain. A group of results sent
// again answers each result as its first sending did (never recorded, for
// a result the run sent once); a creation whose answer was lost answers
// the second time with the items the first created.
func TestRandomizedScriptsSentTwice(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		hook := sendTwice(rdb, 1)
		randomRun(t, rdb, 1, 200, true)
		hook.check(t)
	})
}

// TestRandomizedLeadersScriptsSentTwice is TestRandomizedLeaders with
// scripts sent twice, campaigns and renewals included: a call under a
// deposed fence is refused, every attempt carries the fence of the
// leader whose Step (or result) made it, and an ambiguous item leaves
// that state only through a report of its node.
func TestRandomizedLeadersScriptsSentTwice(t *testing.T) {
	c := redistest.Start(t).Client(t)
	hook := sendTwice(c, 4)
	leaderRun(t, c, 4, 300, true)
	hook.check(t)
}

// namedCreated is for a run whose scripts were sent twice: every item in
// a rollout was named by a creation's answer, dropped first sendings
// included (a creation sent again answers what the first created; before,
// it answered that it created nothing). It returns every rollout's id.
func namedCreated(t *testing.T, h *harness, created map[string]bool) []string {
	t.Helper()
	ids := rolloutIDs(t, h)
	held := map[string]bool{}
	for _, id := range ids {
		_, items := h.rollout(id)
		for _, it := range items {
			held[it.ID] = true
			if !created[it.ID] {
				t.Fatalf("item %s is in rollout %s, and no creation's answer named it", it.ID, id)
			}
		}
	}
	for id := range created {
		if !held[id] {
			t.Fatalf("item %s was named created and is in no rollout", id)
		}
	}
	return ids
}

// rolloutIDs lists every rollout's id, in the engine's order.
func rolloutIDs(t *testing.T, h *harness) []string {
	t.Helper()
	rs, err := h.e.Rollouts(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(rs))
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestAPopSentTwiceAnswersWhatItPopped: a poll's pop whose answer was
// lost (the client sent it again) answers the second time with the
// attempts the first popped, numbered as then, whether the poll looked
// itself or waited for the mux; before, the second found the queue empty
// and the attempts waited for their deadlines, then for their nodes'
// reports. A later pop finds nothing more.
func TestAPopSentTwiceAnswersWhatItPopped(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, items := h.create(spec("web", 2, "web", 1, 2, 3))
		rdb.AddHook(&sentTwice{every: true})
		// n2 waits for the mux: its pop goes in the mux's pipeline
		waited := make(chan []fleetwave.Attempt, 1)
		go func() {
			as, err := h.e.PollWith(h.ctx, "n2", 10, 20*time.Second, 0)
			if err != nil {
				t.Error(err)
			}
			waited <- as
		}()
		for _, _, n := h.e.mux.state(); n == 0; _, _, n = h.e.mux.state() {
			time.Sleep(time.Millisecond)
		}
		h.step()
		as, err := h.e.PollWith(h.ctx, "n1", 10, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 || as[0].Item != items[0] || as[0].Delivery != 1 {
			t.Fatalf("n1's poll, its pop sent twice: %+v, want %s in delivery 1", as, items[0])
		}
		if as := <-waited; len(as) != 1 || as[0].Item != items[1] || as[0].Delivery != 1 {
			t.Fatalf("n2's waiting poll, its pop sent twice: %+v, want %s in delivery 1", as, items[1])
		}
		for _, n := range []string{"n1", "n2"} {
			if as, err := h.e.PollWith(h.ctx, n, 10, 0, 1); err != nil || len(as) != 0 {
				t.Fatalf("%s's next poll: %+v %v, want nothing more", n, as, err)
			}
		}
		h.check()
	})
}

// TestAPopSentAgainAfterMoreWasQueuedAnswersWhatItPopped: the Redis client
// sends a pop again after another attempt for its node was queued. The
// second sending answers the attempt the first popped, numbered as then,
// and leaves the newer one queued for the next poll; before, it popped the
// newer one, and the first's attempt waited for its deadline.
func TestAPopSentAgainAfterMoreWasQueuedAnswersWhatItPopped(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		_, web := h.create(spec("web", 1, "web", 1, 1, 3))
		h.step()
		pop := func(token string) popped {
			t.Helper()
			_, v, err := h.e.run(h.ctx, "pop", "", h.e.nowMS(), popRecord.append(nil, popArgs{Node: "n1", Max: 10, Token: token})...)
			if err != nil {
				t.Fatal(err)
			}
			return poppedOf(v)
		}
		first := pop("lost.1")
		if len(first.raw) != 1 || first.first != 1 {
			t.Fatalf("the first sending popped %d entries from delivery %d, want web's one in delivery 1", len(first.raw), first.first)
		}
		_, db := h.create(spec("db", 1, "db", 1, 1, 3))
		h.step()
		again := pop("lost.1")
		if again.first != first.first || !slices.Equal(again.raw, first.raw) {
			t.Fatalf("the pop sent again answered %d entries from delivery %d, want the first sending's (web's item %s in delivery 1)", len(again.raw), again.first, web[0])
		}
		as, err := h.e.PollWith(h.ctx, "n1", 10, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 || as[0].Item != db[0] || as[0].Delivery != 2 {
			t.Fatalf("the next poll: %+v, want db's item %s in delivery 2", as, db[0])
		}
		h.check()
	})
}

// TestACreationSentTwiceAnswersWhatItCreated: every creation's script is
// sent twice, the first reply dropped. The answer names every item the
// first sending created, in one script and in chunks; before, the second
// sending found them there and answered that it created none. The same
// spec created again (a new creation) creates nothing.
func TestACreationSentTwiceAnswersWhatItCreated(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		hook := &sentTwice{every: true}
		rdb.AddHook(hook)
		for _, n := range []int{3, CreateChunk + 2} {
			s := spec(fmt.Sprintf("web%d", n), n, fmt.Sprintf("web%d", n), 1, n, 3)
			res, err := h.e.CreateRolloutResult(h.ctx, h.fence, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutcomeCreated || res.ID == "" || len(res.Items) != n || len(res.Created) != n {
				t.Fatalf("%d items, each creation sent twice: outcome %q, rollout %q, %d items named, want created, the rollout and all %d",
					n, res.Outcome, res.ID, len(res.Items), n)
			}
			_, items := h.rollout(res.ID)
			if len(items) != n {
				t.Fatalf("rollout %s holds %d items, want %d", res.ID, len(items), n)
			}
			for i, id := range res.Items {
				if items[i].ID != id || res.Created[i] != i {
					t.Fatalf("answer's item %d: %s of spec %d, want %s of spec %d", i, id, res.Created[i], items[i].ID, i)
				}
			}
			again, err := h.e.CreateRolloutResult(h.ctx, h.fence, s)
			if err != nil {
				t.Fatal(err)
			}
			if again.Outcome != OutcomeNone || len(again.Items) != 0 || again.Rollout != res.ID {
				t.Fatalf("the same spec created again: outcome %q, %d items in %q, want none in %s", again.Outcome, len(again.Items), again.Rollout, res.ID)
			}
		}
		hook.check(t)
		h.check()
	})
}

// TestAResumeSentTwiceStillMarks: an agent says its last poll failed, and
// every command of the Resume that follows is sent twice. The attempt it
// never received is still found and marked never delivered, so the next
// Step sends it again; read and dropped in one transaction, the second
// sending found nothing, and the attempt waited for its deadline.
func TestAResumeSentTwiceStillMarks(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb, WithBackoff(time.Second, time.Second))
		_, items := h.create(spec("web", 1, "web", 1, 1, 3))
		h.step()
		lost := h.poll("n1") // the answer never reaches the agent
		if len(lost) != 1 {
			t.Fatalf("first poll: %+v, want one attempt", lost)
		}
		rdb.AddHook(&sentTwice{every: true, commands: true})
		if ids := h.e.Resume(h.ctx, "n1", 0); len(ids) != 1 || ids[0] != lost[0].ID {
			t.Fatalf("resumed %v, want %s", ids, lost[0].ID)
		}
		h.clk.Advance(time.Millisecond)
		h.step() // sent twice too: its answer is the second sending's
		if it := h.item(items[0]); it.Status != fleetwave.ItemRetrying {
			t.Fatalf("item %s %q, want retrying (never delivered)", it.Status, it.Reason)
		}
		if n := rdb.ZCard(h.ctx, h.e.key("dlv", "n1")).Val(); n != 0 {
			t.Fatalf("%d deliveries kept after they were marked", n)
		}
		if ids := h.e.Resume(h.ctx, "n1", 0); len(ids) != 0 {
			t.Fatalf("resumed again: %v, want nothing", ids)
		}
	})
}
