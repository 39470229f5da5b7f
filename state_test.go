package fleetwave_test

import (
	"testing"

	"github.com/fleetwave/fleetwave"
)

func TestStateAfter(t *testing.T) {
	for _, c := range []struct {
		action           string
		desired, current fleetwave.DesiredState
		want             fleetwave.DesiredState
	}{
		{"install", "", "", fleetwave.StateInstalled},
		{"upgrade", "", fleetwave.StateRunning, fleetwave.StateRunning},
		{"uninstall", "", fleetwave.StateRunning, fleetwave.StateAbsent},
		{"start", "", fleetwave.StateStopped, fleetwave.StateRunning},
		{"stop", "", fleetwave.StateRunning, fleetwave.StateStopped},
		{"stop", fleetwave.StateAbsent, fleetwave.StateRunning, fleetwave.StateAbsent}, // the attempt's desired state wins
		{"apply", fleetwave.StateRunning, "", fleetwave.StateRunning},
	} {
		if got := fleetwave.StateAfter(c.action, c.desired, c.current); got != c.want {
			t.Errorf("StateAfter(%q, %q, %q) = %q, want %q", c.action, c.desired, c.current, got, c.want)
		}
	}
}
