package hub

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/internal/laps"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/status"
)

// statusStep writes status/ back to the repository when the engine's state
// or the sync result changed since the last write. Files are deterministic
// (sorted keys, no wall-clock "now"), so a commit appears only on change.
func (h *Hub) statusStep(ctx context.Context) {
	fence := h.currentFence()
	if fence == 0 {
		return
	}
	version, err := h.eng.Version(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn().Err(err).Msg("read engine version")
		}
		return
	}
	h.mu.Lock()
	mark := fmt.Sprintf("%d/%d/%s", version, h.syncGen, h.waitsMark)
	unchanged := mark == h.statusMark
	h.mu.Unlock()
	if unchanged && !h.nodesOwedNow(time.Now()) {
		return
	}
	// what Git says was handled must be known before this write, which
	// could otherwise drop it after Redis lost its data
	steps := startLaps(time.Now(), 0)
	h.loadGitRecords(ctx, fence)
	// The outbox names the rollouts whose items changed since the last
	// write; they are acknowledged once the commit carrying them landed.
	events, err := h.eng.ReadOutbox(ctx, maxOutboxBatch)
	if err != nil {
		h.log.Warn().Err(err).Msg("read outbox")
		return
	}
	changed := map[string]bool{}
	for _, ev := range events {
		changed[ev.Rollout] = true
	}
	steps.Lap("read")
	b, err := h.statusFiles(ctx, changed, steps)
	if err != nil {
		h.log.Warn().Err(err).Msg("build status files")
		return
	}
	h.mu.Lock()
	applied := h.sync.Applied
	h.mu.Unlock()
	trailers := []gitsync.Trailer{{Key: gitsync.TrailerSyncedAt, Value: applied}, {Key: gitsync.TrailerFence, Value: fmt.Sprint(fence)}}
	if b.rollout != "" {
		trailers = append(trailers, gitsync.Trailer{Key: gitsync.TrailerRollout, Value: b.rollout})
	}
	if b.generation != "" {
		trailers = append(trailers, gitsync.Trailer{Key: gitsync.TrailerGeneration, Value: b.generation})
	}
	res, err := h.repo.WriteStatus(ctx, b.files, gitsync.StatusMessage(b.subject, "", trailers...))
	steps.Took(res.Steps)
	if errors.Is(err, gitsync.ErrStaleFence) {
		// a newer leader wrote status: this hub must not write over it.
		// Usually its lease is gone already (paused, partitioned); when its
		// Redis still grants it (a second hub on another Redis wrote), it
		// steps down anyway: its next campaign starts above the fence in
		// Git, so a hub is never locked out of status for good.
		h.log.Warn().Err(err).Int64("fence", fence).Msg("status commit refused: a newer leader wrote status; stepping down")
		if fence == h.currentFence() {
			_ = h.eng.Resign(ctx, h.owner, fence)
			h.setFence(0)
		}
		return
	}
	if err != nil {
		h.log.Warn().Err(err).Msg("status commit; retrying at the next interval")
		return
	}
	commit := res.Commit
	if commit != "" {
		h.metrics.statusCommitted(steps.Start) // the whole write: its documents' build included
		// a leader after this one that finds the status branch still here
		// plans without waiting for the records (gitRecords)
		if err := h.eng.RecordStatusTip(ctx, fence, commit); err != nil && ctx.Err() == nil {
			h.log.Warn().Err(err).Str("commit", commit).Int64("fence", fence).Msg("record the status tip; the next leader reads the status in git first")
		}
	}
	for _, p := range res.Overwritten {
		h.log.Warn().Str("path", p).Str("commit", commit).Msg("human edit under status/ overwritten")
	}
	if h.rolloutsWritten == nil {
		h.rolloutsWritten = map[string]bool{}
	}
	for _, id := range b.finished {
		h.rolloutsWritten[id] = true // a landed commit holds its final document
	}
	for _, p := range b.rendered {
		if d := h.rendered[p]; d != nil {
			d.data = nil // landed: left out while its content stays the same
		}
	}
	// the handled requests this commit holds are in Git now: remembered
	// even if Redis loses them
	h.mu.Lock()
	for _, id := range b.lost {
		delete(h.lostDocs, id)
	}
	for name, r := range b.requests {
		if r.Handled() {
			if h.gitRequests == nil {
				h.gitRequests = map[string]fleetwave.RequestStatus{}
			}
			h.gitRequests[name] = r
		}
	}
	h.mu.Unlock()
	if len(b.held) > 0 {
		h.crashPoint("claim_committed")
	}
	// a claimed request's record is in Git now: its rollout may run
	for _, id := range b.held {
		if _, err := h.eng.Release(ctx, fence, id, fleetwave.ReasonClaim); err != nil {
			h.log.Warn().Err(err).Str("rollout", id).Msg("release claimed rollout")
		}
	}
	if len(events) > 0 {
		ids := make([]string, len(events))
		for i, ev := range events {
			ids[i] = ev.ID
		}
		if _, err := h.eng.AckOutbox(ctx, fence, ids...); err != nil {
			h.log.Warn().Err(err).Int("events", len(ids)).Msg("acknowledge outbox; delivered again next time")
			return
		}
		if len(events) == maxOutboxBatch {
			h.kick(h.statusNow) // more are waiting
		}
	}
	if !b.filling { // else written again at the next interval, whatever changed
		h.mu.Lock()
		h.statusMark = mark
		h.mu.Unlock()
	}
	steps.Lap("ack")
	h.metrics.statusSteps(steps)
	if commit != "" {
		took := time.Since(steps.Start)
		ev := h.log.Info()
		if took >= slowStatus {
			ev = h.log.Warn()
		}
		ev.Func(lapFields(steps)).Str("commit", commit).Int64("fence", fence).Str("subject", b.subject).Int("files", len(b.files)).
			Int("nodes_built", len(b.nodesBuilt)).Bool("nodes_left", b.nodesLeft).Int("nodes_owed", b.nodesOwed).Bool("filling", b.filling).Int("parts_built", len(b.partsBuilt)).Int64("rollouts_read_ms", b.rolloutsRead.Milliseconds()).Int64("took_ms", took.Milliseconds()).Msg("status committed")
	}
}

