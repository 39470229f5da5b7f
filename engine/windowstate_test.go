package engine

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

func TestWindowState(t *testing.T) {
	nightly := fleetwave.Window{Name: "nightly", Cron: "0 2 * * *", Duration: 2 * time.Hour, Timezone: "Europe/Berlin"}
	spec := fleetwave.ItemSpec{Windows: []fleetwave.Window{nightly}}
	day := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC) // 14:00 in Berlin
	open, next, err := WindowState(spec, day)
	if err != nil || open || !next.Equal(time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("at noon UTC: open %v next %v err %v, want closed until 00:00 UTC (02:00 Berlin)", open, next, err)
	}
	if open, _, _ := WindowState(spec, time.Date(2026, 6, 2, 1, 30, 0, 0, time.UTC)); !open {
		t.Fatal("closed inside the window")
	}
	spec.BypassWindows = true
	if open, _, _ := WindowState(spec, day); !open {
		t.Fatal("a bypassed item waits")
	}
	if _, _, err := WindowState(fleetwave.ItemSpec{Windows: []fleetwave.Window{{Name: "bad", Cron: "61 * * * *", Duration: time.Hour}}}, day); err == nil {
		t.Fatal("an invalid cron was accepted")
	}
}

// TestTriggerWindowNarrowsTheNodesWindows: a required (trigger) window must
// be open together with one of the node's windows; the next opening is the
// first time both hold, and never when they cannot overlap.
func TestTriggerWindowNarrowsTheNodesWindows(t *testing.T) {
	nightly := fleetwave.Window{Name: "nightly", Cron: "0 2 * * *", Duration: 2 * time.Hour, Timezone: "Europe/Berlin"}
	weekend := fleetwave.Window{Name: "weekend", Cron: "0 0 * * 6", Duration: 48 * time.Hour, Required: true}
	ops := fleetwave.Window{Name: "ops", Cron: "0 12 * * 3", Duration: time.Hour, Required: true}
	wed := time.Date(2026, 3, 4, 12, 30, 0, 0, time.UTC) // a Wednesday, ops open
	tests := []struct {
		name    string
		windows []fleetwave.Window
		now     time.Time
		open    bool
		next    time.Time
	}{
		{"the trigger window alone applies to a node without windows", []fleetwave.Window{ops}, wed, true, time.Time{}},
		{"open trigger window, closed node window: waits", []fleetwave.Window{nightly, weekend}, wed,
			false, time.Date(2026, 3, 7, 1, 0, 0, 0, time.UTC)}, // Saturday 02:00 Berlin, inside the weekend
		{"both open: runs", []fleetwave.Window{nightly, weekend}, time.Date(2026, 3, 7, 1, 30, 0, 0, time.UTC), true, time.Time{}},
		{"node window open, trigger window closed: waits", []fleetwave.Window{nightly, weekend}, time.Date(2026, 3, 5, 1, 30, 0, 0, time.UTC),
			false, time.Date(2026, 3, 7, 1, 0, 0, 0, time.UTC)},
		{"windows that never overlap: no next opening", []fleetwave.Window{nightly, ops}, wed, false, time.Time{}},
		{"without a required window, any open window is enough", []fleetwave.Window{nightly, {Name: "ops", Cron: "0 12 * * 3", Duration: time.Hour}}, wed, true, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, next, err := WindowState(fleetwave.ItemSpec{Windows: tt.windows}, tt.now)
			if err != nil || open != tt.open || !next.Equal(tt.next) {
				t.Fatalf("open %v next %v err %v, want open %v next %v", open, next, err, tt.open, tt.next)
			}
		})
	}
}
