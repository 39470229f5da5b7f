package hub

// The sync loop: following the config repository's tracked branch and
// turning a new commit into the snapshot in force (or its validation
// errors). `fleetwave plan` loads commits through loadAt too.

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/laps"
	"github.com/fleetwave/fleetwave/schema"
)

// syncStep fetches the tracked branch and, for a new commit that is not a
// status-only one, validates it into the snapshot in force. Every replica
// syncs: a follower's API answers from the same snapshot as the leader's,
// and a follower that takes the lease has it at hand. A follower fetches
// the status branch only to catch up with it, when the leader missed a
// renewal (leaseLoop): following every status commit costs what each
// wrote, at 100,000 nodes thousands of documents (fetched and read by
// every follower, it took a third of a core each and the agents' cores
// with it). What only the leader does with a snapshot (the records taken
// once per leadership, the approval commits, the push plan) runs once per
// snapshot and fence (lead).
func (h *Hub) syncStep(ctx context.Context) {
	asked := h.syncAsked.Swap(0)
	start := time.Now()
	steps := startLaps(start, asked)
	// the leader fetches the status branch at every sync (its own status
	// commits), unless a catch-up is fetching it; a follower only when it
	// is to catch up with it, beside this loop (catchUp)
	fence := h.currentFence()
	if fence == 0 && h.followAsked.Swap(false) {
		h.catchUp(ctx)
	}
	fetch := h.repo.FetchBranch
	if fence > 0 && !h.catchingUp.Load() {
		fetch = h.repo.Fetch
	}
	head, _, err := fetch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Str("error", redactCause(err.Error())).Msg("fetch")
			h.setSync(func(s *fleetwave.SyncState) { s.Result, s.Message = "error", redactCause(err.Error()) })
		}
		return
	}
	steps.Lap("fetch")
	snap := h.applyCommit(ctx, head, steps)
	if snap != nil {
		// who made the commit, read now by every replica: a follower that
		// takes the lease plans it without this read, which waits for the
		// mirror's lock (a catch-up's fetch of a long status history held
		// it for 67 s at 100,000 nodes, attempt 170)
		h.commitActor(ctx, snap)
	}
	if fence > 0 {
		h.lead(ctx, fence, steps)
	}
	if snap == nil {
		return
	}
	took := time.Since(start)
	h.metrics.syncSeconds.Observe(took.Seconds())
	h.metrics.syncSteps(steps)
	log := h.log.With().Str("commit", head).Logger()
	ev := log.Info()
	if took >= slowSync {
		ev = log.Warn() // seen by a hub logging at warn: what held a push back
	}
	ev.Int("objects", len(snap.Objects)).Int("nodes", len(snap.Nodes)).Int64("took_ms", took.Milliseconds()).
		Func(lapFields(steps)).Msg("snapshot applied")
}

// catchUp fetches the status commits made since this follower last did,
// in the background: a leader that missed a renewal may be gone, and the
// hub that takes its lease starts warm. At 100,000 nodes that history was
// 292,142 objects, fetched in 94 s (attempt 169), and the sync loop that
// fetched it let no push through meanwhile (attempt 171: a push waited 29
// s). The fetch is staged (gitsync's FetchStatus), so the config sync
// goes on beside it; the records of that status are read by the hub that
// takes the lease (gitRecords), not by every follower. A sync follows it.
func (h *Hub) catchUp(ctx context.Context) {
	if !h.catchingUp.CompareAndSwap(false, true) {
		return // one runs
	}
	h.recordsLoads.Go(func() {
		defer h.catchingUp.Store(false)
		if h.beforeCatchUp != nil {
			h.beforeCatchUp()
		}
		start := time.Now()
		if err := h.repo.FetchStatus(ctx); err != nil {
			if ctx.Err() == nil {
				h.log.Warn().Str("error", redactCause(err.Error())).Msg("catch up with the status branch")
			}
			return
		}
		h.log.Info().Int64("fetch_ms", time.Since(start).Milliseconds()).Msg("status caught up")
		h.kick(h.syncNow) // a leader's sync fetches the status branch again
	})
}

