package hub

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
)

// The Hub is what the API reads and drives.
var _ api.Hub = (*Hub)(nil)

// AuthenticateAgent maps a bearer token to its node.
func (h *Hub) AuthenticateAgent(token string) (string, bool) {
	node, ok := h.tokens[HashToken(token)]
	return node, ok
}

// RegisterAgent records the agent's first full report.
func (h *Hub) RegisterAgent(ctx context.Context, r fleetwave.Report) error {
	h.log.Info().Str("node", r.Node).Str("agent_version", r.AgentVersion).Int("instances", len(r.Instances)).Msg("agent registered")
	return h.Report(ctx, r)
}

// PollAttempts long-polls the attempts queued for node. Credentials are
// sealed in the configs Redis holds (see seal.go): each config is unsealed
// for node here, so values leave the hub only in this answer to the
// node's authenticated agent. An attempt whose config does not unseal for
// node is not handed out but failed as permanent (refuseAttempt).
func (h *Hub) PollAttempts(ctx context.Context, node string, wait time.Duration, rc fleetwave.Receipt) ([]fleetwave.Attempt, error) {
	// a held poll waits under this frame: what comes before and after the
	// wait is in functions of their own (see engine.PollWith)
	if rc.Resume {
		h.resume(ctx, node, rc.Delivered)
	}
	atts, err := h.eng.PollWith(ctx, node, 16, wait, rc.Delivered)
	if err != nil {
		return nil, h.apiError(ctx, err)
	}
	return h.handOut(ctx, node, atts), nil
}

// resume marks what node's agent says never reached it (engine.Resume).
func (h *Hub) resume(ctx context.Context, node string, delivered int64) {
	if ids := h.eng.Resume(ctx, node, delivered); len(ids) > 0 {
		h.metrics.notReceived("agent_said", len(ids))
	}
}

// handOut unseals the attempts popped for node, refusing those whose
// config does not unseal for it.
func (h *Hub) handOut(ctx context.Context, node string, atts []fleetwave.Attempt) []fleetwave.Attempt {
	if len(atts) > 0 {
		h.crashPoint("attempts_popped")
	}
	out := atts[:0]
	for _, a := range atts {
		config, sealed, err := h.unsealFor(node, a.Payload.Config)
		if err != nil {
			h.refuseAttempt(ctx, node, a, err)
			continue
		}
		a.Payload.Config = config
		h.log.Info().Str("node", node).Str("attempt", a.ID).Str("item", a.Item).Str("rollout", a.Rollout).
			Str("block", a.Block).Str("action", a.Action).Int64("generation", a.Generation).Int64("fence", a.Fence).
			Int64("delivery", a.Delivery).Int("credentials", sealed).Msg("attempt delivered")
		out = append(out, a)
	}
	return out
}

// NotHanded has the engine close attempts that did not reach node's agent
// at its next step, rather than at their deadlines (a poll's connection
// closed under it: at 100,000 agents one stall of the machine closed 23
// connections, and their attempts held their waves for two minutes).
func (h *Hub) NotHanded(ctx context.Context, node string, atts []fleetwave.Attempt, written bool) {
	ids := make([]string, len(atts))
	for i, a := range atts {
		ids[i] = a.ID
	}
	h.log.Warn().Str("node", node).Strs("attempts", ids).Bool("written", written).
		Msg("attempts not handed to the agent")
	reason := "client_gone"
	if written {
		reason = "write_failed"
	}
	h.metrics.notReceived(reason, len(ids))
	if err := h.eng.NotHanded(context.WithoutCancel(ctx), node, ids, written); err != nil {
		h.log.Warn().Err(err).Str("node", node).Msg("attempts not handed: left to their deadlines")
	}
}

