package hub

import (
	"context"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/schema"
	"github.com/fleetwave/fleetwave/status"
)

// TestAFollowerFollowsTheStatusBranchAtItsOwnPace: a follower (a real
// mirror and engine) applies every config commit at its sync, and
// follows the status branch another hub writes only when it is due to:
// between two follows its mirror's status branch stays where it was. The
// records follow the status commits (the requests handled); taking the
// lease, it reads what was committed since it last followed.
func TestAFollowerFollowsTheStatusBranchAtItsOwnPace(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"nodes/n1.cue":  "kind: \"node\"\nname: \"n1\"\n",
	})
	h, _, fence := statusHub(t, url)
	h.fence = 0 // a follower
	h.cfg.Status.Interval = Duration(time.Hour)
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	h.validator, h.sequence = v, v.Sequence()
	ctx := context.Background()
	leader := openMirror(t, url) // the other hub, writing status
	handled := func(name string) map[string][]byte {
		doc, err := status.EncodeSummary(status.Summary{Requests: map[string]fleetwave.RequestStatus{
			name: {Rollout: name + "-g1", State: string(fleetwave.RolloutCompleted)}}})
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{status.SummaryPath: doc}
	}
	commitStatus := func(name string) string {
		t.Helper()
		c, err := leader.CommitStatus(ctx, handled(name), "status: "+name)
		if err != nil || c == "" {
			t.Fatalf("status commit %q: %v", c, err)
		}
		return c
	}
	followed := func() (string, map[string]fleetwave.RequestStatus) {
		h.records.mu.Lock()
		defer h.records.mu.Unlock()
		return h.records.tip, h.records.handled
	}

	c1 := commitStatus("first")
	h.syncStep(ctx) // due at once
	if tip, reqs := followed(); tip != c1 || reqs["first"].Rollout != "first-g1" {
		t.Fatalf("followed %s with %v, want %s handling first", tip, reqs, c1)
	}
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n1"] == nil {
		t.Fatal("the follower applied no snapshot")
	}

	c2 := commitStatus("second")
	gittest.Push(t, url, map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\n"}, nil, "n2")
	h.syncStep(ctx) // the config commit, not the status branch
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n2"] == nil {
		t.Fatal("the follower did not apply the new config commit")
	}
	if tip, _ := followed(); tip != c1 {
		t.Errorf("followed %s before it was due, want still %s", tip, c1)
	}
	if tip, err := h.repo.StatusTip(ctx); err != nil || tip != c1 {
		t.Errorf("the mirror's status branch at %s (%v) before the follow was due, want %s", tip, err, c1)
	}

	h.followAt = time.Now() // due
	h.syncStep(ctx)
	if tip, reqs := followed(); tip != c2 || reqs["second"].Rollout != "second-g1" || len(reqs) != 1 {
		t.Fatalf("followed %s with %v, want %s handling second only", tip, reqs, c2)
	}

	c3 := commitStatus("third")
	h.fence = fence // it takes the lease
	h.loadGitRecords(ctx, fence)
	if tip, _ := followed(); tip != c3 {
		t.Errorf("records at %s once it led, want the remote's status tip %s", tip, c3)
	}
	h.mu.Lock()
	got := h.gitRequests["third"]
	h.mu.Unlock()
	if got.Rollout != "third-g1" {
		t.Errorf("the new leader's handled requests %v, want third's", got)
	}
}

// TestAFollowerCatchesUpWhenTheLeaderMissesARenewal: a follower campaigning
// against a live lease (a real engine) asks for no follow while the
// leader renews on time; once the lease has less than three fifths of its
// TTL left (a renewal missed: the leader may be gone), it asks its sync to
// follow the status branch at once, while the lease runs out.
func TestAFollowerCatchesUpWhenTheLeaderMissesARenewal(t *testing.T) {
	h, clk := engineHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 15 * time.Second
	h.cfg.LeaseTTL, h.owner, h.syncNow = Duration(ttl), "follower", make(chan struct{}, 1)
	h.metrics = newMetrics(h)
	if _, err := h.eng.Campaign(ctx, "leader", ttl); err != nil {
		t.Fatal(err)
	}
	go h.leaseLoop(ctx)
	// renewed on time: its first campaign finds 15 s left
	select {
	case <-h.syncNow:
		t.Fatal("a follow was asked for while the leader's lease was fresh")
	case <-time.After(500 * time.Millisecond):
	}
	if h.followAsked.Load() {
		t.Fatal("a follow was asked for while the leader's lease was fresh")
	}
	cancel()
	// no renewal for 8 s: 7 s left
	clk.Advance(8 * time.Second)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go h.leaseLoop(ctx)
	select {
	case <-h.syncNow:
	case <-time.After(30 * time.Second):
		t.Fatal("no sync asked for when the leader missed its renewal")
	}
	if !h.followAsked.Load() || h.currentFence() != 0 {
		t.Errorf("follow asked %v, fence %d: want a follow asked for, and the lease still the leader's", h.followAsked.Load(), h.currentFence())
	}
}
