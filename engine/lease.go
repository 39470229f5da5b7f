package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewOwner returns the lease owner of a new process of hub hubID:
// "<hub id>/<instance>", the instance random. A process campaigns, renews
// and resigns under one owner for its whole life, so a later process of
// the same hub id (a restart) is a different owner: it never inherits the
// earlier one's lease or fence, and the earlier one, if it was only paused,
// is fenced out like any deposed leader.
func NewOwner(hubID string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it panics if the system source does)
	return hubID + "/" + hex.EncodeToString(b[:])
}

// splitOwner returns the hub id and the instance of an owner: what follows
// its last slash is the instance; an owner without a slash is a hub id
// alone (instance "").
func splitOwner(owner string) (hub, instance string) {
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		return owner[:i], owner[i+1:]
	}
	return owner, ""
}

// Campaign tries to become the leader as owner for ttl. owner is
// "<hub id>/<instance>" (NewOwner: one per process) or a hub id alone; the
// lease hash keeps the hub id in its owner field, for operators, and the
// instance in its own field. Campaign returns a new, strictly higher fence
// when the lease was free or expired, the same fence when owner already
// holds it (the lease is then extended), and ErrNotLeader when another
// owner holds it. Every state change must pass the fence.
//
// An Engine that never held a lease (a new process) always gets a new
// fence, even when the lease carries its own name, and takes over at once
// a live lease of another instance of its hub id: that lease belongs to an
// earlier process of the same hub, which died (the usual case: a restart
// does not wait up to one TTL for its own old lease) or is paused, and
// whose fence is now stale, so it changes nothing and loses at its next
// Renew. The price: two live processes wrongly given one hub id move the
// lease once, to the newer one, which then keeps it (the older one, having
// held a lease, waits like any other replica).
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
//     skips this check;
//   - after a failover (Sentinel or Cluster promoting a replica), the
//     writes the replica had not received are lost: replication is
//     asynchronous. So when the server holding the keys has replicas, the
//     campaign's write waits for one of them (WAIT 1, on the connection
//     that ran the campaign) before the fence is used: a new epoch a
//     promoted replica never saw could be handed out again. The replicas
//     are counted from INFO replication (connected_slaves) just before: a
//     server without any connected (a lone server, or a primary whose
//     replica is gone) skips the wait, or no hub could lead until the
//     replica is back; WAIT answering 0 cannot tell "no replica" from "a
//     replica too slow", hence the count. A WAIT no replica acknowledged
//     within min(ttl/3, 2s) fails the campaign with ErrNotReplicated; the
//     fence still counts as held, so no later Campaign goes below it, and
//     the next one extends the same lease and waits again. What the
//     leader writes under its fence later is not waited for: a lost
//     dispatch is dispatched again under the same attempt id (an item's
//     n-th attempt is "<item>.<n>"), which an agent that already ran it
//     finds in its journal and does not run again.
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
	fresh := e.maxFence == 0
	floor = max(floor, e.maxFence)
	e.lmu.Unlock()
	hub, instance := splitOwner(owner)
	// one connection to the server holding the keys: WAIT waits for the
	// writes of its own connection
	node, err := e.nodeClient(ctx)
	if err != nil {
		return 0, err
	}
	var on redis.Scripter = e.rdb
	var conn *redis.Conn
	replicas := 0
	if node != nil {
		conn = node.Conn()
		defer conn.Close()
		on = conn
		replicas = connectedReplicas(ctx, conn)
	}
	status, rest, err := e.runOn(ctx, on, "campaign", "", e.nowMS(), campaignRecord.append(nil, campaignArgs{
		Hub: hub, Instance: instance, TTLMS: ttl.Milliseconds(), Floor: floor, Restart: restart, Fresh: fresh})...)
	if err != nil {
		if cc, ok := e.rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx) // the slot may have moved (a failover): ask again next time
		}
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
		held := &LeaseHeldError{}
		if len(rest) > 0 {
			held.Holder = asString(rest[0])
		}
		if len(rest) > 1 {
			held.ExpiresAt = time.UnixMilli(asInt(rest[1])).UTC()
		}
		return 0, held
	}
	fence := asInt(rest[0])
	e.held(fence)
	if replicas > 0 {
		wait := max(min(ttl/3, maxReplicaWait), 10*time.Millisecond)
		n, err := conn.Wait(ctx, 1, wait).Result()
		if err != nil {
			return 0, fmt.Errorf("wait for a replica: %w", err)
		}
		if n < 1 {
			e.log.Warn().Str("owner", owner).Int64("fence", fence).Int("replicas", replicas).Dur("waited", wait).Msg("no replica acknowledged the lease: not used")
			return 0, fmt.Errorf("fence %d: none of %d replicas within %v: %w", fence, replicas, wait, ErrNotReplicated)
		}
		e.log.Debug().Str("owner", owner).Int64("fence", fence).Int64("acknowledged", n).Msg("lease replicated")
	}
	if len(rest) > 1 {
		if prev := asString(rest[1]); prev != "" {
			e.log.Info().Str("owner", owner).Str("previous", prev).Int64("fence", fence).Msg("live lease taken over")
		}
	}
	e.log.Debug().Str("owner", owner).Int64("fence", fence).Msg("lease held")
	return fence, nil
}

