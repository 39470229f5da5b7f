package engine

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// Observations returns the latest full report of every node, with the
// instances observed since (successful attempts update one instance).
func (e *Engine) Observations(ctx context.Context) (fleetwave.Observations, error) {
	obs, _, err := e.Observe(ctx)
	return obs, err
}

// Observe is Observations with the engine's change counter read before
// them: a plan made on these observations carries it as
// RolloutSpec.ObservedVersion, so CreateRollout can tell a plan made
// before an item finished.
//
// Reading every node's observation is what a reconcile, a status commit
// and the node views of a large fleet spent most of their time on, and
// most had not changed since the last read. So the Engine keeps what it
// read, and every script that changes a node's observation marks the node
// with the change counter it leaves (obs_changed): Observe reads again only
// the nodes marked above the counter its last read saw. A script is
// atomic and bumps the counter last, so every change at or below the
// counter read first is in the data read after it. It reads every node
// again when it cannot trust the marks: on its first call, when the
// server's run_id changed (a restart or a failover: writes not replicated
// are lost, and the counter may later pass the mark again), when the
// counter went back, and at least every fullObserveEvery.
func (e *Engine) Observe(ctx context.Context) (fleetwave.Observations, int64, error) {
	return e.observe(ctx, false, nil)
}

// ObservationsShared is Observations without the copies: the reports are
// those the Engine keeps, shared with every other caller of it and with
// later calls, and must not be changed. A status write reads every node's
// observation every few seconds to compare it with what it last wrote;
// copying 100,000 reports for that was a sixth of its CPU.
func (e *Engine) ObservationsShared(ctx context.Context) (fleetwave.Observations, error) {
	obs, _, err := e.observe(ctx, true, nil)
	return obs, err
}

// observe is Observe; shared: the kept reports themselves when the read
// was incremental (a whole read returns the copies it decoded); only, when
// not nil: the observations of those nodes alone.
func (e *Engine) observe(ctx context.Context, shared bool, only []string) (fleetwave.Observations, int64, error) {
	e.omu.Lock()
	defer e.omu.Unlock()
	runID := e.serverRunID(ctx)
	now := e.clock.Now()
	at := e.obsAt
	incremental := at.fresh(now)
	for {
		pipe := e.rdb.Pipeline()
		marks := e.queueMarks(ctx, pipe, e.key("obs_changed"), at, incremental)
		members := marks.marked
		if !incremental {
			members = pipe.SMembers(ctx, e.key("obs_nodes"))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, 0, fmt.Errorf("read observed nodes: %w", err)
		}
		version, server, trusted, err := e.checkMarks(ctx, marks, runID, at, &e.log)
		if err != nil {
			return nil, 0, err
		}
		if !trusted {
			incremental = false
			continue
		}
		nodes := members.Val()
		sort.Strings(nodes)
		obs, err := e.readObservations(ctx, nodes, true)
		if err != nil {
			e.obsAt = obsMark{}
			return nil, 0, err
		}
		if incremental {
			obs = e.obs.some(only, shared)
			e.obsAt.ver = version
		} else {
			e.obs.keepOnly(obs)
			e.obsAt = obsMark{ver: version, server: server, full: now}
			if only != nil {
				obs = pick(obs, only)
			}
		}
		return obs, version, nil
	}
}

// fullObserveEvery bounds how long Observe reads only the marked nodes
// before it reads them all again: the marks are trusted within one Redis
// server's life, and this bounds what a case they miss could cost.
const fullObserveEvery = 10 * time.Minute

// obsMark is where Observe left the kept observations.
type obsMark struct {
	ver    int64     // the change counter they are current to (0: none kept)
	server string    // the server's identity then (Engine.server)
	full   time.Time // the last read of every node
}

// fresh says whether the data kept at this mark may be read incrementally
// at now (else it is read whole).
func (at obsMark) fresh(now time.Time) bool {
	return at.ver > 0 && now.Sub(at.full) < fullObserveEvery
}

// markCmds are the reads a read of kept data (Observe, Rollout) starts
// with, queued on its first pipeline: the change counter, the keys'
// incarnation and, when incremental, the members of the zset marked above
// the mark's counter.
type markCmds struct {
	ver, inc *redis.StringCmd
	marked   *redis.StringSliceCmd // nil unless incremental
}

