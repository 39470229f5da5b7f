package reconciler

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave"
)

// nodeSideSnapshot: block web with a detect command and a split action
// shuffle (network_shuffle and the data address shuffle on every node),
// BRC web over n1..n3, BRC other over n1 only of a block without detect.
func nodeSideSnapshot() *fleetwave.Snapshot {
	snap := testSnapshot()
	snap.Blocks["web"] = &fleetwave.Block{Name: "web",
		Detect: &fleetwave.BlockDetect{Command: "cat version", Timeout: 1500 * time.Millisecond},
		Actions: map[string]fleetwave.BlockAction{
			"install": {Command: "echo install", Timeout: time.Minute},
			"upgrade": {Command: "echo upgrade", Timeout: time.Minute},
			"shuffle": {Command: "run-shuffle", Timeout: time.Minute, Placement: fleetwave.PlacementSplit,
				Requires: []string{"network_shuffle", "address:shuffle"}},
			"gpu-check": {Command: "nvidia-smi", Requires: []string{"gpu"}},
		}}
	snap.Triggers = map[string]*fleetwave.Trigger{
		"web":   {Name: "web", BlockName: "web", TargetVersion: "2.0", Nodes: []string{"n1", "n2", "n3"}, MaxConcurrent: 1},
		"other": {Name: "other", BlockName: "operator", TargetVersion: "1", Nodes: []string{"n1"}},
	}
	snap.Generations = map[fleetwave.ObjectKey]int64{"trigger/web": 3, "trigger/other": 1}
	return snap
}

func shuffler(node string, caps []string, addrs map[string]string, instances ...fleetwave.InstanceStatus) *fleetwave.Report {
	if instances == nil {
		instances = []fleetwave.InstanceStatus{}
	}
	return &fleetwave.Report{Node: node, Capabilities: caps, DataAddresses: addrs, Instances: instances, Detected: []string{"web"}}
}

func TestDetectCommandsFollowTheBRCScopes(t *testing.T) {
	snap := nodeSideSnapshot()
	want := []fleetwave.DetectCommand{{Block: "web", Command: "cat version", TimeoutSeconds: 2}}
	if got := DetectCommands(snap, "n2"); !reflect.DeepEqual(got, want) {
		t.Fatalf("n2: %+v, want %+v", got, want)
	}
	snap.Triggers["web"].Nodes = []string{"n1"}
	if got := DetectCommands(snap, "n2"); len(got) != 0 {
		t.Fatalf("n2 outside every scope of web: %+v", got)
	}
	if got := DetectCommands(snap, "nobody"); got != nil {
		t.Fatalf("unknown node: %+v", got)
	}
}