// LeaseHeldError is Campaign's answer when another owner holds a live
// lease: errors.Is(err, ErrNotLeader) holds. ExpiresAt (on the engine's
// clock) is when that lease ends unless renewed, so a replica can
// campaign right then instead of at its next tick: a leader that died is
// replaced within one TTL of its last renewal.
type LeaseHeldError struct {
	Holder    string
	ExpiresAt time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("lease held by %q until %s: %v", e.Holder, e.ExpiresAt.Format(time.RFC3339Nano), ErrNotLeader)
}

func (e *LeaseHeldError) Unwrap() error { return ErrNotLeader }

// Renew extends the lease of owner (hub id and instance, as given to
// Campaign) at fence by ttl. It fails with ErrNotLeader once the lease was
// lost (taken over, by another hub or by a newer process of the same hub
// id, or resigned), and when Redis restarted since the last Campaign or
// Renew (its run_id changed): the lease is then dropped and the next
// Campaign gets a higher fence.
func (e *Engine) Renew(ctx context.Context, owner string, fence int64, ttl time.Duration) error {
	runID := e.serverRunID(ctx)
	e.lmu.Lock()
	restart := e.runID != "" && runID != "" && runID != e.runID
	if runID != "" {
		e.runID = runID
	}
	e.lmu.Unlock()
	hub, instance := splitOwner(owner)
	status, _, err := e.run(ctx, "renew", fenceArg(fence), e.nowMS(), renewRecord.append(nil, renewArgs{
		Hub: hub, Instance: instance, TTLMS: ttl.Milliseconds(), Restart: restart})...)
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
// at once; ErrNotLeader when it was not held. owner may also be the hub id
// alone: a fence names one acquisition, so the hub id and the fence are
// enough to say whose lease it is. The epoch is kept: the next leader gets
// a higher fence.
func (e *Engine) Resign(ctx context.Context, owner string, fence int64) error {
	hub, instance := splitOwner(owner)
	status, _, err := e.run(ctx, "resign", fenceArg(fence), e.nowMS(), resignRecord.append(nil, resignArgs{Hub: hub, Instance: instance})...)
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

// maxReplicaWait bounds Campaign's wait for a replica.
const maxReplicaWait = 2 * time.Second

// nodeClient returns a client of the one server holding the engine's keys:
// the engine's client itself (one server, or the primary a Sentinel names),
// the primary of their hash slot on a Cluster, nil for another client.
func (e *Engine) nodeClient(ctx context.Context) (*redis.Client, error) {
	switch c := e.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, e.keys[0])
		if err != nil {
			return nil, fmt.Errorf("cluster primary of %s: %w", e.keys[0], err)
		}
		return m, nil
	}
	return nil, nil
}

// connectedReplicas returns the connected_slaves of INFO replication, 0
// when the server does not say (miniredis).
func connectedReplicas(ctx context.Context, c *redis.Conn) int {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(infoField(info, "connected_slaves"))
	return n
}

// infoField returns a field of an INFO reply, "" when absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// serverRunID returns the run_id of the Redis server holding the engine's
// keys, "" when it cannot be known (no INFO server, e.g. miniredis). A
// Sentinel or Cluster failover changes it: the promoted replica is another
// server.
func (e *Engine) serverRunID(ctx context.Context) string {
	var c interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	} = e.rdb
	node, err := e.nodeClient(ctx)
	if err != nil {
		return ""
	}
	if node != nil {
		c = node
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	return infoField(info, "run_id")
}
