package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Trips is a client hook (redis.Client.AddHook) that counts the client's
// round trips: each command sent alone and each pipeline is one.
type Trips struct{ n atomic.Int64 }

// N returns the round trips counted so far.
func (r *Trips) N() int64 { return r.n.Load() }

func (r *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}

func (r *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}