// CompleteAttempt applies an attempt's result.
func (h *Hub) CompleteAttempt(ctx context.Context, node string, res fleetwave.AttemptResult) error {
	switch res.Class {
	case fleetwave.ResultSuccess, fleetwave.ResultTransient, fleetwave.ResultPermanent:
	default:
		// The engine refuses other classes before it looks the attempt up;
		// ownership is answered first, so that a node learns nothing of
		// another node's attempts.
		if err := h.ownAttempt(ctx, node, res.AttemptID); err != nil {
			return err
		}
		h.log.Warn().Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).Msg("attempt result refused")
		if res.Class == fleetwave.ResultLost {
			// An agent sends lost for an attempt it was running when it
			// stopped. Its command may still run, orphaned: counting the
			// attempt lost now would free its place under max_concurrent
			// while it runs. The hub counts it lost at its deadline (the
			// item then waits for a report); a 4xx tells the agent to drop
			// its result.
			return &api.Error{Status: http.StatusUnprocessableEntity, Code: "invalid_result",
				Message: "class: lost is not accepted; the hub counts an attempt lost itself, at its deadline",
				Details: map[string]string{"field": "class"}}
		}
		return &api.Error{Status: http.StatusBadRequest, Code: "invalid_result",
			Message: "class: " + strconv.Quote(string(res.Class)) + "; want success, transient or permanent",
			Details: map[string]string{"field": "class"}}
	}
	err := h.eng.Complete(ctx, node, res)
	if errors.Is(err, engine.ErrResultRecorded) {
		// the agent sent it again (its answer was lost): answered as the
		// first time, counted once
		h.log.Info().Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).
			Int("exit_code", res.ExitCode).Msg("attempt result sent again; recorded before")
		return nil
	}
	if err = h.metrics.countResult(res, err); err != nil {
		h.log.Warn().Err(err).Str("node", node).Str("attempt", res.AttemptID).Msg("attempt result refused")
		return h.apiError(ctx, err)
	}
	h.crashPoint("result_recorded")
	h.log.Info().Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).Int("exit_code", res.ExitCode).Msg("attempt result")
	h.kick(h.statusSoon)
	return nil
}

// AttemptNode returns the node attempt id was dispatched to. An attempt id
// is "<item id>.<n>" and an item id "<rollout id>.<position>": the item is
// found in its rollout. That reads the whole rollout, which is acceptable
// because the API asks only before refusing a malformed result.
func (h *Hub) AttemptNode(ctx context.Context, id string) (string, error) {
	unknown := &api.Error{Status: http.StatusNotFound, Code: "unknown_attempt", Message: "no such attempt"}
	item, n, ok := cutLastNumber(id)
	if !ok {
		return "", unknown
	}
	rollout, _, ok := cutLastNumber(item)
	if !ok {
		return "", unknown
	}
	_, items, err := h.eng.Rollout(ctx, rollout)
	if errors.Is(err, engine.ErrNotFound) {
		return "", unknown
	}
	if err != nil {
		return "", h.apiError(ctx, err)
	}
	for _, it := range items {
		if it.ID == item {
			if n > int64(it.Attempts) {
				return "", unknown
			}
			return it.Node, nil
		}
	}
	return "", unknown
}

// ownAttempt answers 403 forbidden when attempt id belongs to another node
// than node, and 404 unknown_attempt when there is no such attempt.
func (h *Hub) ownAttempt(ctx context.Context, node, id string) error {
	owner, err := h.AttemptNode(ctx, id)
	if err != nil {
		return err
	}
	if owner != node {
		h.log.Warn().Str("node", node).Str("attempt", id).Msg("result for an attempt of another node")
		return &api.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "attempt belongs to another node"}
	}
	return nil
}

// cutLastNumber splits "<prefix>.<n>" with n a positive decimal number.
func cutLastNumber(id string) (prefix string, n int64, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || n < 1 {
		return "", 0, false
	}
	return id[:i], n, true
}

// Report stores a full report; observations never change desired state,
// but they may show drift, so a reconcile follows.
func (h *Hub) Report(ctx context.Context, r fleetwave.Report) error {
	if err := checkDetected(r); err != nil {
		return err
	}
	r.ReceivedAt = h.clock.Now().UTC()
	if err := h.eng.Report(ctx, r); err != nil {
		return h.apiError(ctx, err)
	}
	// What the report says, without when: an agent's periodic report
	// that says what its last one said changes no plan, and 100,000
	// agents' reports each asking for a reconcile of the whole fleet kept
	// one running all the time.
	same := r
	same.SentAt, same.ReceivedAt = time.Time{}, time.Time{}
	form, err := json.Marshal(same)
	if err != nil {
		return err
	}
	sum, now := sha256.Sum256(form), h.clock.Now()
	prev, known, asked, wasAsked := h.asks.took(r.Node, sum, now)
	// a reconcile is asked for unless the report is the same as the last
	// this hub took from the node, that one recent (the node was not
	// stale), and the hub did not ask for it (Redis had lost the node's)
	if !known || prev.sum != sum || now.Sub(prev.at) > h.cfg.StaleAfter.D()/2 || (wasAsked && now.Sub(asked) < reportAskEvery) {
		h.kick(h.reconcileSoon)
	}
	return nil
}