// applyCommit validates head, the tracked branch's fetched tip, into the
// snapshot in force unless it was looked at already or changed only
// status/; it returns the snapshot it applied (nil: none).
func (h *Hub) applyCommit(ctx context.Context, head string, steps *laps.Laps) *fleetwave.Snapshot {
	h.mu.Lock()
	last := h.lastSeen
	h.mu.Unlock()
	if head == last {
		return nil
	}
	log := h.log.With().Str("commit", head).Logger()
	if last != "" {
		if only, err := h.repo.StatusOnly(ctx, last, head); err == nil && only {
			h.mu.Lock()
			h.lastSeen = head
			h.mu.Unlock()
			log.Debug().Msg("status-only commit: nothing to reconcile")
			return nil
		}
	}
	snap, verr, err := loadAt(ctx, h.repo, h.sequence.LoadChanged, head, steps)
	if err != nil {
		log.Warn().Err(err).Msg("read or validate commit")
		return nil
	}
	h.mu.Lock()
	applied := h.sync.Applied
	if applied == "" {
		applied = h.statusApplied // what the status in Git says was in force
	}
	h.mu.Unlock()
	if serrs := h.checkSigners(ctx, applied, head); len(serrs) > 0 {
		if verr == nil {
			verr = &fleetwave.ValidationError{}
		}
		verr.Errors = append(verr.Errors, serrs...)
		verr.Sort()
	}
	steps.Lap("signers")
	if verr != nil {
		h.mu.Lock()
		h.lastSeen = head
		h.mu.Unlock()
		for _, fe := range verr.Errors {
			log.Warn().Str("error", fe.Error()).Msg("commit rejected")
		}
		h.metrics.rejectedCommits.Inc()
		h.metrics.syncSteps(steps)
		h.setSync(func(s *fleetwave.SyncState) {
			s.Commit, s.Result, s.Errors, s.Message, s.At = head, "rejected", verr.Errors, "", h.clock.Now().UTC()
		})
		return nil
	}
	h.mu.Lock()
	h.snapshot, h.lastSeen = snap, head
	h.mu.Unlock()
	h.setSync(func(s *fleetwave.SyncState) {
		s.Commit, s.Applied, s.Result, s.Errors, s.Message, s.At = head, head, "ok", nil, "", h.clock.Now().UTC()
	})
	return snap
}

// lead does, once per snapshot in force and fence, what the leader does
// with a snapshot: the records the status in Git holds (once per
// leadership), the approval commits up to it, and its push plan. A
// follower that takes the lease does it at its first sync, for the
// snapshot it already holds.
func (h *Hub) lead(ctx context.Context, fence int64, steps *laps.Laps) {
	h.mu.Lock()
	snap, done := h.snapshot, h.led
	h.mu.Unlock()
	if snap == nil || done == (ledSnapshot{fence: fence, commit: snap.Commit, records: true}) {
		return
	}
	pending := h.gitRecords(ctx, fence)
	steps.Lap("records")
	if !pending {
		// the approval cursor is among the records
		h.processApprovalCommits(ctx, fence, snap, snap.Commit)
		steps.Lap("approvals")
	}
	h.mu.Lock()
	h.led = ledSnapshot{fence: fence, commit: snap.Commit, records: !pending}
	h.mu.Unlock()
	if done.fence == fence && done.commit == snap.Commit {
		return // planned already, the records read since
	}
	h.pushAsked.CompareAndSwap(0, time.Now().UnixNano())
	h.kick(h.pushNow) // which asks for a reconcile (pushStep)
}

// ledSnapshot names the snapshot and the fence lead last ran for, and
// whether the approval commits up to it were processed (records: they
// wait for the records of the status in Git, gitRecords).
type ledSnapshot struct {
	fence   int64
	commit  string
	records bool
}

