package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Rollout returns one rollout and its items in dispatch order; ErrNotFound
// when there is no such rollout.
//
// Every status commit reads each open rollout whole, and at 100,000 items
// that read was most of a commit. So the Engine keeps the items of the
// open rollouts it read, and every script that writes an item marks it
// with the change counter it leaves (hset_i, zset ichg:<rollout>): Rollout
// reads again only the items marked above the counter its last read of
// the rollout saw, and the items appended to its list since. It reads a
// rollout whole when it cannot trust the marks, as Observe does (first
// read, another run_id, the counter gone back, fullObserveEvery), and
// keeps no finished rollout nor more than keptItemsMax items in all. A
// rollout it creates in chunks it reads as the chunks land (warm).
func (e *Engine) Rollout(ctx context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
	r, chunks, err := e.RolloutChunks(ctx, id)
	if err != nil {
		return r, nil, err
	}
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	items := make([]fleetwave.Item, 0, n)
	for _, c := range chunks {
		items = append(items, c...)
	}
	return r, items, nil
}

// KeptChunk is how many items one chunk of RolloutChunks holds (the last
// chunk may hold fewer): as many as a part of a large rollout's status
// document holds.
const KeptChunk = 1000

// RolloutChunks is Rollout with the items in chunks of KeptChunk, in
// dispatch order, shared with the Engine: the caller must not write them.
// A chunk is never written once returned: a later read that finds one of
// its items changed (or appends to it) makes a new chunk. So a chunk
// returned again is the same slice (its first element at the same
// address) exactly when none of its items changed between the two reads,
// which lets a status write tell the parts it need not render again
// without comparing their items; and no read copies a rollout's items
// whole (at 100,000 items, 39 MB a status write).
func (e *Engine) RolloutChunks(ctx context.Context, id string) (fleetwave.Rollout, [][]fleetwave.Item, error) {
	return e.rolloutChunks(ctx, id, &e.log)
}

// rolloutChunks is RolloutChunks, logging to log.
func (e *Engine) rolloutChunks(ctx context.Context, id string, log *zerolog.Logger) (fleetwave.Rollout, [][]fleetwave.Item, error) {
	k := e.kept.get(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	runID := e.serverRunID(ctx)
	now := e.clock.Now()
	incremental := k.at.fresh(now)
	for {
		list := e.key("r", id) + ":items"
		// one transaction: a script run between the marks and the
		// rollout's record (which a plain pipeline allows) would give a
		// rollout newer than the items its marks say to read again, a
		// completed rollout with an item still in progress
		pipe := e.rdb.TxPipeline()
		marks := e.queueMarks(ctx, pipe, e.key("ichg", id), k.at, incremental)
		rec := pipe.HGetAll(ctx, e.key("r", id))
		var ids *redis.StringSliceCmd
		if incremental {
			ids = pipe.LRange(ctx, list, int64(len(k.ids)), -1)
		} else {
			ids = pipe.LRange(ctx, list, 0, -1)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			e.kept.drop(id, k)
			return fleetwave.Rollout{}, nil, fmt.Errorf("read rollout %s: %w", id, err)
		}
		version, server, trusted, err := e.checkMarks(ctx, marks, runID, k.at, log)
		if err != nil {
			e.kept.drop(id, k)
			return fleetwave.Rollout{}, nil, err
		}
		m := rec.Val()
		if len(m) == 0 {
			e.kept.drop(id, k)
			return fleetwave.Rollout{}, nil, fmt.Errorf("rollout %s: %w", id, ErrNotFound)
		}
		if !trusted {
			incremental = false
			continue
		}
		r := e.decodeRollout(m)
		var read []string // the items to read: all, or the new and the marked ones
		if incremental {
			first := len(k.ids)
			k.ids = append(k.ids, ids.Val()...)
			for i := first; i < len(k.ids); i++ {
				k.pos[k.ids[i]] = i
			}
			read = slices.Clone(k.ids[first:])
			for _, it := range marks.marked.Val() {
				if p, ok := k.pos[it]; ok && p < first {
					read = append(read, it)
				}
			}
		} else {
			k.ids = ids.Val()
			k.pos = make(map[string]int, len(k.ids))
			for i, it := range k.ids {
				k.pos[it] = i
			}
			read = k.ids
		}
		got, err := e.items(ctx, read)
		if err != nil {
			e.kept.drop(id, k)
			return fleetwave.Rollout{}, nil, err
		}
		if incremental {
			k.chunks = k.updated(read, got)
			k.at.ver = version
		} else {
			k.chunks = chunksOf(got)
			k.at = obsMark{ver: version, server: server, full: now}
		}
		chunks := k.chunks
		if !openStatus[string(r.Status)] || !e.kept.fits(id, k) {
			e.kept.drop(id, k)
		}
		return r, chunks, nil
	}
}

// chunksOf cuts items into chunks of KeptChunk, each with no room beyond
// its length (an append never writes into the next).
func chunksOf(items []fleetwave.Item) [][]fleetwave.Item {
	chunks := make([][]fleetwave.Item, 0, (len(items)+KeptChunk-1)/KeptChunk)
	for lo := 0; lo < len(items); lo += KeptChunk {
		hi := min(lo+KeptChunk, len(items))
		chunks = append(chunks, items[lo:hi:hi])
	}
	return chunks
}

// updated returns the chunks of k (its mu held) with the items read put
// at their positions (k.pos), the new ones appended: a chunk with an item
// changed or added is a copy, the others are shared with the chunks
// returned before, as is everything when nothing was read. Nothing
// returned before is written.
func (k *keptRollout) updated(read []string, got []fleetwave.Item) [][]fleetwave.Item {
	if len(got) == 0 {
		return k.chunks
	}
	chunks := slices.Clone(k.chunks)
	own := map[int]bool{} // the chunks copied (or made) by this read
	for i, it := range got {
		p := k.pos[read[i]]
		c, j := p/KeptChunk, p%KeptChunk
		for c >= len(chunks) {
			chunks = append(chunks, nil)
		}
		if !own[c] {
			chunks[c] = append(make([]fleetwave.Item, 0, KeptChunk), chunks[c]...)
			own[c] = true
		}
		if j >= len(chunks[c]) {
			chunks[c] = chunks[c][:j+1]
		}
		chunks[c][j] = it
	}
	return chunks
}

// keptItemsMax bounds the items kept of all open rollouts together: a
// rollout that would pass it is read whole every time.
const keptItemsMax = 500_000

// keptRollouts are the open rollouts Rollout keeps, by id.
type keptRollouts struct {
	mu    sync.Mutex
	byID  map[string]*keptRollout
	total int // the items kept, of all (for keptItemsMax)
}

// keptRollout is one rollout's items as last read; mu serialises the
// reads of the rollout and guards the rest.
type keptRollout struct {
	mu  sync.Mutex
	at  obsMark  // the counter its items are current to (0: none kept)
	ids []string // the rollout's item list
	// chunks are its items decoded, in list order, KeptChunk a chunk:
	// never written once returned (updated copies a chunk it changes)
	chunks [][]fleetwave.Item
	pos    map[string]int // item id -> index in ids
	n      int            // the items counted in keptRollouts.total
}

// get returns the entry of rollout id, a new one when none is kept.
func (ks *keptRollouts) get(id string) *keptRollout {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.byID == nil {
		ks.byID = map[string]*keptRollout{}
	}
	k := ks.byID[id]
	if k == nil {
		k = &keptRollout{}
		ks.byID[id] = k
	}
	return k
}

// fits counts the items of k (rollout id's entry, its mu held) in the
// total, unless that passes keptItemsMax or k is no longer id's entry.
func (ks *keptRollouts) fits(id string, k *keptRollout) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.byID[id] != k || ks.total-k.n+len(k.ids) > keptItemsMax {
		return false
	}
	ks.total += len(k.ids) - k.n
	k.n = len(k.ids)
	return true
}

