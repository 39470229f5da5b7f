package hub

import (
	"context"
	"errors"
	"net/http"
	"time"

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

// PollAttempts long-polls the attempts queued for node.
func (h *Hub) PollAttempts(ctx context.Context, node string, wait time.Duration) ([]fleetwave.Attempt, error) {
	atts, err := h.eng.Poll(ctx, node, 16, wait)
	if err != nil {
		return nil, apiError(err)
	}
	for _, a := range atts {
		h.log.Info().Str("node", node).Str("attempt", a.ID).Str("item", a.Item).Str("rollout", a.Rollout).
			Str("block", a.Block).Str("action", a.Action).Int64("generation", a.Generation).Int64("fence", a.Fence).Msg("attempt delivered")
	}
	return atts, nil
}

// CompleteAttempt applies an attempt's result.
func (h *Hub) CompleteAttempt(ctx context.Context, node string, res fleetwave.AttemptResult) error {
	if err := h.eng.Complete(ctx, node, res); err != nil {
		h.log.Warn().Err(err).Str("node", node).Str("attempt", res.AttemptID).Msg("attempt result refused")
		return apiError(err)
	}
	h.log.Info().Str("node", node).Str("attempt", res.AttemptID).Str("class", string(res.Class)).Int("exit_code", res.ExitCode).Msg("attempt result")
	h.kick(h.statusNow)
	return nil
}

// Report stores a full report; observations never change desired state,
// but they may show drift, so a reconcile follows.
func (h *Hub) Report(ctx context.Context, r fleetwave.Report) error {
	r.ReceivedAt = h.clock.Now().UTC()
	if err := h.eng.Report(ctx, r); err != nil {
		return apiError(err)
	}
	h.kick(h.reconcileNow)
	return nil
}

// Summary returns the counters, the last sync and the rollouts.
func (h *Hub) Summary(ctx context.Context) (fleetwave.Summary, error) {
	c, err := h.eng.Counters(ctx)
	if err != nil {
		return fleetwave.Summary{}, err
	}
	rs, err := h.eng.Rollouts(ctx)
	if err != nil {
		return fleetwave.Summary{}, err
	}
	s := fleetwave.Summary{Counters: c, Sync: h.SyncState(), Rollouts: rs}
	if snap := h.Snapshot(); snap != nil {
		s.Nodes = len(snap.Nodes)
	}
	return s, nil
}

// Rollout returns one rollout with its items.
func (h *Hub) Rollout(ctx context.Context, id string) (fleetwave.Rollout, []fleetwave.Item, error) {
	r, items, err := h.eng.Rollout(ctx, id)
	if err != nil {
		return r, nil, apiError(err)
	}
	return r, items, nil
}

// TriggerSync asks for a fetch now (the git webhook).
func (h *Hub) TriggerSync() { h.kick(h.syncNow) }

// Ready reports whether Redis answers and a snapshot is in force.
func (h *Hub) Ready(ctx context.Context) error {
	if err := h.redis.client.Ping(ctx).Err(); err != nil {
		return err
	}
	if h.Snapshot() == nil {
		return errors.New("no valid snapshot yet")
	}
	return nil
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
		return apiError(err)
	}
	h.log.Info().Str("rollout", id).Str("action", action).Str("actor", actor.Name).Int64("fence", fence).Msg("rollout state changed")
	h.kick(h.statusNow)
	return nil
}

// apiError maps engine errors to API errors with stable codes.
func apiError(err error) error {
	switch {
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