// slowStatus is how long a status write (read, build, commit) may take
// before its "status committed" line, with its steps, goes to warn.
const slowStatus = time.Second

// maxOutboxBatch bounds the outbox events one status write delivers.
const maxOutboxBatch = 10_000

// statusBatch is one status write: the files, the commit subject and
// trailers, and the finished rollouts whose final document it holds.
type statusBatch struct {
	files                        map[string][]byte
	subject, rollout, generation string
	finished                     []string
	// held are the rollouts held for their claim whose record this batch
	// commits: released once it landed.
	held []string
	// requests is the "requests" section the batch commits.
	requests map[string]fleetwave.RequestStatus
	// lost are the closed documents of lost rollouts the batch commits.
	lost []string
	// rendered are the documents of Hub.rendered the batch writes.
	rendered []string
	// nodesBuilt are the nodes whose documents were built again (their
	// inputs changed); the others kept theirs. partsBuilt are the same for
	// the parts of large rollouts' items, by path.
	nodesBuilt, partsBuilt []string
	// nodesLeft says the nodes' documents were left for a later write
	// (nodesDue), or nodesOwed of them (nodesPerWrite).
	nodesLeft bool
	nodesOwed int
	// filling says a rollout whose items are still being created was
	// left for a later write.
	filling bool
	// rolloutsRead is the part of the rollouts step that read their items.
	rolloutsRead time.Duration
}

// While a rollout runs, a status write builds the nodes' documents only
// every nodesSpacing times what building them took the last time, when
// that is longer than status.interval (at most maxNodesSpacing): at
// 100,000 nodes, going over every node took about a second of each write,
// and each write that changed one of their documents rewrote and pushed
// the 4.4 MB tree of status/nodes (0.4 s of the git CLI's push alone),
// which every replica that fetches the status branch fetches again. The
// rollouts' documents and the summary are written at every write; the
// nodes' documents follow at most maxNodesSpacing later, and at once when
// no rollout runs.
const (
	nodesSpacing    = 10
	maxNodesSpacing = 30 * time.Second
)

// nodesPerWrite is the most nodes' documents a status write builds; the
// others whose inputs changed keep their documents as last built, and
// the next writes, at each interval, build the rest. At 100,000 nodes a
// push that changed every node's drift (or a rollout that put an item on
// every node) made one write build, commit and push 100,000 documents:
// 6 to 10 s, the slowest writes of every run once the rollout's read
// was out of the way, during which neither the summary nor the
// rollout's document moved.
const nodesPerWrite = 20_000

// partsTake says whether a status write whose rollouts' parts built hold
// items items leaves the nodes' documents, due now, to the next write:
// when those are at least as many as the nodes' documents a write builds
// (nodesPerWrite), unless the last write left them for the same reason or
// this is the last write, at shutdown (nodesAll). The next write builds
// them whatever it builds, and the write pace follows each write's
// duration, so they come one write later. At 100,000 nodes the first
// write after a rollout over every node was created builds its 100 parts;
// with 20,000 nodes' documents besides it was one run's slowest write
// (4.35 s, 20,102 files; 102 without them).
func (h *Hub) partsTake(items int) bool {
	return h.nodesPerWrite > 0 && items >= h.nodesPerWrite && !h.nodesAll && !h.nodesYielded
}

// nodesWait is how long after the nodes' documents were last built a
// write while a rollout runs waits before building them again (0: it
// does not wait). A hub without a status.interval (one a test builds
// whole; a configured hub always has one) never waits: its writes are
// called, not paced.
func (h *Hub) nodesWait() time.Duration {
	w, iv := nodesSpacing*h.nodesTook, h.cfg.Status.Interval.D()
	if iv <= 0 || w <= iv {
		return 0
	}
	return min(w, maxNodesSpacing)
}

// nodesDue says whether the status write at now builds the nodes'
// documents: always when no rollout is active, when they were never built
// under this fence, when the last write asked for it (nodesForce), or
// when nodesWait passed since they were last built.
func (h *Hub) nodesDue(now time.Time, active bool) bool {
	if !active || h.nodeInputs == nil || h.nodesForce || h.nodesLast.IsZero() {
		return true
	}
	return now.Sub(h.nodesLast) >= h.nodesWait()
}