// drop forgets what k (rollout id's entry, its mu held) kept.
func (ks *keptRollouts) drop(id string, k *keptRollout) {
	k.at, k.ids, k.chunks, k.pos = obsMark{}, nil, nil, nil
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.byID[id] == k {
		delete(ks.byID, id)
		ks.total -= k.n
	}
	k.n = 0
}

// warmTimeout bounds each background read of a rollout being created.
const warmTimeout = time.Minute

// warming is the rollouts a background read keeps current while their
// chunks are created (warm): again says that another chunk landed during
// the read under way, which then reads once more.
type warming struct {
	mu     sync.Mutex
	byID   map[string]*warmState
	finish sync.WaitGroup // the reads under way (tests wait for them)
}

type warmState struct{ again bool }

// warm brings the kept items of rollout id up to date in the background,
// after a chunk of its creation landed: the items the chunk created are
// read then, a chunk's worth at a time, beside the creation's next
// scripts, not all at once by the first status write after it. At
// 100,000 items that write read the rollout whole in 2.7 to 9.5 s (the
// slowest write of every run); now it reads only the items changed since
// the last chunk. One read runs per rollout at a time; a chunk that lands
// meanwhile makes it read once more.
//
// The read logs nothing (it may outlive its caller, which a test's
// logger does not allow) and drops the kept items on an error: the next
// read reads the rollout whole.
func (e *Engine) warm(ctx context.Context, id string) {
	w := &e.warming
	w.mu.Lock()
	defer w.mu.Unlock()
	if st, ok := w.byID[id]; ok {
		st.again = true
		return
	}
	if w.byID == nil {
		w.byID = map[string]*warmState{}
	}
	st := &warmState{}
	w.byID[id] = st
	w.finish.Add(1)
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer w.finish.Done()
		quiet := zerolog.Nop()
		for {
			rctx, cancel := context.WithTimeout(ctx, warmTimeout)
			_, _, err := e.rolloutChunks(rctx, id, &quiet)
			cancel()
			w.mu.Lock()
			if err != nil || !st.again {
				delete(w.byID, id)
				w.mu.Unlock()
				return
			}
			st.again = false
			w.mu.Unlock()
		}
	}()
}