// slowSync is the time from which a sync of a new commit (its wait for
// the loop included) logs "snapshot applied" as a warning.
const slowSync = 500 * time.Millisecond

// askSync asks the sync loop for a fetch now and notes when, for its
// "wait" step: the watcher and the webhook ask so.
func (h *Hub) askSync() {
	h.syncAsked.CompareAndSwap(0, time.Now().UnixNano())
	h.kick(h.syncNow)
}

// The steps of one run of a loop are timed with laps.Laps. A sync's are
// wait (from the push noticed to the sync started), fetch, read (the
// commit's files), validate, generations, signers, records and approvals:
// they go to fleetwave_sync_step_seconds and to the "snapshot applied"
// line. The push step's go to its "push planned" line; a status write's
// (read, engine, rollouts, summary, nodes, then the commit's fetch, edit,
// encode, store, push, record, and ack) to
// fleetwave_status_step_seconds and its "status committed" line.

// startLaps starts the steps of a step begun at start, asked for at asked
// (Unix nanoseconds; 0 when nothing asked, as for a poll): its first lap
// is the wait between the two.
func startLaps(start time.Time, asked int64) *laps.Laps {
	l := laps.Begin(start)
	if asked != 0 {
		l.Add("wait", start.Sub(time.Unix(0, asked)))
	}
	return l
}

// lapFields adds each step's milliseconds to a log line (<step>_ms), with
// zerolog's Event.Func.
func lapFields(l *laps.Laps) func(*zerolog.Event) {
	return func(e *zerolog.Event) {
		for _, s := range l.Steps {
			e.Int64(s.Name+"_ms", s.Took.Milliseconds())
		}
	}
}

func (h *Hub) setSync(f func(*fleetwave.SyncState)) {
	h.mu.Lock()
	before := h.sync
	f(&h.sync)
	if h.sync.Result != before.Result || h.sync.Commit != before.Commit || h.sync.Message != before.Message || len(h.sync.Errors) != len(before.Errors) {
		h.syncGen++
	}
	h.mu.Unlock()
	h.kick(h.statusNow)
}

// loader validates the files of commit, given the paths changed since
// commit base (schema.Sequence.LoadChanged; a Validator's Load ignores
// them).
type loader func(files map[string][]byte, commit, base string, changed []string) (*fleetwave.Snapshot, error)

// loadAt reads commit from the object store and validates it as a whole
// with load: a snapshot with
// its generations, or the commit's validation errors (refused files
// included), or an error when it cannot be read at all. The hub's sync
// and `fleetwave plan` both load commits through it; steps (nil for plan)
// times its steps.
func loadAt(ctx context.Context, repo *gitsync.Repo, load loader, commit string, steps *laps.Laps) (*fleetwave.Snapshot, *fleetwave.ValidationError, error) {
	fs, err := repo.FilesChanged(ctx, commit)
	if err != nil {
		return nil, nil, err
	}
	steps.Lap("read")
	snap, err := load(fs.Files, commit, fs.Base, fs.Changed) // fs.Files is ours: the loader may keep it
	steps.Lap("validate")
	var verr *fleetwave.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return nil, nil, err
	}
	if len(fs.Refused) > 0 {
		if verr == nil {
			verr = &fleetwave.ValidationError{}
		}
		verr.Errors = append(verr.Errors, fs.Refused...)
		verr.Sort()
	}
	if verr != nil {
		return nil, verr, nil
	}
	gens, err := repo.Generations(ctx, commit)
	if err != nil {
		return nil, nil, err
	}
	steps.Lap("generations")
	snap.Commit, snap.Generations = commit, gens
	return snap, nil, nil
}

// wholeLoad is the loader of v: every commit validated whole.
func wholeLoad(v *schema.Validator) loader {
	return func(files map[string][]byte, _, _ string, _ []string) (*fleetwave.Snapshot, error) {
		return v.Load(files)
	}
}