// takenReport is when this hub last took a node's full report, and the
// digest of what it said (Report).
type takenReport struct {
	at  time.Time
	sum [sha256.Size]byte
}

// Summary returns the counters, the last sync and the rollouts.
func (h *Hub) Summary(ctx context.Context) (fleetwave.Summary, error) {
	c, err := h.eng.Counters(ctx)
	if err != nil {
		return fleetwave.Summary{}, h.apiError(ctx, err)
	}
	rs, err := h.eng.Rollouts(ctx)
	if err != nil {
		return fleetwave.Summary{}, h.apiError(ctx, err)
	}
	s := fleetwave.Summary{Counters: fleetwave.FleetCounters(rs), History: c, Sync: h.SyncState(), Rollouts: rs}
	snap := h.Snapshot()
	if snap != nil {
		s.Nodes = len(snap.Nodes)
	}
	if s.Requests, err = h.requestStatuses(ctx, snap, rs); err != nil {
		return fleetwave.Summary{}, h.apiError(ctx, err)
	}
	h.mu.Lock()
	s.Waiting = mergeWaits(h.quiet, h.gated)
	h.mu.Unlock()
	return s, nil
}

// Rollout returns one rollout with its items.
func (h *Hub) Rollout(ctx context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
	r, items, err := h.eng.Rollout(ctx, id)
	if err != nil {
		return r, nil, h.apiError(ctx, err)
	}
	return r, items, nil
}

// TriggerSync asks for a fetch now (the git webhook).
func (h *Hub) TriggerSync() { h.askSync() }

// readyPingTimeout bounds the Redis ping of a readiness check: probes
// commonly give up after a second.
const readyPingTimeout = 500 * time.Millisecond

// Readiness checks what the hub needs to serve. Redis is required. A
// snapshot in force is required of the leader, which dispatches from it;
// a follower serves agents from Redis before its first sync ends, and the
// API's reads that need the repository once it has a snapshot. Git is
// reported but not required: while the remote is unreachable or its
// newest commit is invalid, the hub keeps its last good snapshot.
func (h *Hub) Readiness(ctx context.Context) api.Readiness {
	rd := api.Readiness{Checks: map[string]string{}}
	fail := func(name, cause string) {
		rd.Checks[name] = "error: " + cause
		rd.Failing = append(rd.Failing, name)
	}
	pctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
	err := h.redis.client.Ping(pctx).Err()
	cancel()
	switch {
	case err == nil:
		rd.Checks["redis"] = "ok"
	case errors.Is(err, context.DeadlineExceeded):
		// The client retries its dials until the timeout, which then hides
		// why: one plain dial says (connection refused, no such socket).
		cause := "no answer within " + readyPingTimeout.String()
		if dialErr := h.dialRedis(ctx); dialErr != nil {
			cause += ": " + dialErr.Error()
		}
		fail("redis", redactCause(cause))
	default:
		fail("redis", redactCause(err.Error()))
	}
	leader := h.currentFence() > 0
	switch {
	case h.Snapshot() != nil:
		rd.Checks["snapshot"] = "ok"
	case leader:
		fail("snapshot", "no valid commit applied yet")
	default:
		rd.Checks["snapshot"] = "none yet (a follower serves agents before its first sync)"
	}
	st := h.SyncState()
	switch st.Result {
	case "ok":
		rd.Checks["git"] = "ok"
	case "rejected":
		applied := "no commit"
		if st.Applied != "" {
			applied = short(st.Applied)
		}
		rd.Checks["git"] = "rejected: commit " + short(st.Commit) + " is invalid; " + applied + " stays in force"
	case "error":
		rd.Checks["git"] = "error: " + redactCause(st.Message)
	default:
		rd.Checks["git"] = "not synced yet"
	}
	if leader {
		rd.Checks["leader"] = "leader"
	} else {
		rd.Checks["leader"] = "follower"
	}
	sort.Strings(rd.Failing)
	return rd
}

