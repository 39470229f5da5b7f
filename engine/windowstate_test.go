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