// nodesOwedNow says whether a write left the nodes' documents out and
// they are due now: statusStep writes then even when nothing else changed.
func (h *Hub) nodesOwedNow(now time.Time) bool {
	return h.nodesOwed && (h.nodesForce || now.Sub(h.nodesLast) >= h.nodesWait())
}

// renderedDoc is a status document as last rendered: the digest of its
// bytes, and the bytes, nil once a landed commit holds them.
type renderedDoc struct {
	sum  [sha256.Size]byte
	data []byte
}

// writeRendered puts the document at path, rendered as data, into files,
// unless a landed status commit already holds the same bytes. A
// 100,000-node fleet's documents (one per node, a rollout's parts) took
// nearly half of the hub's CPU when encoded and written again for every
// commit: the callers render them again only when what they are built
// from changed (nodeInputs, partItems). It returns whether files got the
// document.
func (h *Hub) writeRendered(files map[string][]byte, path string, data []byte) bool {
	sum := sha256.Sum256(data)
	d := h.rendered[path]
	if d == nil || d.sum != sum {
		d = &renderedDoc{sum: sum, data: data}
		h.rendered[path] = d
	}
	if d.data == nil {
		return false
	}
	files[path] = d.data
	return true
}

// keepRendered puts the document last rendered at path into files while no
// landed status commit holds it yet (writeRendered), without rendering it
// again, and returns whether files got it.
func (h *Hub) keepRendered(files map[string][]byte, path string) bool {
	d := h.rendered[path]
	if d == nil || d.data == nil {
		return false
	}
	files[path] = d.data
	return true
}

