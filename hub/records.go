package hub

// The records the hub reads back from the status committed to Git, brought
// up to date from what the status commits since the last read changed.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/status"
)

// gitRecords makes sure the records the status in Git holds are read for
// fence (loadGitRecords) before what needs them runs: the manual requests
// (a request handled before Redis lost it must not run again), the
// approvals, the approval commits. It returns pending true while they are
// read in the background: when Redis holds the status commit the remote's
// status branch points to (redisHoldsStatus), the records add nothing the
// trigger rollouts' planning needs, and a new leader plans at once. At
// 100,000 nodes a follower that takes the lease fetches minutes of status
// history first (attempt 169: 94 s, then 36 s of records), and the pushes
// of that time waited for it. Otherwise (Redis lost writes, the status
// branch moved, or a hub that did not record its commits wrote it last)
// they are read now, as before any status write.
func (h *Hub) gitRecords(ctx context.Context, fence int64) (pending bool) {
	if h.recordsRead(fence) {
		return false
	}
	if !h.redisHoldsStatus(ctx, fence) {
		h.loadGitRecords(ctx, fence)
		return false
	}
	if h.recordsLoading.Swap(fence) != fence {
		h.recordsLoads.Go(func() {
			h.loadGitRecords(ctx, fence)
			h.recordsLoading.CompareAndSwap(fence, 0) // read, or failed: tried again at the next call
			// what waited for them: the approval commits (lead), the
			// requests and approvals (reconcileStep)
			h.kick(h.syncNow)
			h.kick(h.reconcileNow)
		})
	}
	return !h.recordsRead(fence)
}

// recordsRead says whether the records of the status in Git were read
// under fence.
func (h *Hub) recordsRead(fence int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gitFence == fence
}

// statusHeld is redisHoldsStatus's answer for one fence.
type statusHeld struct {
	fence int64
	held  bool
}

// redisHoldsStatus says whether the status commit the leader recorded last
// in Redis (RecordStatusTip, once it landed) is the one the remote's status
// branch points to, checked once per fence. Redis loses a suffix of its
// writes (a failover before replication, a restart from an older
// snapshot), never a write without those before it: when the record is
// there, so is everything that commit was built from. When no status was
// ever written, both are empty. The remote is read from its refs (nothing
// fetched, the mirror's lock not taken). Any error says no: the records
// are then read first.
func (h *Hub) redisHoldsStatus(ctx context.Context, fence int64) bool {
	h.mu.Lock()
	c := h.heldAt
	h.mu.Unlock()
	if c.fence == fence {
		return c.held
	}
	if h.repo == nil {
		return false
	}
	ours, err := h.eng.StatusTip(ctx)
	if err != nil {
		h.log.Warn().Err(err).Int64("fence", fence).Msg("read the status tip recorded in redis; the status in git is read first")
		return false
	}
	theirs, err := h.repo.RemoteStatusTip(ctx)
	if err != nil {
		h.log.Warn().Str("error", redactCause(err.Error())).Int64("fence", fence).Msg("read the remote's status tip; the status in git is read first")
		return false
	}
	held := ours == theirs
	h.log.Info().Int64("fence", fence).Str("status_commit", short(theirs)).Str("recorded", short(ours)).Bool("held", held).
		Msg("status in git checked against redis")
	h.mu.Lock()
	h.heldAt = statusHeld{fence: fence, held: held}
	h.mu.Unlock()
	return held
}

// statusRecords is what the status at one status commit (tip) records
// that a leader must know before it writes status: the manual requests
// handled, the approval records and the approval cursor, the rollouts
// whose document is not finished. The nodes' observed versions go to the
// hub's version history as they are read.
//
// It is brought up to date by reading what the status commits since it
// was read changed (followStatus): by a new leader, before its first
// status write and, when Redis does not hold the status in Git, before it
// plans (gitRecords). Reading the whole status tree each time took 33 s at
// 100,000 nodes, while the mirror's lock and that write waited.
type statusRecords struct {
	mu  sync.Mutex // held while the records are read and used
	tip string     // the status commit they were read at ("" none yet)
	// handled are the requests the summary records as handled, cursor
	// its approval cursor.
	handled map[string]fleetwave.RequestStatus
	cursor  string
	// approvals are the approval records by id; approvalAt the id each
	// record's path holds.
	approvals  map[string]fleetwave.Approval
	approvalAt map[string]string
	// open are the rollouts whose document is not finished.
	open map[string]bool
}

