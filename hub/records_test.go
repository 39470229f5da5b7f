package hub

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/schema"
	"github.com/fleetwave/fleetwave/status"
)

// TestAFollowerCatchesUpWithTheStatusBranchWhenAsked: a follower (a real
// mirror and engine) applies every config commit at its sync and leaves
// the status branch another hub writes alone (following every status
// commit costs what each wrote) until it is asked to catch up (the leader
// missed a renewal): it then reads the records the status commits since
// changed (the requests handled). Taking the lease, it reads what was
// committed since it caught up.
func TestAFollowerCatchesUpWithTheStatusBranchWhenAsked(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"nodes/n1.cue":  "kind: \"node\"\nname: \"n1\"\n",
	})
	h, _, fence := statusHub(t, url)
	h.fence = 0 // a follower
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
	h.syncStep(ctx)
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n1"] == nil {
		t.Fatal("the follower applied no snapshot")
	}
	if tip, _ := followed(); tip != "" {
		t.Errorf("followed %s before it was asked to", tip)
	}
	h.followAsked.Store(true)
	h.syncStep(ctx)
	if tip, reqs := followed(); tip != c1 || reqs["first"].Rollout != "first-g1" {
		t.Fatalf("followed %s with %v once asked, want %s handling first", tip, reqs, c1)
	}

	c2 := commitStatus("second")
	gittest.Push(t, url, map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\n"}, nil, "n2")
	h.syncStep(ctx) // the config commit, not the status branch
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n2"] == nil {
		t.Fatal("the follower did not apply the new config commit")
	}
	if tip, _ := followed(); tip != c1 {
		t.Errorf("followed %s unasked, want still %s", tip, c1)
	}
	if tip, err := h.repo.StatusTip(ctx); err != nil || tip != c1 {
		t.Errorf("the mirror's status branch at %s (%v) unasked, want %s", tip, err, c1)
	}
	h.followAsked.Store(true)
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

// TestACampaignDoesNotWaitForTheMirrorsFetch: the fence floor a campaign
// reads from the mirror does not wait behind a fetch holding the mirror
// (a follower catching up on a large status branch held it 37 s at
// 100,000 nodes while the lease it waited for ran out): the floor read
// before is used, and the read left running gives the next campaign the
// new one. The remote is real and slow: its upload-pack waits 10 s.
func TestACampaignDoesNotWaitForTheMirrorsFetch(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{"README.md": "fleet\n"})
	h, _, _ := statusHub(t, url)
	ctx := context.Background()
	leader := openMirror(t, url)
	commitFence := func(f int) {
		t.Helper()
		msg := gitsync.StatusMessage(fmt.Sprintf("status %d", f), "", gitsync.Trailer{Key: gitsync.TrailerFence, Value: fmt.Sprint(f)})
		if _, err := leader.CommitStatus(ctx, map[string][]byte{status.SummaryPath: fmt.Appendf(nil, "format: 1\n# %d\n", f)}, msg); err != nil {
			t.Fatal(err)
		}
	}
	commitFence(7)
	if _, _, err := h.repo.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := h.fenceFloor(ctx); f != 7 || err != nil {
		t.Fatalf("floor %d, %v; want 7", f, err)
	}
	commitFence(9)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "git-upload-pack"), []byte("#!/bin/sh\nsleep 10\nexec git upload-pack \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	fetched := make(chan error, 1)
	go func() { _, _, err := h.repo.Fetch(ctx); fetched <- err }()
	time.Sleep(time.Second) // the fetch holds the mirror, waiting for the remote
	start := time.Now()
	f, err := h.fenceFloor(ctx)
	if took := time.Since(start); f != 7 || err != nil || took > 5*time.Second {
		t.Errorf("floor %d (%v) after %v while the mirror fetched: want 7, the one read before, without waiting for the fetch", f, err, took)
	}
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f != 9 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		f, _ = h.fenceFloor(ctx)
	}
	if f != 9 {
		t.Errorf("floor %d once the fetch ended, want 9", f)
	}
}