// queueMarks queues markCmds on pipe, the members of zset marked since at
// when incremental.
func (e *Engine) queueMarks(ctx context.Context, pipe redis.Pipeliner, zset string, at obsMark, incremental bool) markCmds {
	c := markCmds{ver: pipe.Get(ctx, e.key("version")), inc: pipe.Get(ctx, e.key("incarnation"))}
	if incremental {
		c.marked = pipe.ZRangeByScore(ctx, zset, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(at.ver, 10), Max: "+inf"})
	}
	return c
}

// checkMarks returns the change counter and the server identity c read,
// and whether an incremental read (c.marked) may trust mark at: not when
// the counter went back or the server is another (Redis lost writes); the
// caller then reads everything again.
func (e *Engine) checkMarks(ctx context.Context, c markCmds, runID string, at obsMark, log *zerolog.Logger) (int64, string, bool, error) {
	version, err := c.ver.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, "", false, fmt.Errorf("read change counter: %w", err)
	}
	server, err := e.server(ctx, runID, c.inc.Val())
	if err != nil {
		return 0, "", false, err
	}
	if c.marked != nil && (version < at.ver || server != at.server) {
		log.Warn().Int64("version", version).Int64("last_version", at.ver).
			Msg("redis lost writes (a restart, a failover or a flush): reading the kept data again")
		return version, server, false, nil
	}
	return version, server, true, nil
}

// server names what a mark is valid in: the server's run_id ("" when it
// does not say) and the incarnation of the engine's keys (inc, as read
// with the counter). The incarnation is a random value the first reader
// of a keyspace without one writes: a flush or a restart without data
// removes it, and the change counter then starts again below the marks
// kept, so a read that finds another incarnation reads everything again.
func (e *Engine) server(ctx context.Context, runID, inc string) (string, error) {
	if inc == "" {
		key := e.key("incarnation")
		if err := e.rdb.SetNX(ctx, key, rand.Text(), 0).Err(); err != nil {
			return "", fmt.Errorf("write incarnation: %w", err)
		}
		var err error
		if inc, err = e.rdb.Get(ctx, key).Result(); err != nil {
			return "", fmt.Errorf("read incarnation: %w", err)
		}
	}
	return runID + "/" + inc, nil
}

// ObserveNodes is Observe for the listed nodes only: a node that never
// reported is absent, as in Observe. The hub plans the BRCs a push changed
// from the observations of their nodes alone. Up to half a pipeline chunk
// of nodes (a push's BRC addresses a few) is read in one round trip, their
// membership beside their records: a push's plan waits for each round
// trip behind the scripts of a wave in progress, tens of ms at 100,000
// nodes.
//
// A scope of more than half a chunk that is also a large part of the
// fleet (a BRC of every node) is read as Observe reads: only the nodes
// changed since the Engine's last read, the others as it kept them. At
// 100,000 nodes a push of a fleet-wide BRC read every observation again
// (2.9 s, beside the reconcile's read of the changed ones).
func (e *Engine) ObserveNodes(ctx context.Context, ids []string) (fleetwave.Observations, int64, error) {
	if len(ids) == 0 {
		v, err := e.Version(ctx)
		return fleetwave.Observations{}, v, err
	}
	if len(ids) > pipelineChunk/2 && len(ids)*observeWholeShare >= e.obs.len() {
		return e.observe(ctx, false, ids)
	}
	members := anys(ids)
	pipe := e.rdb.Pipeline()
	ver := pipe.Get(ctx, e.key("version"))
	in := pipe.SMIsMember(ctx, e.key("obs_nodes"), members...)
	var reads *queuedObs
	if len(ids) <= pipelineChunk/2 {
		reads = e.queueObservations(ctx, pipe, ids)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("read observed nodes: %w", err)
	}
	version, err := ver.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("read change counter: %w", err)
	}
	observed := in.Val()
	if reads != nil {
		if observed == nil {
			observed = []bool{} // none observed (nil would put every node)
		}
		// what it reads is not kept: only Observe, one at a time, updates
		// the kept observations, so that none goes back to an older read
		obs := make(fleetwave.Observations, len(ids))
		err := reads.decode(observed, obs, false)
		return obs, version, err
	}
	var nodes []string
	for i, ok := range observed {
		if ok {
			nodes = append(nodes, ids[i])
		}
	}
	sort.Strings(nodes)
	obs, err := e.readObservations(ctx, nodes, false)
	return obs, version, err
}

