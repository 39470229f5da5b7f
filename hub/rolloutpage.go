package hub

import (
	"context"
	"errors"
	"net/http"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/engine"
)

// RolloutPage returns one rollout and a page of its items (the API's
// GET /api/v1/rollouts/{id}): the engine reads only that page from Redis,
// so the console's every-second read costs the page, not the rollout. A
// cursor that is not an item of the rollout is 400 invalid_query.
func (h *Hub) RolloutPage(ctx context.Context, id, after string, limit int) (fleetwave.Rollout, []fleetwave.Item, bool, error) {
	r, items, more, err := h.eng.RolloutPage(ctx, id, after, limit)
	switch {
	case errors.Is(err, engine.ErrInvalidCursor):
		return r, nil, false, &api.Error{Status: http.StatusBadRequest, Code: "invalid_query",
			Message: "cursor: not an item of this rollout; start again without one", Details: map[string]string{"field": "cursor"}}
	case err != nil:
		return r, nil, false, h.apiError(ctx, err)
	}
	return r, items, more, nil
}
