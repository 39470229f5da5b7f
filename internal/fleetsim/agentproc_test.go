package fleetsim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// TestAgentEventsReachTheTracker: the probe agent's lines, as RunAgents
// writes them, reach the scenario's callbacks with the agent's own times;
// only the results the hub took count as successes, a payload never
// travels, and a line that is not an event is counted, not passed on.
func TestAgentEventsReachTheTracker(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 2, 3, 4000, time.UTC)
	att := fleetwave.Attempt{ID: "probe-g2.1.1", Item: "probe-g2.1", Rollout: "probe-g2", TargetVersion: "0.0.2",
		Payload: fleetwave.AttemptPayload{Command: "deploy", Config: "password: not-in-the-line\n"}}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	taken := attemptEvent("result", att, at.Add(time.Second))
	taken.Class = fleetwave.ResultSuccess
	refused := attemptEvent("result", att, at.Add(2*time.Second))
	refused.Class, refused.Error = fleetwave.ResultSuccess, "hub answered 409 stale_attempt"
	for _, ev := range []AgentEvent{{Event: "registered", At: at}, attemptEvent("attempt", att, at), taken, refused} {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(out.String(), "not-in-the-line") || strings.Contains(out.String(), "deploy") {
		t.Fatalf("an attempt's payload is in the events:\n%s", out.String())
	}
	out.WriteString("not json\n")

	p := &agentProc{successes: map[string]int{}}
	var got []string
	p.read(&out, func(a fleetwave.Attempt, when time.Time) {
		got = append(got, "attempt "+a.ID+" "+when.Format(time.RFC3339Nano))
	}, func(a fleetwave.Attempt, res fleetwave.AttemptResult, err error, when time.Time) {
		got = append(got, "result "+a.ID+" "+string(res.Class)+" "+when.Format(time.RFC3339Nano)+" "+errText(err))
	})
	want := []string{
		"attempt probe-g2.1.1 2026-12-06T01:02:03.000004Z",
		"result probe-g2.1.1 success 2026-12-06T01:02:04.000004Z ",
		"result probe-g2.1.1 success 2026-12-06T01:02:05.000004Z hub answered 409 stale_attempt",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("callbacks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !p.ready() {
		t.Error("the registered line was not taken")
	}
	succ := map[string]int{"probe-g2.1": 1}
	p.addSuccesses(succ)
	if succ["probe-g2.1"] != 2 {
		t.Errorf("successes %v: want the one the hub took added to the fleet's", succ)
	}
	if p.malformed != 1 {
		t.Errorf("malformed %d, want 1", p.malformed)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
