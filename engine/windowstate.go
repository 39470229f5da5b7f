package engine

import (
	"time"

	"github.com/fleetwave/fleetwave"
)

// WindowState tells whether an item bound by these maintenance windows
// could be dispatched at now, and otherwise when its next window opens (zero
// when none opens within the cron horizon). It is the rule Step applies,
// for callers that want to show it ahead of time (fleetwave plan). An item
// with bypass, or with no window, is always open.
func WindowState(spec fleetwave.ItemSpec, now time.Time) (open bool, next time.Time, err error) {
	_, def, err := windowSetOf(spec)
	if err != nil || def == "" {
		return err == nil, time.Time{}, err
	}
	ws, err := parseWindowSet(def)
	if err != nil {
		return false, time.Time{}, err
	}
	open, next = ws.state(now)
	return open, next, nil
}
