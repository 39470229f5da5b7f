package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// TestRolloutCreateAndWatchAgainstAHub plans a manual rollout (dry run:
// nothing written), requests it (a commit by the operator), and watches
// it to its end with -o json, against a running hub with real agents.
func TestRolloutCreateAndWatchAgainstAHub(t *testing.T) {
	files := nodeFleet()
	files["blocks/app.cue"] = "kind: \"block\"\nname: \"app\"\nactions: { install: { command: \"true\" }, upgrade: { command: \"true\" }, " +
		"restart: { command: \"sleep 0.3; echo restart >> runs\" } }\n"
	files["brc/app.cue"] = "kind: \"trigger\"\nname: \"app\"\nblock_name: \"app\"\ntarget_version: \"1\"\nnodes: [\"n1\", \"n2\", \"n3\"]\n"
	f := startCLIFleet(t, files, []string{"n1", "n2", "n3"})
	f.waitFor("the install rollout to complete", func(out string, code int) bool {
		return code == 0 && strings.Contains(out, `"status": "completed"`)
	}, "rollout", "get", "app-g1", "-o", "json")
	// a restart needs the instance as its node reports it: a node whose
	// last report shows none is skipped (not_installed), and a loaded
	// machine can finish the install before the reports that show it
	for _, n := range []string{"n1", "n2"} {
		f.waitFor(n+" to report app installed", func(out string, code int) bool {
			return code == 0 && hasRow(out, "app", "1")
		}, "node", "get", n)
	}

	// dry run: the resolved nodes and items, nothing written
	args := []string{"rollout", "create", "--brc", "app", "--action", "restart", "--selector", "tier in (web)", "--name", "restart-web", "--token", "op-token"}
	out, errb, code := f.cli(append(slices.Clone(args), "--dry-run")...)
	mustOK(t, "dry run", out, errb, code)
	if !strings.HasPrefix(out, "dry run: nothing was written\n") || fieldAfter(out, "request") != "restart-web" ||
		fieldAfter(out, "rollout") != "manual-restart-web" || !hasRow(out, "nodes", "2") ||
		!hasRow(out, "n1", "app", "restart") || !hasRow(out, "n2", "app", "restart") || strings.Contains(out, "n3") {
		t.Fatalf("dry run output:\n%s", out)
	}
	out, errb, code = f.cli(append(slices.Clone(args), "--dry-run", "-o", "json")...)
	mustOK(t, "dry run -o json", out, errb, code)
	var plan api.RolloutPlan
	if err := json.Unmarshal([]byte(out), &plan); err != nil || !slices.Equal(plan.Targets, []string{"n1", "n2"}) || len(plan.Items) != 2 || plan.Commit != "" {
		t.Fatalf("dry run -o json: %v %+v\n%s", err, plan, out)
	}
	if doc := f.file("rollouts/restart-web.yaml"); doc != "" {
		t.Fatalf("a dry run wrote rollouts/restart-web.yaml:\n%s", doc)
	}

	// for real, the nodes by --label this time: a commit by olga
	out, errb, code = f.cli("rollout", "create", "--brc", "app", "--action", "restart", "--label", "tier=web", "--name", "restart-web",
		"--reason", "stuck workers", "--token", "op-token")
	mustOK(t, "create", out, errb, code)
	commit := fieldAfter(out, "commit")
	if len(commit) != 40 || fieldAfter(out, "request") != "restart-web" || fieldAfter(out, "rollout") != "manual-restart-web" ||
		!hasRow(out, "nodes", "2", "n1,n2") || !strings.Contains(out, "fleetwave rollout watch manual-restart-web\n") {
		t.Fatalf("create output:\n%s", out)
	}
	if msg := f.commitText(commit); !strings.Contains(msg, "Fleetwave-Actor: olga") || !strings.Contains(msg, "Fleetwave-Reason: stuck workers") {
		t.Fatalf("request commit:\n%s", msg)
	}
	if doc := f.file("rollouts/restart-web.yaml"); !strings.Contains(doc, "action_name: restart") || !strings.Contains(doc, "- n1\n") {
		t.Fatalf("rollouts/restart-web.yaml:\n%s", doc)
	}

	// watch at once: it waits for the hub to create the rollout, then
	// prints one JSON object per line until it completed
	out, errb, code = f.cli("rollout", "watch", "manual-restart-web", "-o", "json", "--interval", "100ms")
	mustOK(t, "watch", out, errb, code)
	evs := jsonEvents(t, out)
	last := evs[len(evs)-1]
	if last.Rollout != "manual-restart-web" || last.Status != fleetwave.RolloutCompleted || last.Counters.Total != 2 || last.Counters.Done != 2 {
		items, _, _ := f.cli("rollout", "get", "manual-restart-web", "-o", "json") // the items' reasons
		t.Fatalf("last event %+v\n%s\nthe rollout:\n%s", last, out, items)
	}
	for i, ev := range evs[:len(evs)-1] {
		if ev.Rollout != "manual-restart-web" || rolloutFinished(ev.Status) || ev.same(evs[i+1]) {
			t.Fatalf("event %d of %d: %+v\n%s", i, len(evs), ev, out)
		}
	}
	// a finished rollout: one line, exit 0
	out, errb, code = f.cli("rollout", "watch", "manual-restart-web")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "manual-restart-web completed wave") {
		t.Fatalf("watch a completed rollout: exit %d\n%s%s", code, out, errb)
	}

	// request names are never reused
	_, errb, code = f.cli("rollout", "create", "--brc", "app", "--action", "restart", "--nodes", "n3", "--name", "restart-web", "--token", "op-token")
	if code != 1 || !strings.Contains(errb, "(already_exists)\n") || !strings.Contains(errb, "hint: request names are never reused") {
		t.Fatalf("a reused name: exit %d\n%s", code, errb)
	}
	// a viewer may not request rollouts
	_, errb, code = f.cli("rollout", "create", "--brc", "app", "--nodes", "n3", "--dry-run")
	if code != 1 || !strings.Contains(errb, "(forbidden)\n") {
		t.Fatalf("a viewer's request: exit %d\n%s", code, errb)
	}
}