// observeWholeShare: ObserveNodes reads as Observe does when its scope is
// at least 1/observeWholeShare of the nodes the Engine keeps.
const observeWholeShare = 4

// readObservations reads the full report and the instances of each node,
// pipelined in chunks; keep: what it decoded replaces what was kept.
func (e *Engine) readObservations(ctx context.Context, nodes []string, keep bool) (fleetwave.Observations, error) {
	obs := make(fleetwave.Observations, len(nodes))
	for lo := 0; lo < len(nodes); lo += pipelineChunk / 2 {
		if err := e.readObservationChunk(ctx, nodes[lo:min(lo+pipelineChunk/2, len(nodes))], obs, keep); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

func (e *Engine) readObservationChunk(ctx context.Context, nodes []string, obs fleetwave.Observations, keep bool) error {
	pipe := e.rdb.Pipeline()
	reads := e.queueObservations(ctx, pipe, nodes)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read observations: %w", err)
	}
	return reads.decode(nil, obs, keep)
}

// queuedObs are the reads of some nodes' observations queued in a pipeline.
type queuedObs struct {
	e     *Engine
	nodes []string
	heads []*redis.StringCmd
	insts []*redis.MapStringStringCmd
}

// queueObservations queues the reads of each node's report and instances
// in pipe.
func (e *Engine) queueObservations(ctx context.Context, pipe redis.Pipeliner, nodes []string) *queuedObs {
	r := &queuedObs{e: e, nodes: nodes, heads: make([]*redis.StringCmd, len(nodes)), insts: make([]*redis.MapStringStringCmd, len(nodes))}
	for i, n := range nodes {
		r.heads[i] = pipe.HGet(ctx, e.key("obs"), n)
		r.insts[i] = pipe.HGetAll(ctx, e.key("obsi", n))
	}
	return r
}

// decode puts the observation of each node read in obs, once the
// pipeline ran; only, when not nil, says by index which nodes to put.
func (r *queuedObs) decode(only []bool, obs fleetwave.Observations, keep bool) error {
	for i, n := range r.nodes {
		if only != nil && (i >= len(only) || !only[i]) {
			continue
		}
		head, _ := r.heads[i].Result() // "" when the node has instances but no report
		rep, err := r.e.obs.decode(n, head, r.insts[i].Val(), keep)
		if err != nil {
			return err
		}
		obs[n] = rep
	}
	return nil
}

// decodedObs keeps each node's observation as last read, raw and decoded:
// a status commit and a reconcile read every node's observation, and
// most did not change since the last read. Decoding them all again was
// half of reading them. It holds one entry per observed node.
type decodedObs struct {
	mu    sync.Mutex
	nodes map[string]*decodedNode
}

type decodedNode struct {
	head  string            // the report as stored ("" when none)
	insts map[string]string // the instances as stored, by block
	r     fleetwave.Report  // both decoded; handed out only by ObservationsShared, never changed
}

// decode returns node's observation from its stored report and
// instances, a copy of the last decoded one when they did not change;
// keep: a new decoding is kept.
func (d *decodedObs) decode(node, head string, insts map[string]string, keep bool) (*fleetwave.Report, error) {
	d.mu.Lock()
	c := d.nodes[node]
	d.mu.Unlock()
	if c == nil || c.head != head || !maps.Equal(c.insts, insts) {
		r := fleetwave.Report{Node: node}
		if head != "" {
			if err := json.Unmarshal([]byte(head), &r); err != nil {
				return nil, fmt.Errorf("decode report of %s: %w", node, err)
			}
		}
		blocks := make([]string, 0, len(insts))
		for b := range insts {
			blocks = append(blocks, b)
		}
		sort.Strings(blocks)
		r.Instances = make([]fleetwave.InstanceStatus, 0, len(blocks))
		for _, b := range blocks {
			var in fleetwave.InstanceStatus
			if err := json.Unmarshal([]byte(insts[b]), &in); err != nil {
				return nil, fmt.Errorf("decode instance %s of %s: %w", b, node, err)
			}
			if in.Block == "" {
				in.Block = b
			}
			r.Instances = append(r.Instances, in)
		}
		if !keep {
			return &r, nil // not shared: no copy
		}
		c = &decodedNode{head: head, insts: insts, r: r}
		d.mu.Lock()
		if d.nodes == nil {
			d.nodes = map[string]*decodedNode{}
		}
		d.nodes[node] = c
		d.mu.Unlock()
	}
	return c.report(), nil
}

// report returns a copy of the decoded observation: callers may change
// what they get.
func (c *decodedNode) report() *fleetwave.Report {
	r := c.r
	r.Capabilities = slices.Clone(r.Capabilities)
	r.DataAddresses = maps.Clone(r.DataAddresses)
	r.Instances = slices.Clone(r.Instances)
	r.Attempts = slices.Clone(r.Attempts)
	r.Detected = slices.Clone(r.Detected)
	return &r
}

// some returns a copy of the kept observation of each node of only (nil:
// every kept one), or (shared) the kept ones themselves: an entry is
// replaced when its node's observation changes, never changed in place. A
// node not kept is absent.
func (d *decodedObs) some(only []string, shared bool) fleetwave.Observations {
	d.mu.Lock()
	defer d.mu.Unlock()
	get := func(c *decodedNode) *fleetwave.Report {
		if shared {
			return &c.r
		}
		return c.report()
	}
	if only == nil {
		obs := make(fleetwave.Observations, len(d.nodes))
		for n, c := range d.nodes {
			obs[n] = get(c)
		}
		return obs
	}
	obs := make(fleetwave.Observations, len(only))
	for _, n := range only {
		if c := d.nodes[n]; c != nil {
			obs[n] = get(c)
		}
	}
	return obs
}

// pick returns the observations of obs of the nodes of only.
func pick(obs fleetwave.Observations, only []string) fleetwave.Observations {
	out := make(fleetwave.Observations, len(only))
	for _, n := range only {
		if r := obs[n]; r != nil {
			out[n] = r
		}
	}
	return out
}

// len is the number of nodes kept.
func (d *decodedObs) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.nodes)
}