// followStatus brings the records up to the mirror's status tip, reading
// only the files changed since the commit they were read at (all of them
// the first time, or when that commit is gone from the mirror). It
// fetches nothing: the sync loop's fetch brings the status branch. The
// caller holds h.records.mu.
func (h *Hub) followStatus(ctx context.Context) error {
	rec := &h.records
	tip, err := h.repo.StatusTip(ctx)
	if err != nil {
		return err
	}
	if tip == rec.tip {
		return nil
	}
	start := time.Now()
	from := rec.tip
	delta, err := h.repo.StatusChanges(ctx, from, tip, recordPath)
	if err != nil && from != "" {
		h.log.Info().Err(err).Str("from", short(from)).Msg("status changes unreadable; reading the whole status")
		from = ""
		delta, err = h.repo.StatusChanges(ctx, "", tip, recordPath)
	}
	if err != nil {
		return err
	}
	if from == "" { // read whole: what was read before goes
		rec.handled, rec.cursor, rec.approvals, rec.approvalAt, rec.open = nil, "", nil, nil, nil
	}
	history := h.applyStatusChanges(rec, delta.Files, delta.Removed)
	h.history.merge(history)
	rec.tip = tip
	h.log.Debug().Str("status_commit", short(tip)).Str("from", short(from)).Int("files", len(delta.Files)).
		Int("removed", len(delta.Removed)).Int64("took_ms", time.Since(start).Milliseconds()).Msg("status followed")
	return nil
}

// recordPath says whether the status file at p holds records
// (applyStatusChanges): the summary, approvals, nodes, rollouts' documents;
// not the parts of a large rollout's items (a hundred documents of a
// thousand items at 100,000 nodes, rewritten by every status commit of its
// rollout) nor the generation marks, read when needed.
func recordPath(p string) bool {
	switch kind, _ := status.ParsePath(p); kind {
	case status.KindSummary, status.KindApproval, status.KindNode, status.KindRollout:
		return true
	}
	return false
}

// applyStatusChanges updates rec with the status files changed (path ->
// content) and removed, and returns the nodes' observed versions they hold.
func (h *Hub) applyStatusChanges(rec *statusRecords, files map[string][]byte, removed []string) map[string]map[string][]string {
	if rec.handled == nil {
		rec.handled, rec.approvals, rec.approvalAt, rec.open = map[string]fleetwave.RequestStatus{}, map[string]fleetwave.Approval{}, map[string]string{}, map[string]bool{}
	}
	for _, p := range removed {
		switch kind, id := status.ParsePath(p); kind {
		case status.KindSummary:
			rec.handled, rec.cursor = map[string]fleetwave.RequestStatus{}, ""
		case status.KindApproval:
			delete(rec.approvals, rec.approvalAt[p])
			delete(rec.approvalAt, p)
		case status.KindRollout:
			delete(rec.open, id)
		}
	}
	history := map[string]map[string][]string{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		data := files[p]
		switch kind, id := status.ParsePath(p); kind {
		case status.KindSummary:
			doc, err := status.DecodeSummary(data)
			if err != nil {
				h.log.Warn().Err(err).Str("path", p).Msg("summary unreadable; requests and approval cursor known only from redis")
				continue
			}
			rec.handled, rec.cursor = map[string]fleetwave.RequestStatus{}, ""
			for name, r := range doc.Requests {
				if r.Handled() {
					rec.handled[name] = r
				}
			}
			if doc.Approval != nil {
				rec.cursor = doc.Approval.Cursor
			}
		case status.KindApproval:
			doc, err := status.DecodeApproval(data)
			if err != nil {
				h.log.Warn().Err(err).Str("path", p).Msg("approval record unreadable; not restored")
				continue
			}
			delete(rec.approvals, rec.approvalAt[p])
			if doc.ID != "" {
				rec.approvals[doc.ID], rec.approvalAt[p] = doc.Approval, doc.ID
			}
		case status.KindNode:
			doc, err := status.DecodeNode(data)
			if err != nil {
				h.log.Warn().Err(err).Str("path", p).Msg("node status unreadable; its observed versions not restored")
				continue
			}
			if doc.Node != "" && len(doc.ObservedVersions) > 0 {
				history[doc.Node] = doc.ObservedVersions
			}
		case status.KindRollout:
			head, err := status.DecodeRollout(data)
			if err != nil {
				h.log.Warn().Err(err).Str("path", p).Msg("rollout status unreadable; left as it is")
				delete(rec.open, id)
				continue
			}
			if head.Rollout.Status.Finished() || head.Rollout.ID != id {
				delete(rec.open, id)
			} else {
				rec.open[id] = true
			}
		}
	}
	return history
}

// statusFileAt returns a reader of the status files at commit for
// status.ReadRollout, and the first error it met (a file it could not read
// is reported as absent, which fails the document's read).
func (h *Hub) statusFileAt(ctx context.Context, commit string) (file func(string) ([]byte, bool), failed func() error) {
	var first error
	file = func(p string) ([]byte, bool) {
		data, ok, err := h.repo.StatusFile(ctx, commit, p)
		if err != nil && first == nil {
			first = fmt.Errorf("%s: %w", p, err)
		}
		return data, ok
	}
	return file, func() error { return first }
}
