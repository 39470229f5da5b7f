package reconciler

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave"
)

// Reasons of the node side: instances installed by hand and split actions.
const (
	// ReasonPlacementRejected: a node of the item (any node of its split
	// group) does not advertise a requirement of the action in its last
	// full report, or a node of the group cannot take part; the item is
	// created blocked with a message naming the nodes and what they lack.
	// The engine gives the same reason when a requirement is gone by the
	// time the item would be dispatched.
	ReasonPlacementRejected = "placement_rejected"
	// ReasonNotCLIManaged: a takeover request targets an instance that
	// fleetwave already manages; the item is recorded as skipped.
	ReasonNotCLIManaged = "not_cli_managed"
)

// DetectCommands returns the detect commands the agent of node must run:
// one per block that declares detect and is the block of a BRC (trigger)
// whose scope holds the node, sorted by block. Pure: a function of the
// snapshot (DetectCommandsByNode gives every node's at once).
func DetectCommands(snap *fleetwave.Snapshot, node string) []fleetwave.DetectCommand {
	if snap == nil || snap.Nodes[node] == nil {
		return nil
	}
	return DetectCommandsByNode(snap)[node]
}

// DetectCommandsByNode returns DetectCommands for every node that has
// some, computing each BRC's scope once.
func DetectCommandsByNode(snap *fleetwave.Snapshot) map[string][]fleetwave.DetectCommand {
	blocks := map[string]map[string]bool{} // node -> blocks
	for _, name := range slices.Sorted(maps.Keys(snap.Triggers)) {
		t := snap.Triggers[name]
		b := snap.Blocks[t.BlockName]
		if b == nil || b.Detect == nil {
			continue
		}
		for _, id := range snap.Scope(t) {
			if blocks[id] == nil {
				blocks[id] = map[string]bool{}
			}
			blocks[id][b.Name] = true
		}
	}
	out := make(map[string][]fleetwave.DetectCommand, len(blocks))
	for id, names := range blocks {
		cmds := make([]fleetwave.DetectCommand, 0, len(names))
		for _, name := range slices.Sorted(maps.Keys(names)) {
			d := snap.Blocks[name].Detect
			cmds = append(cmds, fleetwave.DetectCommand{Block: name, Command: d.Command,
				TimeoutSeconds: int(math.Ceil(d.Timeout.Seconds()))})
		}
		out[id] = cmds
	}
	return out
}

// awaitingDetect says whether an install of block on a node must wait for
// a report that ran the block's detect command: the block declares one and
// the node's last report does not account for it (Report.Detected), so an
// instance installed by hand may be there, unseen. Only with live reports
// (Options.RequireReport).
func awaitingDetect(opts Options, block *fleetwave.Block, rep *fleetwave.Report) bool {
	return opts.RequireReport && block.Detect != nil && rep != nil && !slices.Contains(rep.Detected, block.Name)
}

// lacks lists what node's last report does not advertise of reqs:
// "capability <c>" or "data address <name>"; a node without a report lacks
// everything.
func lacks(obs fleetwave.Observations, node string, reqs []string) []string {
	r := obs[node]
	var out []string
	for _, req := range reqs {
		if name, ok := strings.CutPrefix(req, fleetwave.RequireAddressPrefix); ok {
			if r == nil || r.DataAddresses[name] == "" {
				out = append(out, "data address "+name)
			}
		} else if r == nil || !slices.Contains(r.Capabilities, req) {
			out = append(out, "capability "+req)
		}
	}
	return out
}