// keepOnly forgets the nodes a full read did not find (no longer
// observed).
func (d *decodedObs) keepOnly(obs fleetwave.Observations) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for n := range d.nodes {
		if obs[n] == nil {
			delete(d.nodes, n)
		}
	}
}

// Counters returns the fleet-wide counters, maintained by every script.
func (e *Engine) Counters(ctx context.Context) (fleetwave.Counters, error) {
	m, err := e.rdb.HGetAll(ctx, e.keys[3]).Result()
	if err != nil {
		return fleetwave.Counters{}, fmt.Errorf("read counters: %w", err)
	}
	return counters(m, ""), nil
}

// Version returns the change counter: it grows with every state change
// (attempt deliveries excepted), so a reader can tell that nothing changed.
func (e *Engine) Version(ctx context.Context) (int64, error) {
	v, err := e.rdb.Get(ctx, e.keys[2]).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read version: %w", err)
	}
	return v, nil
}

// Rollouts returns every rollout, newest first.
func (e *Engine) Rollouts(ctx context.Context) ([]fleetwave.Rollout, error) {
	ids, err := e.rdb.ZRevRange(ctx, e.key("rollouts"), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list rollouts: %w", err)
	}
	maps, err := e.hashes(ctx, "r", ids)
	if err != nil {
		return nil, err
	}
	out := make([]fleetwave.Rollout, 0, len(ids))
	for _, m := range maps {
		if len(m) == 0 {
			continue
		}
		out = append(out, e.decodeRollout(m))
	}
	return out, nil
}