// statusFiles renders the status documents (package status): the summary,
// one per rollout, node and approval request. It never includes rendered
// configs or payloads.
// The document of a finished rollout is left out (the committed file stays)
// once a landed commit holds its final state, unless the outbox names it
// again (changed); finished lists the finished rollouts written this time.
func (h *Hub) statusFiles(ctx context.Context, changed map[string]bool, steps *laps.Laps) (statusBatch, error) {
	var (
		files                          = map[string][]byte{}
		subject, rolloutID, generation string
		finished, claimed              []string
	)
	history, err := h.eng.Counters(ctx)
	if err != nil {
		return statusBatch{}, err
	}
	rollouts, err := h.eng.Rollouts(ctx)
	if err != nil {
		return statusBatch{}, err
	}
	// read only: the reports are the engine's own (ObservationsShared)
	obs, err := h.eng.ObservationsShared(ctx)
	if err != nil {
		return statusBatch{}, err
	}
	h.mu.Lock()
	snap, syncState := h.snapshot, h.sync
	h.mu.Unlock()
	steps.Lap("engine")

	var lines []status.RolloutLine
	// the items that wait on each node (pending, ambiguous), with why
	waitingByNode := map[string][]status.WaitingItem{}
	subject = "status: summary"
	h.mu.Lock()
	var lost []string
	for id, docs := range h.lostDocs {
		for p, doc := range docs {
			files[p] = doc // the engine's own document wins below
		}
		lost = append(lost, id)
	}
	h.mu.Unlock()
	// what this hub remembers of the documents it wrote (writeRendered)
	// holds only while it is the leader that wrote them
	fence := h.currentFence()
	if h.renderedFence != fence {
		h.rendered, h.renderedFence, h.nodeInputs, h.partItems, h.marksVersion = map[string]*renderedDoc{}, fence, nil, nil, 0
	}
	var rendered []string
	var newest *fleetwave.Rollout
	// kept, like nodeInputs, only once every document is built; the parts
	// of rollouts not read this time (finished and written) are dropped
	lastParts, partItems := h.partItems, map[string][]fleetwave.Item{}
	h.partItems = nil
	var partsBuilt []string
	partItemsBuilt := 0 // the items of partsBuilt: partsTake
	// a rollout not finished yet: nodesDue
	active := false
	// a rollout whose items are still being created (Rollout.Filling):
	// left out, and the nodes' documents, which list the items waiting on
	// each node, with it
	filling := false
	var rolloutsRead time.Duration // of the rollouts step: reading their items
	for i := range rollouts {
		r := rollouts[i]
		lines = append(lines, status.RolloutLine{ID: r.ID, Status: r.Status, Reason: r.Reason, Wave: r.Wave,
			Source: fmt.Sprintf("%s@%d", r.Source.Object, r.Source.Generation), Counters: r.Counters})
		if newest == nil || r.UpdatedAt.After(newest.UpdatedAt) {
			newest = &rollouts[i]
		}
		if r.Hold == fleetwave.ReasonClaim {
			claimed = append(claimed, r.ID)
		}
		done := r.Status.Finished()
		active = active || !done
		if done && h.rolloutsWritten[r.ID] && !changed[r.ID] {
			continue // its final document is committed: the file stays as it is
		}
		if r.Filling {
			// its items still being created: read once they all are, by
			// a write after this one. At 100,000 items a write that read
			// them while the creation's scripts ran took 9.6 s for that
			// alone (the slowest write of every run), and built the nodes'
			// documents without the items not created yet.
			filling = true
			continue
		}
		readStart := time.Now()
		_, chunks, err := h.eng.RolloutChunks(ctx, r.ID)
		if err != nil {
			return statusBatch{}, fmt.Errorf("rollout %s: %w", r.ID, err)
		}
		rolloutsRead += time.Since(readStart)
		// the items in one slice, in a buffer kept for the next write:
		// nothing built from it outlives this rollout's turn (partItems
		// keeps the engine's chunks, which are never written)
		items := h.itemsBuf[:0]
		for _, c := range chunks {
			items = append(items, c...)
		}
		h.itemsBuf = items
		for _, it := range items {
			if it.Status == fleetwave.ItemPending || it.Status == fleetwave.ItemAmbiguous {
				waitingByNode[it.Node] = append(waitingByNode[it.Node], status.WaitingItem{Rollout: r.ID, Item: it.ID, Block: it.Block,
					Action: it.Action, Status: it.Status, Reason: it.Reason})
			}
		}
		main, parts := status.NewRollout(r, items).Split()
		doc, err := status.EncodeRollout(main)
		if err != nil {
			return statusBatch{}, fmt.Errorf("rollout %s: %w", r.ID, err)
		}
		h.metrics.statusRolloutReads.Inc()
		files[status.RolloutPath(r.ID)] = doc
		for k, pt := range parts {
			path := status.RolloutPartPath(r.ID, pt.Part)
			// the engine's chunk holding the part's items, when the part
			// is one (both are of status.PartItems): unchanged since the
			// last write exactly when the engine returned the same chunk
			var chunk []fleetwave.Item
			if partsAreChunks && k < len(chunks) && len(chunks[k]) == len(pt.Items) {
				chunk = chunks[k]
			}
			// a part is made of its items alone: one whose items are those
			// it was last built from keeps its document
			if prev, ok := lastParts[path]; ok && h.rendered[path] != nil && (sameChunk(prev, chunk) || slices.Equal(prev, pt.Items)) {
				partItems[path] = prev
				if h.keepRendered(files, path) {
					rendered = append(rendered, path)
				}
				continue
			}
			data, err := status.RenderRolloutPart(pt)
			if err != nil {
				return statusBatch{}, fmt.Errorf("rollout %s part %d: %w", r.ID, pt.Part, err)
			}
			if h.writeRendered(files, path, data) {
				rendered = append(rendered, path)
			}
			if chunk != nil {
				partItems[path] = chunk // never written: kept as is
			} else {
				partItems[path] = slices.Clone(pt.Items)
			}
			partsBuilt = append(partsBuilt, path)
			partItemsBuilt += len(pt.Items)
		}
		if done {
			finished = append(finished, r.ID)
		}
	}
	steps.Lap("rollouts")
	sort.Slice(lines, func(i, j int) bool { return lines[i].ID < lines[j].ID })
	if newest != nil {
		c := newest.Counters
		subject = fmt.Sprintf("status: rollout %s %s wave %d, %d/%d done, %d failed", newest.ID, newest.Status, newest.Wave, c.Done, c.Total, c.Failed)
		rolloutID = newest.ID
		if newest.Source.Object != "" {
			generation = fmt.Sprintf("%s@%d", newest.Source.Object, newest.Source.Generation)
		}
	}
	if syncState.Result == "rejected" {
		subject = fmt.Sprintf("status: commit %s rejected (%d errors)", short(syncState.Commit), len(syncState.Errors))
	}

	syncDoc := status.Sync{Commit: syncState.Commit, Applied: syncState.Applied, Result: syncState.Result, Message: syncState.Message}
	for _, fe := range syncState.Errors {
		syncDoc.Errors = append(syncDoc.Errors, fe.Error())
	}
	lanes, err := h.eng.LaneCounters(ctx)
	if err != nil {
		return statusBatch{}, err
	}
	summary := status.Summary{
		Counters: fleetwave.FleetCounters(rollouts),
		History:  history,
		Lanes:    lanes,
		Sync:     syncDoc,
		Rollouts: lines,
	}
	h.mu.Lock()
	nextFire, holds, problems := h.nextFire, h.holds, h.problems
	h.mu.Unlock()
	// the instances held back, and why: counted in the summary, listed in
	// their nodes' documents
	held := append(append([]reconciler.Problem{}, holds...), problems...)
	// every node's drift, worked out again for the nodes whose report or
	// snapshot changed (nil snap: none)
	h.drift.Update(snap, obs, h.clock.Now(), h.cfg.StaleAfter.D(), h.reconcilerOptions())
	if snap != nil {
		summary.Generations = generationSummary(snap, obs)
		summary.Nodes = new(len(snap.Nodes))
		summary.ReconcileMode = snap.Config.ReconcileMode
	}
	if len(nextFire) > 0 {
		summary.Schedules = map[string]status.Schedule{}
		for name, t := range nextFire {
			summary.Schedules[name] = status.Schedule{NextFireAt: t.UTC()}
		}
	}
	requests, err := h.requestStatuses(ctx, snap, rollouts)
	if err != nil {
		return statusBatch{}, err
	}
	if len(requests) > 0 {
		summary.Requests = requests
	}
	h.mu.Lock()
	quiet, gated, cursor := h.quiet, h.gated, h.approvalCursor
	// who changed the fleet: the latest commits to brc/, blocks/ and
	// nodes/ with their verified signer (or unsigned)
	for _, c := range h.signerLog {
		summary.SignedChanges = append(summary.SignedChanges, status.SignedChange{Commit: c.Commit, Signer: c.Signer, Paths: slices.Clone(c.Paths)})
	}
	h.mu.Unlock()
	if waits := mergeWaits(quiet, gated); len(waits) > 0 {
		summary.Waiting = waits
	}
	approvals, err := h.eng.Approvals(ctx)
	if err != nil {
		return statusBatch{}, err
	}
	if err := h.approvalDocs(approvals, files); err != nil {
		return statusBatch{}, err
	}
	// the policy in force (plan reads it), the requests by state, and the
	// last commit whose approvals/ changes were processed
	summary.Approval = &status.ApprovalSummary{Required: h.cfg.Approval.Required, TTL: h.cfg.Approval.TTL.D().String(),
		Scope: h.cfg.Approval.Scope, Requests: approvalCounts(approvals), Cursor: cursor}
	if len(held) > 0 {
		summary.HeldInstances = map[string]int{}
		for _, p := range held {
			summary.HeldInstances[p.Reason]++
		}
	}
	// The highest generation ever given to each object: restored from
	// there when the mirror is lost, so generations never go down. Read
	// and rendered only when one changed.
	markChanges, v, whole := h.repo.HighWaterChanges(h.marksVersion)
	switch {
	case whole:
		h.marks = markChanges
	case markChanges != nil:
		maps.Copy(h.marks, markChanges)
	}
	switch {
	case markChanges != nil && (len(h.marks) > 0 || h.rendered[status.GenerationMarksPath] != nil):
		j, err := status.GenerationMarksJSON(status.GenerationMarks{Marks: h.marks})
		if err != nil {
			return statusBatch{}, fmt.Errorf("generation marks: %w", err)
		}
		data, err := status.RenderJSON(j)
		if err != nil {
			return statusBatch{}, fmt.Errorf("generation marks: %w", err)
		}
		if h.writeRendered(files, status.GenerationMarksPath, data) {
			rendered = append(rendered, status.GenerationMarksPath)
		}
		h.marksVersion = v
	case markChanges != nil:
		h.marksVersion = v // none yet: no document
	default:
		if h.keepRendered(files, status.GenerationMarksPath) {
			rendered = append(rendered, status.GenerationMarksPath)
		}
	}
	doc, err := status.EncodeSummary(summary)
	if err != nil {
		return statusBatch{}, fmt.Errorf("summary: %w", err)
	}
	files[status.SummaryPath] = doc
	steps.Lap("summary")

	b := statusBatch{files: files, subject: subject, rollout: rolloutID, generation: generation, finished: finished, held: claimed, requests: requests, lost: lost,
		rendered: rendered, partsBuilt: partsBuilt, filling: filling, rolloutsRead: rolloutsRead}
	nodesNow := !filling && h.nodesDue(time.Now(), active)
	yield := nodesNow && h.partsTake(partItemsBuilt)
	if nodesNow && !yield {
		limit := h.nodesPerWrite
		if h.nodesAll {
			limit = 0
		}
		if err := h.nodeFiles(&b, snap, obs, waitingByNode, held, limit); err != nil {
			return statusBatch{}, err
		}
		h.nodesYielded = false
	} else {
		// left for a later write: their documents as last built stay
		h.nodesOwed, b.nodesLeft = true, true
		if yield { // the next write builds them, whatever it builds
			h.nodesForce, h.nodesYielded = true, true
		}
	}
	h.partItems = partItems
	steps.Lap("nodes")
	return b, nil
}

