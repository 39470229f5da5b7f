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
// missed a renewal): it then fetches the status commits since, and reads
// none of their records (of the followers that catch up, one takes the
// lease). Taking the lease, it reads the records at the remote's tip.
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
	snap := h.Snapshot()
	if snap == nil || snap.Nodes["n1"] == nil {
		t.Fatal("the follower applied no snapshot")
	}
	// who made the commit is read at the sync, not by the reconcile of
	// the leader it may become
	h.mu.Lock()
	actor := h.actorOf
	h.mu.Unlock()
	if actor.commit != snap.Commit || actor.email == "" {
		t.Errorf("the follower read the author of %q (%q) at its sync, want %s's", actor.commit, actor.email, snap.Commit)
	}
	if tip, _ := followed(); tip != "" {
		t.Errorf("followed %s before it was asked to", tip)
	}
	h.followAsked.Store(true)
	h.syncStep(ctx)
	h.recordsLoads.Wait()
	if tip, err := h.repo.StatusTip(ctx); err != nil || tip != c1 {
		t.Fatalf("the mirror's status branch at %s (%v) once asked, want %s", tip, err, c1)
	}
	if tip, _ := followed(); tip != "" {
		t.Errorf("a follower read the records at %s", tip)
	}

	c2 := commitStatus("second")
	gittest.Push(t, url, map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\n"}, nil, "n2")
	h.syncStep(ctx) // the config commit, not the status branch
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n2"] == nil {
		t.Fatal("the follower did not apply the new config commit")
	}
	if tip, err := h.repo.StatusTip(ctx); err != nil || tip != c1 {
		t.Errorf("the mirror's status branch at %s (%v) unasked, want %s", tip, err, c1)
	}
	// the catch-up runs beside the sync loop: held, it holds back no
	// config commit
	reached, release := make(chan struct{}), make(chan struct{})
	h.beforeCatchUp = func() {
		close(reached)
		<-release
	}
	h.followAsked.Store(true)
	synced := make(chan struct{})
	go func() {
		h.syncStep(ctx)
		close(synced)
	}()
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("the sync that started a catch-up waited for it")
	}
	<-reached
	gittest.Push(t, url, map[string]string{"nodes/n3.cue": "kind: \"node\"\nname: \"n3\"\n"}, nil, "n3")
	h.syncStep(ctx)
	if snap := h.Snapshot(); snap == nil || snap.Nodes["n3"] == nil {
		t.Fatal("the follower did not apply a config commit while it caught up")
	}
	close(release)
	h.recordsLoads.Wait()
	h.beforeCatchUp = nil
	if tip, err := h.repo.StatusTip(ctx); err != nil || tip != c2 {
		t.Fatalf("the mirror's status branch at %s (%v) once asked again, want %s", tip, err, c2)
	}

	c3 := commitStatus("third")
	h.fence = fence // it takes the lease
	h.loadGitRecords(ctx, fence)
	if tip, reqs := followed(); tip != c3 || len(reqs) != 1 {
		t.Errorf("records at %s with %v once it led, want the remote's status tip %s handling third only", tip, reqs, c3)
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

// TestANewLeaderPlansWhileItsRecordsAreRead: a leader's status write
// records its landed commit in Redis (a real redis-server, a real remote).
// A new leadership that finds the remote's status branch at that commit
// plans at once (lead asks for the push plan) while the records are read
// in the background, once; what needs them (the approval commits) waits
// and runs when they are in. When the status branch moved past what Redis
// recorded (Redis lost the record, or its data), the records are read
// before anything is planned, as before.
func TestANewLeaderPlansWhileItsRecordsAreRead(t *testing.T) {
	url := gittest.NewRemote(t, map[string]string{
		"fleetwave.cue": "kind: \"config\"\nname: \"fleetwave\"\n",
		"nodes/n1.cue":  "kind: \"node\"\nname: \"n1\"\n",
	})
	h, _, fence := statusHub(t, url)
	v, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	h.validator, h.sequence, h.owner = v, v.Sequence(), "hub-a" // statusHub's campaign
	h.syncNow, h.pushNow, h.reconcileNow = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	ctx := context.Background()
	h.syncStep(ctx) // the snapshot, and lead for the first fence: the records read (no status yet)
	h.statusStep(ctx)
	written, err := h.repo.RemoteStatusTip(ctx)
	if err != nil || written == "" {
		t.Fatalf("no status commit on the remote (%q, %v)", written, err)
	}
	if rec, err := h.eng.StatusTip(ctx); err != nil || rec != written {
		t.Fatalf("redis recorded %q (%v), want the landed status commit %s", rec, err, written)
	}

	// a new leadership: the records not read for it yet
	lead := func() int64 {
		t.Helper()
		if err := h.eng.Resign(ctx, h.owner, h.currentFence()); err != nil {
			t.Fatal(err)
		}
		f, err := h.eng.Campaign(ctx, h.owner, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		h.setFence(f)
		for _, ch := range []chan struct{}{h.syncNow, h.pushNow, h.reconcileNow} {
			select {
			case <-ch:
			default:
			}
		}
		return f
	}
	kicked := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	f2 := lead()
	if f2 <= fence {
		t.Fatalf("fence %d after %d", f2, fence)
	}
	release, reads := make(chan struct{}), 0
	h.beforeRecords = func() {
		reads++
		<-release
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.lead(ctx, f2, startLaps(time.Now(), 0))
		h.lead(ctx, f2, startLaps(time.Now(), 0)) // the next sync: nothing new
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("lead waited for the records while redis holds the status in git")
	}
	if !kicked(h.pushNow) {
		t.Error("no push plan asked for while the records are read")
	}
	h.mu.Lock()
	led := h.led
	h.mu.Unlock()
	if led.fence != f2 || led.records {
		t.Errorf("led %+v, want fence %d with the approval commits left for the records", led, f2)
	}
	if h.recordsRead(f2) {
		t.Fatal("the records were read while their read was held")
	}
	close(release)
	deadline := time.Now().Add(30 * time.Second)
	for !h.recordsRead(f2) {
		if time.Now().After(deadline) {
			t.Fatal("the records were not read in the background")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.recordsLoads.Wait()
	if reads != 1 {
		t.Errorf("the records were read %d times, want once", reads)
	}
	if !kicked(h.syncNow) {
		t.Error("no sync asked for once the records were read")
	}
	h.lead(ctx, f2, startLaps(time.Now(), 0))
	h.mu.Lock()
	led = h.led
	h.mu.Unlock()
	if !led.records {
		t.Errorf("led %+v once the records were read, want the approval commits processed", led)
	}
	if kicked(h.pushNow) {
		t.Error("the push plan was asked for again for the same snapshot")
	}

	// the status branch moved past what redis recorded: the records are
	// read first
	other := openMirror(t, url)
	if _, _, err := other.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	moved, err := other.CommitStatus(ctx, map[string][]byte{"status/extra.yaml": []byte("x: 1\n")}, "status: unrecorded")
	if err != nil || moved == "" {
		t.Fatalf("status commit %q: %v", moved, err)
	}
	f3 := lead()
	h.beforeRecords = func() { reads++ }
	if pending := h.gitRecords(ctx, f3); pending || !h.recordsRead(f3) {
		t.Fatalf("pending %v, read %v: want the records read before planning when redis lacks the status tip", pending, h.recordsRead(f3))
	}
	h.records.mu.Lock()
	tip := h.records.tip
	h.records.mu.Unlock()
	if tip != moved {
		t.Errorf("records at %s, want the remote's status tip %s", tip, moved)
	}
}