// RolloutRecord returns one rollout without its items; ErrNotFound when
// there is no such rollout.
func (e *Engine) RolloutRecord(ctx context.Context, id string) (fleetwave.Rollout, error) {
	m, err := e.rdb.HGetAll(ctx, e.key("r", id)).Result()
	if err != nil {
		return fleetwave.Rollout{}, fmt.Errorf("read rollout %s: %w", id, err)
	}
	if len(m) == 0 {
		return fleetwave.Rollout{}, fmt.Errorf("rollout %s: %w", id, ErrNotFound)
	}
	return e.decodeRollout(m), nil
}

// ActiveItem returns the active item of block instance node/block, if any.
func (e *Engine) ActiveItem(ctx context.Context, node, block string) (fleetwave.Item, bool, error) {
	id, err := e.rdb.HGet(ctx, e.key("inst", node, block), "active").Result()
	if errors.Is(err, redis.Nil) {
		return fleetwave.Item{}, false, nil
	}
	if err != nil {
		return fleetwave.Item{}, false, fmt.Errorf("read instance %s/%s: %w", node, block, err)
	}
	m, err := e.rdb.HGetAll(ctx, e.key("i", id)).Result()
	if err != nil {
		return fleetwave.Item{}, false, fmt.Errorf("read item %s: %w", id, err)
	}
	if len(m) == 0 {
		return fleetwave.Item{}, false, nil
	}
	it := decodeItem(m)
	if !it.Status.Active() {
		return fleetwave.Item{}, false, nil
	}
	return it, true, nil
}

// ActiveInstances returns which of keys have an active item (pending, in
// progress, retrying, ambiguous), in two pipelined round trips.
func (e *Engine) ActiveInstances(ctx context.Context, keys []fleetwave.InstanceKey) (map[fleetwave.InstanceKey]bool, error) {
	ids, err := e.ActiveItems(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[fleetwave.InstanceKey]bool, len(ids))
	for k := range ids {
		out[k] = true
	}
	return out, nil
}