// nodeFiles builds into b the documents of the nodes whose inputs changed
// since they were last built (nodeInputs) and keeps the others': the
// observed nodes, then those only the snapshot lists. waitingByNode and
// held are what each node waits on and what holds its instances. It
// builds at most limit documents (0: all), keeping the others' as last
// built for the next write, which then comes at the next interval
// whatever else changed (nodesForce).
func (h *Hub) nodeFiles(b *statusBatch, snap *fleetwave.Snapshot, obs fleetwave.Observations, waitingByNode map[string][]status.WaitingItem, held []reconciler.Problem, limit int) error {
	nodesStart := time.Now()
	versions := h.history.of(nil)
	heldByNode := map[string][]status.Held{}
	for _, p := range held {
		heldByNode[p.Node] = append(heldByNode[p.Node], status.Held{Block: p.Block, BRC: p.Trigger, Reason: p.Reason, Message: p.Message})
	}
	// kept only once every document is built: a build that fails part
	// way leaves documents newer than what the kept inputs say. They are
	// updated in place: at 100,000 nodes, building a new map of them and
	// every node's instances for each write cost more than the documents
	// a write changes.
	inputs := h.nodeInputs
	h.nodeInputs = nil
	if inputs == nil {
		inputs = make(map[string]*nodeInputs, len(obs))
	}
	var built []string
	seen, left := 0, 0
	// the nodes the last write left (limit) first, in the order they were
	// first left, so that a node waits at most for the ones left before
	// it; then the observed nodes with their reports, then the others the
	// snapshot lists
	var leftNow []string
	first := make(map[string]bool, len(h.nodesLeftOut))
	for _, id := range h.nodesLeftOut {
		first[id] = true
	}
	listed := func(id string) bool { return obs[id] != nil || (snap != nil && snap.Nodes[id] != nil) }
	nodes := func(yield func(string, *fleetwave.Report) bool) {
		for _, id := range h.nodesLeftOut {
			if listed(id) && !yield(id, obs[id]) {
				return
			}
		}
		for id, r := range obs {
			if !first[id] && !yield(id, r) {
				return
			}
		}
		if snap != nil {
			for id := range snap.Nodes {
				if obs[id] == nil && !first[id] && !yield(id, nil) {
					return
				}
			}
		}
	}
	for node, r := range nodes {
		seen++
		last := inputs[node] // nil: none yet
		had := last != nil
		in := nodeInputs{drift: h.drift.Of(node), hist: versions[node], waiting: waitingByNode[node], held: heldByNode[node], snap: snap}
		if r != nil {
			in.reported, in.agentVersion, in.capabilities = true, r.AgentVersion, r.Capabilities
			if had && sameInstances(last.instances, r.Instances) {
				in.instances = last.instances
			} else {
				for _, is := range r.Instances { // nil when none: the document says null
					in.instances = append(in.instances, status.Instance{Block: is.Block, Version: is.Version, ConfigHash: is.ConfigHash,
						Generation: is.Generation, State: is.State, ManagedBy: is.ManagedBy})
				}
				sort.Slice(in.instances, func(i, j int) bool { return in.instances[i].Block < in.instances[j].Block })
			}
		}
		switch {
		case had && last.snap == snap && snap != nil:
			// the same snapshot (never changed in place) says the same
			in.inSnapshot, in.drain = last.inSnapshot, last.drain
		case snap != nil:
			if n := snap.Nodes[node]; n != nil {
				in.inSnapshot, in.drain = true, n.Drain
			}
		}
		if w := in.waiting; len(w) > 1 {
			sort.Slice(w, func(i, j int) bool { return w[i].Item < w[j].Item })
		}
		if hl := in.held; len(hl) > 1 {
			sort.Slice(hl, func(i, j int) bool { return hl[i].Block+hl[i].BRC < hl[j].Block+hl[j].BRC })
		}
		if had && last.doc != nil && in.same(*last) {
			// built from what the document was built from last time (and
			// no older snapshot kept alive by it)
			last.snap = snap
			if last.doc.data != nil { // not landed yet (keepRendered)
				b.files[last.path] = last.doc.data
				b.rendered = append(b.rendered, last.path)
			}
			continue
		}
		if limit > 0 && len(built) >= limit {
			// left for the next write, its inputs as they were: the
			// document as last built stays
			left++
			leftNow = append(leftNow, node)
			if had && last.doc != nil && last.doc.data != nil {
				b.files[last.path] = last.doc.data
				b.rendered = append(b.rendered, last.path)
			}
			continue
		}
		path := ""
		if had {
			path = last.path
		} else {
			path = status.NodePath(node)
		}
		built = append(built, node)
		ns := status.Node{Node: node, Instances: []status.Instance{}}
		if in.reported {
			ns.Reported, ns.AgentVersion, ns.Capabilities, ns.Instances = true, in.agentVersion, in.capabilities, in.instances
		}
		if in.snap != nil {
			if in.inSnapshot {
				ns.Drain = new(in.drain)
			} else {
				ns.UnknownNode = true
			}
		}
		for _, d := range in.drift {
			ns.Drift = append(ns.Drift, status.Drift{Node: d.Node, Block: d.Block, Trigger: d.Trigger, Kind: d.Kind, Desired: d.Desired, Observed: d.Observed})
		}
		if len(in.hist) > 0 {
			ns.ObservedVersions = in.hist // never forgotten: the rollback guard reads them
		}
		if len(in.waiting) > 0 {
			ns.Waiting = in.waiting
		}
		if len(in.held) > 0 {
			ns.Held = in.held
		}
		data, err := status.RenderNode(ns)
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		if h.writeRendered(b.files, path, data) {
			b.rendered = append(b.rendered, path)
		}
		in.path, in.doc = path, h.rendered[path]
		if had {
			*last = in
		} else {
			inputs[node] = &in
		}
	}
	if len(inputs) > seen { // nodes neither observed nor listed any longer
		for id := range inputs {
			if obs[id] == nil && (snap == nil || snap.Nodes[id] == nil) {
				delete(inputs, id)
			}
		}
	}
	h.nodeInputs, b.nodesBuilt, b.nodesLeft, b.nodesOwed, h.nodesLeftOut = inputs, built, left > 0, left, leftNow
	h.nodesLast, h.nodesTook = nodesStart, time.Since(nodesStart)
	h.nodesOwed, h.nodesForce, h.nodesAll = left > 0, left > 0, false
	return nil
}

