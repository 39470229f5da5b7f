package engine

import (
	"context"
	"fmt"
	"time"
)

// Campaign tries to become the leader as owner for ttl. It returns a new,
// strictly higher fence when the lease was free or expired, the same fence
// when owner already holds it (the lease is then extended), and ErrNotLeader
// when another owner holds it. Every state change must pass the fence.
func (e *Engine) Campaign(ctx context.Context, owner string, ttl time.Duration) (int64, error) {
	status, rest, err := e.run(ctx, "campaign", "", e.nowMS(), owner, ttl.Milliseconds())
	if err != nil {
		return 0, err
	}
	if status != "ok" {
		holder := ""
		if len(rest) > 0 {
			holder = asString(rest[0])
		}
		return 0, fmt.Errorf("lease held by %q: %w", holder, ErrNotLeader)
	}
	fence := asInt(rest[0])
	e.log.Debug().Str("owner", owner).Int64("fence", fence).Msg("lease held")
	return fence, nil
}

// Renew extends the lease of owner at fence by ttl. It fails with
// ErrNotLeader once the lease was lost (taken over or resigned).
func (e *Engine) Renew(ctx context.Context, owner string, fence int64, ttl time.Duration) error {
	status, _, err := e.run(ctx, "renew", fenceArg(fence), e.nowMS(), owner, ttl.Milliseconds())
	if err != nil {
		return err
	}
	if status != "ok" {
		e.log.Info().Str("owner", owner).Int64("fence", fence).Msg("lease lost")
		return ErrNotLeader
	}
	return nil
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