// ActiveItems returns the active item (pending, in progress, retrying,
// ambiguous) of each of keys that has one, by id, in two pipelined round
// trips per pipelineChunk keys.
func (e *Engine) ActiveItems(ctx context.Context, keys []fleetwave.InstanceKey) (map[fleetwave.InstanceKey]string, error) {
	out := map[fleetwave.InstanceKey]string{}
	for lo := 0; lo < len(keys); lo += pipelineChunk {
		if err := e.activeItems(ctx, keys[lo:min(lo+pipelineChunk, len(keys))], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (e *Engine) activeItems(ctx context.Context, keys []fleetwave.InstanceKey, out map[fleetwave.InstanceKey]string) error {
	pipe := e.rdb.Pipeline()
	ptrs := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		ptrs[i] = pipe.HGet(ctx, e.key("inst", k.Node, k.Block), "active")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read instances: %w", err)
	}
	pipe = e.rdb.Pipeline()
	st := make([]*redis.StringCmd, len(keys))
	for i, c := range ptrs {
		if id, err := c.Result(); err == nil && id != "" {
			st[i] = pipe.HGet(ctx, e.key("i", id), "status")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read active items: %w", err)
	}
	for i, c := range st {
		if c != nil && fleetwave.ItemStatus(c.Val()).Active() {
			out[keys[i]] = ptrs[i].Val()
		}
	}
	return nil
}

// pipelineChunk bounds the commands of one pipelined round trip. A
// pipeline is written whole before its replies are read: 200,000 commands
// (the observations of 100,000 nodes) did not leave the client within its
// write timeout while Redis was busy, so every read of them failed.
const pipelineChunk = 2000

// hashes reads the hashes kind:id of ids, pipelined in chunks.
func (e *Engine) hashes(ctx context.Context, kind string, ids []string) ([]map[string]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]map[string]string, 0, len(ids))
	for lo := 0; lo < len(ids); lo += pipelineChunk {
		chunk := ids[lo:min(lo+pipelineChunk, len(ids))]
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.HGetAll(ctx, e.key(kind, id))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read %d records: %w", len(ids), err)
		}
		for _, c := range cmds {
			out = append(out, c.Val())
		}
	}
	return out, nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func counters(m map[string]string, prefix string) fleetwave.Counters {
	return fleetwave.Counters{
		Total:      atoi(m[prefix+"total"]),
		Done:       atoi(m[prefix+"done"]),
		InProgress: atoi(m[prefix+"in_progress"]),
		Pending:    atoi(m[prefix+"pending"]),
		Failed:     atoi(m[prefix+"failed"]),
		Skipped:    atoi(m[prefix+"skipped"]),
	}
}

func (e *Engine) decodeRollout(m map[string]string) fleetwave.Rollout {
	r := fleetwave.Rollout{
		ID:            m["id"],
		Status:        fleetwave.RolloutStatus(m["status"]),
		Reason:        m["reason"],
		MaxConcurrent: int(atoi(m["max_concurrent"])),
		Wave:          int(atoi(m["wave"])),
		Hold:          m["hold"],
		Counters:      counters(m, "c_"),
		CreatedAt:     msTime(atoi(m["created_at"])),
		UpdatedAt:     msTime(atoi(m["updated_at"])),
	}
	r.FailureThresholdPercent, _ = strconv.ParseFloat(m["failure_threshold_percent"], 64)
	r.FailureThreshold = int(atoi(m["failure_threshold"]))
	_ = json.Unmarshal([]byte(m["source"]), &r.Source)
	// its creation in chunks still under way (create_rollout.lua): a mark
	// that outlived a creation that stopped no longer counts, nor one left
	// on a rollout cancelled meanwhile
	r.Filling = !r.Status.Finished() && atoi(m["fill_until"]) > e.nowMS()
	return r
}

// The fields of an item record an Item is made of, by position in
// itemFields.
const (
	ifID = iota
	ifRollout
	ifNode
	ifBlock
	ifAction
	ifGeneration
	ifTargetVersion
	ifConfigHash
	ifManagedBy
	ifCriticality
	ifStatus
	ifReason
	ifSource
	ifSourceUser
	ifWave
	ifRetryCount
	ifRetryAfter
	ifDispatchedAt
	ifCompletedAt
	ifAttempts
	ifLastAttempt
	ifLastClass
	ifDesiredState
	ifMessage
	ifOutput
	nItemFields
)

// itemFields names them: a read of many items asks for these alone
// (HMGET), not for the whole record, and itemOf reads them by position.
var itemFields = [nItemFields]string{
	ifID:            "id",
	ifRollout:       "rollout",
	ifNode:          "node",
	ifBlock:         "block",
	ifAction:        "action",
	ifGeneration:    "generation",
	ifTargetVersion: "target_version",
	ifConfigHash:    "config_hash",
	ifManagedBy:     "managed_by",
	ifCriticality:   "criticality",
	ifStatus:        "status",
	ifReason:        "reason",
	ifSource:        "source",
	ifSourceUser:    "source_user",
	ifWave:          "wave",
	ifRetryCount:    "retry_count",
	ifRetryAfter:    "retry_after",
	ifDispatchedAt:  "dispatched_at",
	ifCompletedAt:   "completed_at",
	ifAttempts:      "attempts",
	ifLastAttempt:   "last_attempt",
	ifLastClass:     "last_class",
	ifDesiredState:  "desired_state",
	ifMessage:       "message",
	ifOutput:        "output",
}

// itemFieldArgs is itemFields as command arguments.
var itemFieldArgs = func() []any {
	out := make([]any, len(itemFields))
	for i, f := range itemFields {
		out[i] = f
	}
	return out
}()

func decodeItem(m map[string]string) fleetwave.Item {
	var v [nItemFields]string
	for i, f := range itemFields {
		v[i] = m[f]
	}
	return itemOf(&v)
}

// itemOf makes an Item of its record's itemFields, in that order.
func itemOf(v *[nItemFields]string) fleetwave.Item {
	return fleetwave.Item{
		ID:            v[ifID],
		Rollout:       v[ifRollout],
		Node:          v[ifNode],
		Block:         v[ifBlock],
		Action:        v[ifAction],
		Generation:    atoi(v[ifGeneration]),
		TargetVersion: v[ifTargetVersion],
		ConfigHash:    v[ifConfigHash],
		ManagedBy:     v[ifManagedBy],
		Criticality:   fleetwave.Criticality(v[ifCriticality]),
		Status:        fleetwave.ItemStatus(v[ifStatus]),
		Reason:        v[ifReason],
		Source:        fleetwave.ItemSource(v[ifSource]),
		SourceUser:    v[ifSourceUser],
		Wave:          int(atoi(v[ifWave])),
		RetryCount:    int(atoi(v[ifRetryCount])),
		RetryAfter:    msTime(atoi(v[ifRetryAfter])),
		DispatchedAt:  msTime(atoi(v[ifDispatchedAt])),
		CompletedAt:   msTime(atoi(v[ifCompletedAt])),
		Attempts:      int(atoi(v[ifAttempts])),
		LastAttempt:   v[ifLastAttempt],
		LastClass:     fleetwave.ResultClass(v[ifLastClass]),
		DesiredState:  fleetwave.DesiredState(v[ifDesiredState]),
		Message:       v[ifMessage],
		Output:        v[ifOutput],
	}
}

// items reads the items of ids (a zero Item for an id without a record),
// pipelined in chunks. Each reply is the item's itemFields, not its whole
// record: at 100,000 items a map per record was most of a status write's
// read.
func (e *Engine) items(ctx context.Context, ids []string) ([]fleetwave.Item, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]fleetwave.Item, 0, len(ids))
	for lo := 0; lo < len(ids); lo += pipelineChunk {
		chunk := ids[lo:min(lo+pipelineChunk, len(ids))]
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.StringSliceCmd, len(chunk))
		for i, id := range chunk {
			args := make([]any, 0, 2+len(itemFieldArgs))
			args = append(append(args, "hmget", e.key("i", id)), itemFieldArgs...)
			cmds[i] = redis.NewStringSliceCmd(ctx, args...) // a missing field reads ""
			_ = pipe.Process(ctx, cmds[i])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read %d items: %w", len(ids), err)
		}
		for _, c := range cmds {
			vals := c.Val()
			if len(vals) != nItemFields {
				return nil, fmt.Errorf("read %d items: %d fields in a reply, want %d", len(ids), len(vals), nItemFields)
			}
			out = append(out, itemOf((*[nItemFields]string)(vals)))
		}
	}
	return out, nil
}

