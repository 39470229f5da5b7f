package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// ErrInvalidCursor: the cursor of RolloutPage is not an item of that
// rollout. A client that sent it starts again without one.
var ErrInvalidCursor = errors.New("cursor is not an item of the rollout")

// RolloutPage returns one rollout and at most limit of its items in
// dispatch order: those after item after ("" for the first page), and
// whether more follow. The rollout's counters are its own, for every item,
// not the page's. ErrNotFound when there is no such rollout,
// ErrInvalidCursor when after is not one of its items.
//
// A rollout's item list only grows (create_rollout.lua appends, nothing
// removes), and item ids are "<rollout>.<position>" with position its
// index in the list plus one; so after names its own place, the page is
// read with one LRANGE and one pipelined HGETALL per item (two round
// trips, whatever the rollout's size), and a walk that follows the
// cursors meets every item exactly once, in order, while items change
// state or join the rollout meanwhile. Each page is read at its own
// moment: the statuses of two pages may be from different instants.
func (e *Engine) RolloutPage(ctx context.Context, id, after string, limit int) (fleetwave.Rollout, []fleetwave.Item, bool, error) {
	if limit < 1 {
		return fleetwave.Rollout{}, nil, false, fmt.Errorf("rollout page of %s: limit %d, want at least 1", id, limit)
	}
	// start is the list index of the cursor (which the page skips), or
	// 0 for the first page (which it does not).
	start, skip := int64(0), 0
	if after != "" {
		pos, ok := strings.CutPrefix(after, id+".")
		n, err := strconv.ParseInt(pos, 10, 64)
		if !ok || err != nil || n < 1 || strconv.FormatInt(n, 10) != pos {
			return fleetwave.Rollout{}, nil, false, fmt.Errorf("rollout %s, cursor %q: %w", id, after, ErrInvalidCursor)
		}
		start, skip = n-1, 1
	}
	pipe := e.rdb.Pipeline()
	head := pipe.HGetAll(ctx, e.key("r", id))
	// the cursor, the page and one more: whether more follow
	ids := pipe.LRange(ctx, e.key("r", id)+":items", start, start+int64(skip+limit))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fleetwave.Rollout{}, nil, false, fmt.Errorf("read rollout %s: %w", id, err)
	}
	m := head.Val()
	if len(m) == 0 {
		return fleetwave.Rollout{}, nil, false, fmt.Errorf("rollout %s: %w", id, ErrNotFound)
	}
	list := ids.Val()
	if skip == 1 {
		if len(list) == 0 || list[0] != after {
			return fleetwave.Rollout{}, nil, false, fmt.Errorf("rollout %s, cursor %q: %w", id, after, ErrInvalidCursor)
		}
		list = list[1:]
	}
	more := len(list) > limit
	if more {
		list = list[:limit]
	}
	items, err := e.items(ctx, list)
	if err != nil {
		return fleetwave.Rollout{}, nil, false, err
	}
	return e.decodeRollout(m), items, more, nil
}