func TestInstallWaitsForTheDetectCommandAndSkipsHandInstalls(t *testing.T) {
	snap := nodeSideSnapshot()
	delete(snap.Triggers, "other")
	obs := fleetwave.Observations{
		// reported before it ran web's detect command
		"n1": {Node: "n1", Instances: []fleetwave.InstanceStatus{}},
		// detect found nothing
		"n2": {Node: "n2", Instances: []fleetwave.InstanceStatus{}, Detected: []string{"web"}},
		// detect found a hand-installed web 1.4
		"n3": {Node: "n3", Detected: []string{"web"}, Instances: []fleetwave.InstanceStatus{
			{Block: "web", Version: "1.4", State: fleetwave.StateInstalled, ManagedBy: fleetwave.ManagedByCLI}}},
	}
	plan := PlanWith(snap, obs, now, Options{RequireReport: true})
	r := plan.Rollouts[0]
	if got, want := nodesOf(r), []string{"n3:upgrade", "n2:install"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	if r.Items[0].SkipReason != fleetwave.ReasonCLIManaged || r.Items[1].SkipReason != "" {
		t.Fatalf("items = %+v", r.Items)
	}
	if len(plan.Holds) != 1 || plan.Holds[0].Node != "n1" || plan.Holds[0].Reason != fleetwave.ReasonAwaitingReport ||
		!strings.Contains(plan.Holds[0].Message, "detect command of block web") {
		t.Fatalf("holds = %+v", plan.Holds)
	}
	// without live reports (a plan preview) nothing waits for detection
	if got := nodesOf(PlanSnapshot(snap, obs, now).Rollouts[0]); len(got) != 3 {
		t.Fatalf("preview items = %v", got)
	}
}

func TestTakeoverRequestUsesTheBuiltInTakeover(t *testing.T) {
	snap := nodeSideSnapshot()
	snap.Nodes["n4"] = &fleetwave.Node{ID: "n4"}
	snap.Triggers["web"].Nodes = append(snap.Triggers["web"].Nodes, "n4")
	obs := fleetwave.Observations{
		"n1": {Node: "n1", Detected: []string{"web"}, Instances: []fleetwave.InstanceStatus{
			{Block: "web", Version: "1.4", State: fleetwave.StateInstalled, ManagedBy: fleetwave.ManagedByCLI}}},
		"n2": {Node: "n2", Detected: []string{"web"}, Instances: []fleetwave.InstanceStatus{
			{Block: "web", Version: "2.0", State: fleetwave.StateInstalled, ManagedBy: "web"}}},
		"n3": {Node: "n3", Detected: []string{"web"}, Instances: []fleetwave.InstanceStatus{}},
	}
	req := &fleetwave.RolloutRequest{Name: "take", BRC: "web", ActionName: fleetwave.ActionTakeover, Nodes: []string{"n1", "n2", "n3", "n4"}}
	spec, err := PlanManual(snap, obs, req, Options{RequireReport: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fleetwave.ItemSpec{}
	for _, it := range spec.Items {
		got[it.Node] = it
	}
	take := got["n1"]
	if take.Action != fleetwave.ActionTakeover || take.SkipReason != "" || take.Payload.Command != "" || take.Payload.Operational ||
		take.TargetVersion != "" || take.ConfigHash != "" || take.DesiredState != "" || take.ManagedBy != "web" || take.Generation != 3 {
		t.Fatalf("takeover item = %+v", take)
	}
	if got["n2"].SkipReason != ReasonNotCLIManaged || got["n3"].SkipReason != ReasonNotInstalled || got["n4"].SkipReason != "" {
		t.Fatalf("items = %+v", spec.Items)
	}
	// a block's own takeover command wins over the built-in one
	b := snap.Blocks["web"]
	b.Actions["takeover"] = fleetwave.BlockAction{Command: "adopt", Timeout: time.Minute}
	spec, err = PlanManual(snap, obs, req, Options{RequireReport: true})
	if err != nil || len(spec.Items) != 4 || spec.Items[1].Node != "n1" || spec.Items[1].Payload.Command != "adopt" {
		t.Fatalf("with a takeover action: %+v, %v", spec.Items, err)
	}
}

func TestSplitActionIsOneGroupPlacedAllOrNothing(t *testing.T) {
	snap := nodeSideSnapshot()
	addr := map[string]string{"shuffle": "10.0.0.1:7077"}
	net := []string{"network_shuffle"}
	inst := fleetwave.InstanceStatus{Block: "web", Version: "2.0", State: fleetwave.StateInstalled, ManagedBy: "web"}
	req := &fleetwave.RolloutRequest{Name: "job", BRC: "web", ActionName: "shuffle", Nodes: []string{"n1", "n2", "n3"}}
	live := Options{RequireReport: true}

	obs := fleetwave.Observations{
		"n1": shuffler("n1", net, addr, inst),
		"n2": shuffler("n2", net, nil, inst),
		"n3": shuffler("n3", []string{"gpu"}, addr, inst),
	}
	spec, err := PlanManual(snap, obs, req, live)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Items) != 3 {
		t.Fatalf("items = %+v", spec.Items)
	}
	for _, it := range spec.Items {
		if it.BlockReason != ReasonPlacementRejected || it.Group != "" || it.Payload != (fleetwave.AttemptPayload{}) ||
			it.BlockMessage != "split action shuffle on n1, n2, n3: n2 lacks data address shuffle; n3 lacks capability network_shuffle" {
			t.Fatalf("item %s = %+v", it.Node, it)
		}
	}

	// every node advertises both: one group, dispatched by the engine whole
	obs["n2"], obs["n3"] = shuffler("n2", net, addr, inst), shuffler("n3", net, addr, inst)
	spec, err = PlanManual(snap, obs, req, live)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range spec.Items {
		if it.BlockReason != "" || it.Group != "shuffle" || it.Payload.Command != "run-shuffle" ||
			!reflect.DeepEqual(it.Requires, []string{"network_shuffle", "address:shuffle"}) {
			t.Fatalf("item %s = %+v", it.Node, it)
		}
	}

	// a member that cannot take part (installed by hand) blocks the others
	obs["n2"] = shuffler("n2", net, addr, fleetwave.InstanceStatus{Block: "web", Version: "1", ManagedBy: fleetwave.ManagedByCLI})
	spec, _ = PlanManual(snap, obs, req, live)
	for _, it := range spec.Items {
		want := ReasonPlacementRejected
		if it.Node == "n2" {
			want = ""
		}
		if it.BlockReason != want || it.Group != "" {
			t.Fatalf("item %s = %+v", it.Node, it)
		}
		if want != "" && !strings.Contains(it.BlockMessage, "n2 is skipped (cli_managed)") {
			t.Fatalf("message %q", it.BlockMessage)
		}
	}

	// a BRC whose config action is the split one: a node not reported yet
	// holds the whole group
	snap.Triggers["web"].ActionName = "shuffle"
	snap.Triggers["web"].TargetVersion = "3.0"
	delete(obs, "n3")
	obs["n2"] = shuffler("n2", net, addr, inst)
	plan := PlanWith(snap, obs, now, live)
	var web fleetwave.RolloutSpec
	for _, r := range plan.Rollouts {
		if r.Source.Object == "trigger/web" {
			web = r
		}
	}
	if len(web.Items) != 0 {
		t.Fatalf("items = %+v, want none while n3 has not reported", web.Items)
	}
	held := map[string]string{}
	for _, h := range plan.Holds {
		if h.Trigger == "web" {
			held[h.Node] = h.Reason
		}
	}
	if len(held) != 3 || held["n1"] != fleetwave.ReasonAwaitingReport {
		t.Fatalf("holds = %+v", plan.Holds)
	}
	// once it reported, the group is planned whole
	obs["n3"] = shuffler("n3", net, addr, inst)
	for _, r := range PlanWith(snap, obs, now, live).Rollouts {
		if r.Source.Object != "trigger/web" {
			continue
		}
		if len(r.Items) != 3 {
			t.Fatalf("items = %+v", r.Items)
		}
		for _, it := range r.Items {
			if it.Group != "shuffle" || it.Action != "shuffle" {
				t.Fatalf("item = %+v", it)
			}
		}
	}
}

func TestSingleActionRequirementsAreCheckedAtPlanTime(t *testing.T) {
	snap := nodeSideSnapshot()
	inst := fleetwave.InstanceStatus{Block: "web", Version: "2.0", State: fleetwave.StateInstalled, ManagedBy: "web"}
	obs := fleetwave.Observations{"n1": shuffler("n1", []string{"gpu"}, nil, inst), "n2": shuffler("n2", nil, nil, inst)}
	req := &fleetwave.RolloutRequest{Name: "check", BRC: "web", ActionName: "gpu-check", Nodes: []string{"n1", "n2", "n3"}}
	spec, err := PlanManual(snap, obs, req, Options{RequireReport: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range spec.Items {
		got[it.Node] = it.BlockReason + ":" + it.BlockMessage + ":" + it.Group
	}
	want := map[string]string{
		"n1": "::",
		"n2": "placement_rejected:action gpu-check: n2 lacks capability gpu:",
		"n3": "placement_rejected:action gpu-check: n3 has not reported (lacks capability gpu):",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
}
