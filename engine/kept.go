package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

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
// keeps no finished rollout nor more than keptItemsMax items in all.
func (e *Engine) Rollout(ctx context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
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
		version, server, trusted, err := e.checkMarks(ctx, marks, runID, k.at)
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
		r := decodeRollout(m)
		var read []string // the items to read: all, or the new and the marked ones
		if incremental {
			first := len(k.ids)
			k.ids = append(k.ids, ids.Val()...)
			for i := first; i < len(k.ids); i++ {
				k.pos[k.ids[i]] = i
			}
			k.items = append(k.items, make([]fleetwave.Item, len(k.ids)-first)...)
			read = slices.Clone(k.ids[first:])
			for _, it := range marks.marked.Val() {
				if p, ok := k.pos[it]; ok && p < first {
					read = append(read, it)
				}
			}
		} else {
			k.ids = ids.Val()
			k.items = make([]fleetwave.Item, len(k.ids))
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
		for i, it := range got {
			k.items[k.pos[read[i]]] = it
		}
		if incremental {
			k.at.ver = version
		} else {
			k.at = obsMark{ver: version, server: server, full: now}
		}
		items := slices.Clone(k.items)
		if !openStatus[string(r.Status)] || !e.kept.fits(id, k) {
			e.kept.drop(id, k)
		}
		return r, items, nil
	}
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
	mu    sync.Mutex
	at    obsMark          // the counter its items are current to (0: none kept)
	ids   []string         // the rollout's item list
	items []fleetwave.Item // decoded, in list order
	pos   map[string]int   // item id -> index in ids
	n     int              // the items counted in keptRollouts.total
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
	k.at, k.ids, k.items, k.pos = obsMark{}, nil, nil, nil
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.byID[id] == k {
		delete(ks.byID, id)
		ks.total -= k.n
	}
	k.n = 0
}