// lackMessage names, for each node that lacks a requirement, what it
// lacks: "n3 lacks capability gpu, data address shuffle; n4 has not
// reported". Empty when every node has everything.
func lackMessage(obs fleetwave.Observations, nodes, reqs []string) string {
	var parts []string
	for _, n := range nodes {
		if obs[n] == nil && len(reqs) > 0 {
			parts = append(parts, n+" has not reported (lacks "+strings.Join(lacks(obs, n, reqs), ", ")+")")
			continue
		}
		if l := lacks(obs, n, reqs); len(l) > 0 {
			parts = append(parts, n+" lacks "+strings.Join(l, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// blockItem makes a planned item blocked with reason and msg: it is
// created, counted and shown, never dispatched.
func blockItem(it *fleetwave.ItemSpec, reason, msg string) {
	it.BlockReason, it.BlockMessage, it.Payload, it.Group = reason, msg, fleetwave.AttemptPayload{}, ""
}

// place applies the placement of the block's actions to planned items
// (docs/contract.md#rules, placement fails closed):
//
//   - the items of one split action are one group (ItemSpec.Group = the
//     action's name), placed all-or-nothing by the engine; when one of
//     them cannot take part (it is skipped or blocked) the others are
//     blocked with placement_rejected naming it, and with live reports
//     (opts.RequireReport) when a node of the group lacks a requirement
//     every item is blocked with a message naming the nodes and what they
//     lack;
//   - with live reports, an item of a single action whose node lacks a
//     requirement is blocked the same way;
//   - held (holds of the same plan, e.g. a node without a report yet), a
//     split action waits whole: its items become holds too, so that it
//     never starts on part of its nodes.
//
// It returns the items to create and the holds added.
func place(obs fleetwave.Observations, trigger string, block *fleetwave.Block, items []rankedItem, held []Problem, opts Options) ([]rankedItem, []Problem) {
	groups := map[string][]int{} // split action -> indexes of its items
	for i := range items {
		it := items[i].item
		ba := block.Actions[it.Action]
		if ba.Placement == fleetwave.PlacementSplit {
			groups[it.Action] = append(groups[it.Action], i)
			continue
		}
		if opts.RequireReport && it.SkipReason == "" && it.BlockReason == "" && len(it.Requires) > 0 {
			if msg := lackMessage(obs, []string{it.Node}, it.Requires); msg != "" {
				blockItem(it, ReasonPlacementRejected, fmt.Sprintf("action %s: %s", it.Action, msg))
			}
		}
	}
	var holds []Problem
	drop := map[int]bool{}
	for _, action := range slices.Sorted(maps.Keys(groups)) {
		idx := groups[action]
		var nodes, out []string
		for _, i := range idx {
			it := items[i].item
			nodes = append(nodes, it.Node)
			switch {
			case it.SkipReason != "":
				out = append(out, it.Node+" is skipped ("+it.SkipReason+")")
			case it.BlockReason != "":
				out = append(out, it.Node+" is blocked ("+it.BlockReason+")")
			}
		}
		slices.Sort(nodes)
		what := fmt.Sprintf("split action %s on %s", action, strings.Join(nodes, ", "))
		if len(held) > 0 {
			h := held[0]
			for _, i := range idx {
				it := items[i].item
				drop[i] = true
				holds = append(holds, Problem{Trigger: trigger, Node: it.Node, Block: it.Block, Reason: h.Reason,
					Message: fmt.Sprintf("%s waits for node %s (%s): it runs on all of its nodes or on none", what, h.Node, h.Reason),
					Key:     it.Instance()})
			}
			continue
		}
		msg := ""
		if len(out) > 0 {
			msg = what + ": not every node can take part: " + strings.Join(out, "; ")
		} else if opts.RequireReport {
			var reqs []string
			for _, i := range idx {
				for _, r := range items[i].item.Requires {
					if !slices.Contains(reqs, r) {
						reqs = append(reqs, r)
					}
				}
			}
			if l := lackMessage(obs, nodes, reqs); l != "" {
				msg = what + ": " + l
			}
		}
		for _, i := range idx {
			it := items[i].item
			switch {
			case it.SkipReason != "" || it.BlockReason != "":
			case msg != "":
				blockItem(it, ReasonPlacementRejected, msg)
			default:
				it.Group = action
			}
		}
	}
	if len(drop) == 0 {
		return items, holds
	}
	kept := items[:0:0]
	for i, it := range items {
		if !drop[i] {
			kept = append(kept, it)
		}
	}
	return kept, holds
}