// nodeInputs is what a node's status document is built from, by value. A
// node whose inputs are those its document was last built from keeps that
// document, neither encoded nor digested again: at 100,000 nodes, building
// every node's document for each status write (its JSON and digest) was a
// fifth of the write's CPU, while a write changes a few thousand.
type nodeInputs struct {
	// what the document says of the node's report, when it reported
	reported     bool
	agentVersion string
	capabilities []string
	instances    []status.Instance // by block
	// inSnapshot: the node is in the snapshot in force (snap, below)
	inSnapshot, drain bool
	drift             []reconciler.DriftEntry
	hist              map[string][]string
	waiting           []status.WaitingItem
	held              []status.Held
	// path is the document's, and doc what it was last rendered as
	// (Hub.rendered's entry): an unchanged node is neither looked up there
	// nor its path built again (two lookups and a string each of 100,000
	// nodes a write)
	path string
	doc  *renderedDoc
	// snap is the snapshot in force (nil: none yet), which inSnapshot and
	// drain were read from
	snap *fleetwave.Snapshot
}

// partsAreChunks: the parts of a large rollout's status hold as many
// items as the engine's chunks (every chunk but the last is full), so the
// k-th part's items are the k-th chunk's.
const partsAreChunks = status.PartItems == engine.KeptChunk

