package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
	"github.com/fleetwave/fleetwave/schema"
)

// TestAPushIsPlannedBesideASlowerOne: the plan of a push whose creation
// takes long (a rollout of 100,000 items: 25 s) does not hold the next
// push's: BRC b's rollout is created while a's creation waits, on a real
// engine and mirror.
func TestAPushIsPlannedBesideASlowerOne(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/web.cue": "kind: \"block\"\nname: \"web\"\nactions: {\n\tinstall: command: \"true\"\n\tupgrade: command: \"true\"\n}\n",
		"nodes/n1.cue":   "kind: \"node\"\nname: \"n1\"\n",
		"nodes/n2.cue":   "kind: \"node\"\nname: \"n2\"\n",
	})
	h, clk, _ := statusHub(t, url)
	h.sent = sentItems{ttl: time.Minute}
	h.pushSlots, h.pushNow = make(chan struct{}, pushPlans), make(chan struct{}, 1)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if err := h.eng.Report(ctx, fleetwave.Report{Node: n, SentAt: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	load := func() { applyHead(t, h, v) }
	brc := func(name, node string) map[string]string {
		return map[string]string{"brc/" + name + ".cue": "kind: \"trigger\"\nname: \"" + name + "\"\nblock_name: \"web\"\ntarget_version: \"1\"\nnodes: [\"" + node + "\"]\n"}
	}
	load()
	h.pushed = h.snapshot

	release, held := make(chan struct{}), make(chan struct{})
	h.beforeCreate = func(spec fleetwave.RolloutSpec) {
		if spec.Source.Object.Name() == "a" {
			close(held)
			<-release
		}
	}
	released := false
	loopCtx, stop := context.WithCancel(ctx)
	looped := make(chan struct{})
	go func() { // the push loop, as Run runs it
		h.loop(loopCtx, time.Hour, h.pushNow, h.pushStep)
		close(looped)
	}()
	defer func() {
		if !released {
			close(release)
		}
		stop()
		<-looped
		h.pushing.Wait()
	}()
	gittest.Push(t, url, brc("a", "n1"), nil, "Roll out a")
	load()
	aID := fmt.Sprintf("a-g%d", h.snapshot.Generation("trigger/a"))
	h.kick(h.pushNow)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("a's rollout was never handed to the engine")
	}
	gittest.Push(t, url, brc("b", "n2"), nil, "Roll out b")
	load()
	bID := fmt.Sprintf("b-g%d", h.snapshot.Generation("trigger/b"))
	h.kick(h.pushNow)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := h.eng.RolloutRecord(ctx, bID); err == nil && r.ID == bID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's rollout waited for a's creation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	released = true
	h.pushing.Wait()
	if r, err := h.eng.RolloutRecord(ctx, aID); err != nil || r.ID != aID {
		t.Fatalf("a's rollout once released: %+v, %v", r, err)
	}
}