// dialRedis opens and closes one connection to Redis's address, for the
// cause of a failed readiness ping; nil when it connects or the address is
// unknown.
func (h *Hub) dialRedis(ctx context.Context) error {
	c, ok := h.redis.client.(*redis.Client)
	if !ok {
		return nil
	}
	o := c.Options()
	if o.Network != "unix" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return nil // a Sentinel client: its address is not one to dial
		}
	}
	dctx, cancel := context.WithTimeout(ctx, readyDialTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, o.Network, o.Addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// readyDialTimeout bounds dialRedis, so a readiness check stays under a
// second.
const readyDialTimeout = 200 * time.Millisecond

// userinfo matches the credentials of a URL ("scheme://user:secret@").
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)

// redactCause drops URL credentials from an error text for an
// unauthenticated answer, and bounds its length.
func redactCause(msg string) string {
	msg = userinfo.ReplaceAllString(msg, "${1}***@")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// VerifyGitHook checks the webhook signature when a secret is configured.
func (h *Hub) VerifyGitHook(header http.Header, body []byte) error {
	if len(h.webhookSecret) == 0 {
		return nil
	}
	return gitsync.VerifyWebhook(header, body, h.webhookSecret)
}

// AuthenticateUser maps an API bearer token to its identity.
func (h *Hub) AuthenticateUser(token string) (api.Identity, bool) {
	id, ok := h.users[HashToken(token)]
	return id, ok
}

// SetRolloutState pauses, resumes or cancels a rollout, recording the actor.
func (h *Hub) SetRolloutState(ctx context.Context, id, action string, actor api.Identity) error {
	fence := h.currentFence()
	if fence == 0 {
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "not_leader", Message: "this hub is not the leader; retry"}
	}
	if err := h.eng.SetRolloutState(ctx, fence, id, action, actor.Name); err != nil {
		return h.apiError(ctx, err)
	}
	h.log.Info().Str("rollout", id).Str("action", action).Str("actor", actor.Name).Int64("fence", fence).Msg("rollout state changed")
	h.kick(h.statusNow)
	return nil
}

// apiError maps engine and Redis errors to API errors with stable codes;
// it is the one place the hub maps errors for the API.
func (h *Hub) apiError(ctx context.Context, err error) error {
	if ctx.Err() == nil && redisUnavailable(err) {
		h.log.Warn().Err(err).Msg("redis unreachable")
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "redis_unavailable", Message: "redis is unreachable; retry later"}
	}
	switch {
	case errors.Is(err, engine.ErrInvalidResult):
		return &api.Error{Status: http.StatusBadRequest, Code: "invalid_result", Message: "class: want success, transient, permanent or lost",
			Details: map[string]string{"field": "class"}}
	case errors.Is(err, engine.ErrNotFound):
		return &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such rollout"}
	case errors.Is(err, engine.ErrUnknownAttempt):
		return &api.Error{Status: http.StatusNotFound, Code: "unknown_attempt", Message: "no such attempt"}
	case errors.Is(err, engine.ErrWrongNode):
		return &api.Error{Status: http.StatusForbidden, Code: "forbidden", Message: "attempt belongs to another node"}
	case errors.Is(err, engine.ErrInvalidState):
		return &api.Error{Status: http.StatusConflict, Code: "invalid_state", Message: err.Error()}
	case errors.Is(err, engine.ErrStaleAttempt):
		return &api.Error{Status: http.StatusConflict, Code: "stale_attempt", Message: "attempt is no longer current"}
	}
	return err
}

// redisUnavailable reports whether err says that Redis cannot be reached
// or cannot serve now (as opposed to refusing a command): network errors,
// a closed connection or client, an exhausted pool, and the server's
// loading, read-only, master-down, cluster-down, try-again and max-clients
// answers.
func redisUnavailable(err error) bool {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsClusterDownError(err), redis.IsTryAgainError(err), redis.IsMaxClientsError(err):
		return true
	}
	return false
}

// reportAskEvery bounds how often the hub asks one agent for a full report.
const reportAskEvery = time.Minute

// WantsReport says whether the hub wants node's full report now: an item
// of the node is ambiguous (its attempt's result was lost or came too
// late) and only a report settles it; or, after a reconcile, the
// observations hold nothing of a node the snapshot knows (Redis lost its
// data, or the agent never reported). The answer is asked once per
// reportAskEvery per node, so an agent that cannot report is not kept
// busy. In memory: every poll asks. The first reason comes from the
// engine (engine.WithReportWanted): the leader's Step, which makes items
// ambiguous, announces their nodes to every replica, and a replica that
// missed the announcement learns it at the node's next poll that looks in
// Redis.
func (h *Hub) WantsReport(node string) bool { return h.asks.wants(node, time.Now()) }