// sameChunk says whether a and b are the same chunk of the engine's
// (engine.RolloutChunks): the same items at the same address, which the
// engine never writes again.
func sameChunk(a, b []fleetwave.Item) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// sameInstances says whether the instances of a node's document (sorted by
// block) are those observed, in the order observed.
func sameInstances(doc []status.Instance, obs []fleetwave.InstanceStatus) bool {
	if len(doc) != len(obs) {
		return false
	}
	for i, is := range obs {
		d := doc[i]
		if d.Block != is.Block || d.Version != is.Version || d.ConfigHash != is.ConfigHash || d.Generation != is.Generation ||
			d.State != is.State || d.ManagedBy != is.ManagedBy {
			return false
		}
	}
	return true
}

func (a nodeInputs) same(b nodeInputs) bool {
	return a.reported == b.reported && a.agentVersion == b.agentVersion && slices.Equal(a.capabilities, b.capabilities) &&
		slices.Equal(a.instances, b.instances) && (a.snap != nil) == (b.snap != nil) && a.inSnapshot == b.inSnapshot && a.drain == b.drain &&
		slices.Equal(a.drift, b.drift) && slices.Equal(a.waiting, b.waiting) && slices.Equal(a.held, b.held) &&
		maps.EqualFunc(a.hist, b.hist, slices.Equal)
}

// requestStatuses builds the "requests" section: every request the engine
// handled, every one Git says was handled (kept as committed when the
// engine no longer knows it), and the requests of the snapshot not handled
// yet.
func (h *Hub) requestStatuses(ctx context.Context, snap *fleetwave.Snapshot, rollouts []fleetwave.Rollout) (map[string]fleetwave.RequestStatus, error) {
	out := map[string]fleetwave.RequestStatus{}
	h.mu.Lock()
	for name, r := range h.gitRequests {
		out[name] = r
	}
	waiting := h.requestsWaiting
	h.mu.Unlock()
	outcomes, err := h.eng.RequestOutcomes(ctx)
	if err != nil {
		return nil, err
	}
	for name, o := range outcomes {
		out[name] = fleetwave.RequestStatus{State: fleetwave.RequestRefused, Code: o.Code, Message: o.Message}
	}
	for _, r := range rollouts {
		if r.Source.Object.Kind() != fleetwave.KindRollout {
			continue
		}
		st := fleetwave.RequestStatus{Rollout: r.ID, State: string(r.Status)}
		if r.Hold == fleetwave.ReasonClaim {
			st.State = fleetwave.RequestClaimed
		}
		out[r.Source.Object.Name()] = st
	}
	if snap != nil {
		for name := range snap.Rollouts {
			if _, ok := out[name]; ok {
				continue
			}
			code := waiting[name]
			if code == "" {
				code = "not_planned_yet"
			}
			out[name] = fleetwave.RequestStatus{State: fleetwave.RequestWaiting, Code: code}
		}
	}
	return out, nil
}

// loadGitRecords takes, once per leadership (fence), what the status
// committed to Git records (followStatus keeps it up to date): the manual
// requests handled, which after Redis lost its data are what keeps a
// request from running again; the approval records and cursor; the
// unfinished rollouts Redis no longer has, closed.
func (h *Hub) loadGitRecords(ctx context.Context, fence int64) {
	rec := &h.records
	rec.mu.Lock()
	defer rec.mu.Unlock()
	h.mu.Lock()
	done := h.gitFence == fence
	h.mu.Unlock()
	if done {
		return
	}
	if h.beforeRecords != nil {
		h.beforeRecords()
	}
	// the status branch as the remote has it now: a follower taking the
	// lease fetched most of it when it caught up (catchUp), and a catch-up
	// still running is waited for
	steps := laps.Begin(time.Now())
	if err := h.repo.FetchStatus(ctx); err != nil && ctx.Err() == nil {
		h.log.Warn().Str("error", redactCause(err.Error())).Msg("fetch the status branch; its records read as the mirror has them")
	}
	steps.Lap("fetch")
	if err := h.followStatus(ctx); err != nil {
		h.log.Warn().Err(err).Msg("read status branch; requests known only from redis")
		return
	}
	steps.Lap("records")
	handled := maps.Clone(rec.handled)
	if handled == nil {
		handled = map[string]fleetwave.RequestStatus{}
	}
	file, failed := h.statusFileAt(ctx, rec.tip)
	lost := h.closeLostRollouts(ctx, slices.Sorted(maps.Keys(rec.open)), file, handled)
	if err := failed(); err != nil {
		h.log.Warn().Err(err).Str("status_commit", short(rec.tip)).Msg("read unfinished rollouts' status")
	}
	h.mu.Lock()
	h.gitRequests, h.gitFence, h.lostDocs = handled, fence, lost
	h.gitApprovals = maps.Clone(rec.approvals)
	if h.approvalCursor == "" {
		h.approvalCursor = rec.cursor
	}
	h.mu.Unlock()
	h.restoreApprovals(ctx, fence)
	steps.Lap("lost")
	h.log.Info().Int("requests", len(handled)).Int64("fence", fence).Str("status_commit", short(rec.tip)).Func(lapFields(steps)).
		Msg("status records read")
}

