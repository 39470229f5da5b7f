package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Campaign tries to become the leader as owner for ttl. It returns a new,
// strictly higher fence when the lease was free or expired, the same fence
// when owner already holds it (the lease is then extended), and ErrNotLeader
// when another owner holds it. Every state change must pass the fence.
//
// A fence never goes back, even when Redis restarted without its data:
//   - the floor is the highest of WithFenceFloor's answer and the highest
//     fence this Engine held; when the epoch is missing or lower than the
//     floor, it is raised to the floor first and the lease, whoever holds
//     it, is void: the new fence is at least floor+1;
//   - the Redis run_id (INFO server) is recorded at every Campaign and
//     Renew; when it changed since this Engine last saw it, Redis restarted
//     (or failed over) and owner's lease, even still held, is replaced by a
//     new one with a higher fence, so attempts dispatched before carry an
//     older fence. A server that does not answer INFO server (miniredis)
//     skips this check.
func (e *Engine) Campaign(ctx context.Context, owner string, ttl time.Duration) (int64, error) {
	floor := int64(0)
	if e.floor != nil {
		f, err := e.floor(ctx)
		if err != nil {
			return 0, fmt.Errorf("fence floor: %w", err)
		}
		floor = f
	}
	runID := e.serverRunID(ctx)
	e.lmu.Lock()
	restart := e.runID != "" && runID != "" && runID != e.runID
	floor = max(floor, e.maxFence)
	e.lmu.Unlock()
	status, rest, err := e.run(ctx, "campaign", "", e.nowMS(), owner, ttl.Milliseconds(), floor, flag(restart))
	if err != nil {
		return 0, err
	}
	e.lmu.Lock()
	if runID != "" {
		e.runID = runID
	}
	e.lmu.Unlock()
	if restart {
		e.log.Warn().Str("owner", owner).Msg("redis restarted since the last lease: new epoch")
	}
	if status != "ok" {
		holder := ""
		if len(rest) > 0 {
			holder = asString(rest[0])
		}
		return 0, fmt.Errorf("lease held by %q: %w", holder, ErrNotLeader)
	}
	fence := asInt(rest[0])
	e.held(fence)
	e.log.Debug().Str("owner", owner).Int64("fence", fence).Msg("lease held")
	return fence, nil
}

// Renew extends the lease of owner at fence by ttl. It fails with
// ErrNotLeader once the lease was lost (taken over or resigned), and when
// Redis restarted since the last Campaign or Renew (its run_id changed):
// the lease is then dropped and the next Campaign gets a higher fence.
func (e *Engine) Renew(ctx context.Context, owner string, fence int64, ttl time.Duration) error {
	runID := e.serverRunID(ctx)
	e.lmu.Lock()
	restart := e.runID != "" && runID != "" && runID != e.runID
	if runID != "" {
		e.runID = runID
	}
	e.lmu.Unlock()
	status, _, err := e.run(ctx, "renew", fenceArg(fence), e.nowMS(), owner, ttl.Milliseconds(), flag(restart))
	if err != nil {
		return err
	}
	switch status {
	case "ok":
		e.held(fence)
		return nil
	case "restarted":
		e.log.Warn().Str("owner", owner).Int64("fence", fence).Msg("redis restarted: lease dropped")
		return fmt.Errorf("redis restarted: %w", ErrNotLeader)
	}
	e.log.Info().Str("owner", owner).Int64("fence", fence).Msg("lease lost")
	return ErrNotLeader
}

// Resign frees the lease of owner at fence so another replica can take over
// at once; ErrNotLeader when it was not held. The epoch is kept: the next
// leader gets a higher fence.
func (e *Engine) Resign(ctx context.Context, owner string, fence int64) error {
	status, _, err := e.run(ctx, "resign", fenceArg(fence), e.nowMS(), owner)
	if err != nil {
		return err
	}
	if status != "ok" {
		return ErrNotLeader
	}
	e.log.Info().Str("owner", owner).Int64("fence", fence).Msg("lease released")
	return nil
}

// held records fence as held by this Engine: later Campaigns never go below.
func (e *Engine) held(fence int64) {
	e.lmu.Lock()
	e.maxFence = max(e.maxFence, fence)
	e.lmu.Unlock()
}

// serverRunID returns the run_id of the Redis server holding the engine's
// keys, "" when it cannot be known (no INFO server, e.g. miniredis).
func (e *Engine) serverRunID(ctx context.Context) string {
	var c interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	} = e.rdb
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		// a cluster answers INFO from any node: ask the master of our slot
		m, err := cc.MasterForKey(ctx, e.keys[0])
		if err != nil {
			return ""
		}
		c = m
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v
		}
	}
	return ""
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