// pairs turns a flat field/value reply into a map.
func pairs(v any) map[string]string {
	list, _ := v.([]any)
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		m[asString(list[i])] = asString(list[i+1])
	}
	return m
}

// decodeQueued decodes a node queue entry: "<attempt id>\n<fence>\n
// <deadline ms>\n<template>", the template being the item's attempt
// without id, fence and deadline (JSON). Item and rollout come from the
// id: "<rollout>.<position>.<n>".
func decodeQueued(v string) (fleetwave.Attempt, error) {
	parts := strings.SplitN(v, "\n", 4)
	if len(parts) != 4 {
		return fleetwave.Attempt{}, fmt.Errorf("queue entry without attempt template (%d parts)", len(parts))
	}
	var a fleetwave.Attempt
	if err := fleetwave.DecodeAttempt(parts[3], &a); err != nil {
		return fleetwave.Attempt{}, fmt.Errorf("decode attempt %s: %w", parts[0], err)
	}
	a.ID, a.Fence, a.Deadline = parts[0], atoi(parts[1]), msTime(atoi(parts[2]))
	a.Item = parts[0][:max(strings.LastIndexByte(parts[0], '.'), 0)]
	a.Rollout = a.Item[:max(strings.LastIndexByte(a.Item, '.'), 0)]
	if a.Item == "" || a.Rollout == "" {
		return fleetwave.Attempt{}, fmt.Errorf("attempt id %q: want <rollout>.<position>.<n>", parts[0])
	}
	return a, nil
}

// RolloutLanes returns the lanes (managed_by) of each rollout of ids that
// has items, sorted, in one round trip.
func (e *Engine) RolloutLanes(ctx context.Context, ids []string) (map[string][]string, error) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HKeys(ctx, e.key("r", id, "lanes"))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read rollout lanes: %w", err)
	}
	out := make(map[string][]string, len(ids))
	for i, id := range ids {
		if l := cmds[i].Val(); len(l) > 0 {
			sort.Strings(l)
			out[id] = l
		}
	}
	return out, nil
}