// closeLostRollouts finds, among the rollouts whose document in Git is
// not finished (open; their files read through file), those the engine
// does not know: Redis lost them. Nothing can run their remaining items
// safely (the payloads were only in Redis, a one-shot action may have
// run), so each is closed: cancelled with reason state_lost, its pending
// items skipped, its items that were in flight blocked (whether their
// attempt ran is unknown: check the node), counters recomputed. The
// handled requests they served are updated to match. It returns the
// closed documents, committed by the next status write; a trigger's
// rollout is planned again from the observations, a manual request is not.
func (h *Hub) closeLostRollouts(ctx context.Context, open []string, file func(string) ([]byte, bool), handled map[string]fleetwave.RequestStatus) map[string]map[string][]byte {
	lost := map[string]map[string][]byte{}
	for _, id := range open {
		if _, err := h.eng.RolloutRecord(ctx, id); !errors.Is(err, engine.ErrNotFound) {
			continue // the engine has it (or cannot say now): it writes the document
		}
		path := status.RolloutPath(id)
		data, ok := file(path)
		if !ok {
			continue
		}
		doc, err := status.ReadRollout(id, data, file)
		if err != nil {
			h.log.Warn().Err(err).Str("path", path).Msg("rollout status unreadable; left as it is")
			continue
		}
		if doc.Rollout.Status.Finished() || doc.Rollout.ID != id {
			continue
		}
		r := doc.Rollout
		r.Status, r.Reason, r.UpdatedAt = fleetwave.RolloutCancelled, fleetwave.ReasonStateLost, h.clock.Now().UTC()
		r.Counters = fleetwave.Counters{}
		for i := range doc.Items {
			it := &doc.Items[i]
			if !it.Status.Terminal() {
				if it.Status == fleetwave.ItemPending {
					it.Status = fleetwave.ItemSkipped
				} else {
					it.Status = fleetwave.ItemBlocked
					it.Message = "the hub lost this item's state while its attempt could have run: check the node"
				}
				it.Reason = fleetwave.ReasonStateLost
			}
			r.Counters.Add(it.Status, 1)
		}
		out, err := status.RolloutFiles(status.NewRollout(r, doc.Items))
		if err != nil {
			h.log.Warn().Err(err).Str("rollout", id).Msg("close lost rollout")
			continue
		}
		lost[id] = out
		for name, rs := range handled {
			if rs.Rollout == id {
				rs.State = string(fleetwave.RolloutCancelled)
				handled[name] = rs
			}
		}
		h.log.Warn().Str("rollout", id).Str("reason", fleetwave.ReasonStateLost).Int64("failed", r.Counters.Failed).
			Msg("rollout lost with redis's data: closed in status, not run again")
	}
	return lost
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// generationSummary gives, per trigger, the desired generation and the
// lowest generation its in-scope instances report (0: some not reported).
func generationSummary(snap *fleetwave.Snapshot, obs fleetwave.Observations) map[fleetwave.ObjectKey]status.Generation {
	out := map[fleetwave.ObjectKey]status.Generation{}
	for name, t := range snap.Triggers {
		key := fleetwave.Key(fleetwave.KindTrigger, name)
		observed := int64(-1)
		for _, id := range reconciler.Scope(snap, t) {
			g := int64(0)
			if in := obs.Instance(fleetwave.InstanceKey{Node: id, Block: t.BlockName}); in != nil {
				g = in.Generation
			}
			if observed < 0 || g < observed {
				observed = g
			}
		}
		out[key] = status.Generation{Desired: snap.Generation(key), Observed: max(observed, 0)}
	}
	return out
}

// mergeWaits is the "waiting" of status and the API: per BRC, the
// quiescence it waits out or the approval it needs.
func mergeWaits(quiet map[string]time.Time, gated map[string]fleetwave.Wait) map[string]fleetwave.Wait {
	out := map[string]fleetwave.Wait{}
	for name, until := range quiet {
		out[name] = fleetwave.Wait{Reason: fleetwave.ReasonQuiescence, Until: until.UTC(),
			Message: "waits until the BRC saw no newer commit for its quiescence_seconds"}
	}
	for name, w := range gated {
		out[name] = w
	}
	return out
}