// TestAPushPlanTakesTwoRoundTrips: while a wave's scripts run, Redis
// answers each round trip of a push's plan after them (tens of ms each at
// 100,000 nodes): the plan of a one-node BRC's new version reads its node's
// observation in one and creates its rollout in another, and reads the approvals only
// where the hub requires them. On a real redis-server and mirror.
func TestAPushPlanTakesTwoRoundTrips(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/web.cue": "kind: \"block\"\nname: \"web\"\nactions: {\n\tinstall: command: \"true\"\n\tupgrade: command: \"true\"\n}\n",
		"nodes/n1.cue":   "kind: \"node\"\nname: \"n1\"\n",
	})
	trips := &redistest.Trips{}
	h, clk, fence := statusHub(t, url, trips)
	h.sent = sentItems{ttl: time.Minute}
	e, ctx := h.eng, context.Background()
	if err := e.Report(ctx, fleetwave.Report{Node: "n1", SentAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	var snap *fleetwave.Snapshot
	// plan pushes BRC name at version and returns the round trips of its
	// plan, and its rollout's id
	plan := func(name, version string) (int64, string) {
		t.Helper()
		gittest.Push(t, url, map[string]string{"brc/" + name + ".cue": "kind: \"trigger\"\nname: \"" + name +
			"\"\nblock_name: \"web\"\ntarget_version: \"" + version + "\"\nnodes: [\"n1\"]\n"}, nil, "Roll out "+name)
		head, _, err := h.repo.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prev := snap
		var verr *fleetwave.ValidationError
		if snap, verr, err = loadAt(ctx, h.repo, wholeLoad(v), head, nil); err != nil || verr != nil {
			t.Fatalf("load %s: %v %v", head, err, verr)
		}
		changed := changedTriggers(prev, snap)
		if !changed[name] {
			t.Fatalf("the push of %s changed %v", name, changed)
		}
		before := trips.N()
		h.planning.RLock()
		h.planPush(ctx, fence, snap, changed, 0)
		return trips.N() - before, fmt.Sprintf("%s-g%d", name, snap.Generation(fleetwave.Key(fleetwave.KindTrigger, name)))
	}
	head, _, err := h.repo.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap, _, err = loadAt(ctx, h.repo, wholeLoad(v), head, nil); err != nil {
		t.Fatal(err)
	}
	plan("b", "1") // the scripts loaded, the commit's author read once
	n, id := plan("b", "2")
	if n != 2 {
		t.Errorf("the push's plan took %d round trips, want 2 (the observations, the creation)", n)
	}
	if r, err := e.RolloutRecord(ctx, id); err != nil || r.ID != id {
		t.Fatalf("rollout %s: %+v, %v", id, r, err)
	}
	// where approvals are required, the plan reads them: one more
	h.cfg.Approval.Required = true
	if n, _ := plan("b", "3"); n != 3 {
		t.Errorf("with approvals required the push's plan took %d round trips, want 3", n)
	}
}

// TestAReconcileStartsAfterThePushPlans: a reconcile waits for the push
// plans reading and planning (both would plan the push's BRCs: at 100,000
// nodes, side by side on a busy hub, each took twice as long), never for
// a push's creation. On a real engine and mirror.
func TestAReconcileStartsAfterThePushPlans(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue":  "kind: \"config\"\nname: \"fleetwave\"\n",
		"blocks/web.cue": "kind: \"block\"\nname: \"web\"\nactions: {\n\tinstall: command: \"true\"\n\tupgrade: command: \"true\"\n}\n",
		"nodes/n1.cue":   "kind: \"node\"\nname: \"n1\"\n",
	})
	h, clk, fence := statusHub(t, url)
	h.sent = sentItems{ttl: time.Minute}
	ctx := context.Background()
	// the records of the status in Git read for this leadership: no read
	// of them runs in the background beside the steps below (whose
	// channels the test replaces)
	h.loadGitRecords(ctx, fence)
	if err := h.eng.Report(ctx, fleetwave.Report{Node: "n1", SentAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	prev := applyHead(t, h, v)
	gittest.Push(t, url, map[string]string{"brc/a.cue": "kind: \"trigger\"\nname: \"a\"\nblock_name: \"web\"\ntarget_version: \"1\"\nnodes: [\"n1\"]\n"}, nil, "Roll out a")
	snap := applyHead(t, h, v)
	changed := changedTriggers(prev, snap)
	if !changed["a"] {
		t.Fatalf("the push changed %v", changed)
	}
	// hold runs the push's plan, held where hook holds it, and a reconcile
	// beside it; it returns whether the reconcile ended while the plan was
	// held (within a second), and once the plan is released
	direct := func() { h.planning.RLock(); h.planPush(ctx, fence, snap, changed, 0) }
	hold := func(what string, hook *func(), plan func()) bool {
		t.Helper()
		in, release := make(chan struct{}), make(chan struct{})
		*hook = func() { close(in); <-release }
		defer func() { *hook = nil }()
		planned := make(chan struct{})
		go func() { plan(); close(planned) }()
		select {
		case <-in:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the push's plan never got there", what)
		}
		reconciled := make(chan struct{})
		go func() { h.reconcileStep(ctx); close(reconciled) }()
		var early bool
		select {
		case <-reconciled:
			early = true
		case <-time.After(time.Second):
		}
		close(release)
		for _, c := range []chan struct{}{planned, reconciled} {
			select {
			case <-c:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the plan or the reconcile never ended once released", what)
			}
		}
		return early
	}
	if hold("held in its plan", &h.duringPushPlan, direct) {
		t.Error("a reconcile ran while a push plan was reading and planning")
	}
	// as a sync asks: the push step asks for the reconcile once its
	// plan holds planning, before the plan runs
	h.pushSlots, h.pushNow, h.reconcileNow = make(chan struct{}, pushPlans), make(chan struct{}, 1), make(chan struct{}, 1)
	viaStep := func() {
		h.mu.Lock()
		h.pushed = prev
		h.mu.Unlock()
		h.pushAsked.Store(time.Now().UnixNano())
		h.pushStep(ctx)
		select {
		case <-h.reconcileNow:
		default:
			t.Error("a push step asked by a sync asked for no reconcile")
		}
		h.pushing.Wait()
	}
	if hold("held in its plan, from the push step", &h.duringPushPlan, viaStep) {
		t.Error("a reconcile ran while a push plan started by the push step was reading and planning")
	}
	var create func()
	h.beforeCreate = func(fleetwave.RolloutSpec) {
		if create != nil {
			create()
		}
	}
	if !hold("held in its creation", &create, direct) {
		t.Error("a reconcile waited for a push's creation")
	}
	id := fmt.Sprintf("a-g%d", snap.Generation("trigger/a"))
	if r, err := h.eng.RolloutRecord(ctx, id); err != nil || r.ID != id {
		t.Fatalf("rollout %s: %+v, %v", id, r, err)
	}
}

// applyHead fetches h's mirror, loads the tracked branch's tip whole with v
// and makes it h's snapshot, as a sync does.
func applyHead(t *testing.T, h *Hub, v *schema.Validator) *fleetwave.Snapshot {
	t.Helper()
	ctx := context.Background()
	head, _, err := h.repo.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, verr, err := loadAt(ctx, h.repo, wholeLoad(v), head, nil)
	if err != nil || verr != nil {
		t.Fatalf("load %s: %v %v", head, err, verr)
	}
	h.mu.Lock()
	h.snapshot = snap
	h.mu.Unlock()
	return snap
}
