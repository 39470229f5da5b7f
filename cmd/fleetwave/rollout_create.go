package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

const rolloutCreateExample = "fleetwave rollout create --brc app --action restart --selector 'tier=web'"

func rolloutCreateCmd(stdout io.Writer, f *clientFlags) *cobra.Command {
	var req api.RolloutCreate
	var nodes, selectors, labels []string
	cmd := &cobra.Command{
		Use:   "create --brc BRC [--action A] (--nodes N1,N2 | --selector SEL | --label K=V ...) [--batch-size N] [--name NAME] [--dry-run] [--reason R]",
		Short: "Request a manual rollout of a BRC's block on some nodes (operator or admin token); --dry-run shows the plan",
		Long: `Request a manual rollout: the hub resolves the targets once, pins them in
rollouts/<name>.yaml of the config repository (a commit authored by the hub,
you in its Fleetwave-Actor trailer, --reason in Fleetwave-Reason), and the
rollout manual-<name> runs once the hub synced it.

The targets are --nodes (comma-separated, repeatable), or a label selector:
--selector in the syntax kubectl uses (see fleetwave approval submit --help)
and/or --label key=value (repeatable); every term must hold.

--dry-run plans without writing anything: the resolved nodes and the items
in dispatch order, with why an item would be skipped or blocked.`,
		Example: `  fleetwave rollout create --brc app --action restart --nodes edge-01,edge-02 --reason "stuck workers"
  fleetwave rollout create --brc app --action restart --selector 'env=prod,tier in (edge,core)' --batch-size 2 --dry-run
  fleetwave rollout create --brc app --label tier=web --label env=prod --name restart-web`,
		Args: approvalNoArgs(rolloutCreateExample),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			body, err := buildRolloutCreate(cmd, req, nodes, selectors, labels)
			if err != nil {
				return err
			}
			var plan api.RolloutPlan
			if err := f.call(cmd, "POST", "/api/v1/rollouts", body, &plan, rolloutHint); err != nil {
				return err
			}
			if plan.Targets == nil {
				plan.Targets = []string{}
			}
			if body.DryRun {
				if plan.Items == nil {
					plan.Items = []api.RolloutPlanItem{}
				}
				return emit(stdout, f.output, plan, func(w io.Writer) { dryRunTable(w, plan, body) })
			}
			return emit(stdout, f.output, plan, func(w io.Writer) {
				fmt.Fprintf(w, "request\t%s\n", plan.Name)
				fmt.Fprintf(w, "commit\t%s\n", plan.Commit)
				fmt.Fprintf(w, "rollout\t%s\n", plan.Rollout)
				fmt.Fprintf(w, "nodes\t%d\t%s\n", len(plan.Targets), strings.Join(plan.Targets, ","))
				fmt.Fprintf(w, "next: the hub creates the rollout at its next sync: fleetwave rollout watch %s\n", plan.Rollout)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.BRC, "brc", "", "the BRC (trigger) whose block to run (required)")
	fl.StringVar(&req.ActionName, "action", "", "the block action to run, e.g. restart (default: what the BRC would run)")
	fl.StringVar(&req.TargetVersion, "target-version", "", "the version to install or upgrade to (default: the BRC's)")
	fl.StringSliceVar(&nodes, "nodes", nil, "target node ids, comma-separated (repeatable)")
	fl.StringArrayVar(&selectors, "selector", nil, "target label selector, e.g. 'env=prod,tier in (a,b),!canary' (repeatable, ANDed)")
	fl.StringArrayVar(&labels, "label", nil, "target nodes with this label, key=value (repeatable, ANDed)")
	fl.IntVar(&req.BatchSize, "batch-size", 0, "nodes at a time (default: the BRC's concurrency)")
	fl.StringVar(&req.Name, "name", "", "request name, a DNS label; the rollout is manual-<name> (default: the hub makes one up)")
	fl.BoolVar(&req.DryRun, "dry-run", false, "plan only: show the nodes and items, write nothing")
	fl.StringVar(&req.Reason, "reason", "", "why, recorded in the commit's Fleetwave-Reason trailer")
	_ = cmd.RegisterFlagCompletionFunc("nodes", completeNodeIDs(f, nil))
	return cmd
}

// buildRolloutCreate checks the create flags and returns the request body.
func buildRolloutCreate(cmd *cobra.Command, req api.RolloutCreate, nodes, selectors, labels []string) (api.RolloutCreate, error) {
	req.BRC, req.ActionName, req.TargetVersion, req.Name = strings.TrimSpace(req.BRC), strings.TrimSpace(req.ActionName),
		strings.TrimSpace(req.TargetVersion), strings.TrimSpace(req.Name)
	hasNodes := cmd.Flags().Changed("nodes")
	hasSelector := cmd.Flags().Changed("selector") || cmd.Flags().Changed("label")
	switch {
	case req.BRC == "":
		return req, usageError{"create needs --brc", rolloutCreateExample}
	case hasNodes && hasSelector:
		return req, usageError{"give --nodes or --selector/--label, not both", rolloutCreateExample}
	case !hasNodes && !hasSelector:
		return req, usageError{"create needs --nodes, --selector or --label to say which nodes", rolloutCreateExample}
	case req.BatchSize < 0:
		return req, usageError{fmt.Sprintf("--batch-size %d: want a positive number of nodes", req.BatchSize), "--batch-size 5"}
	}
	if hasNodes {
		if len(nodes) == 0 {
			return req, usageError{"--nodes is empty", rolloutCreateExample}
		}
		for _, n := range nodes {
			if n = strings.TrimSpace(n); n == "" {
				return req, usageError{"--nodes holds an empty node id (two commas, or one at an end)", rolloutCreateExample}
			}
			req.Nodes = append(req.Nodes, n)
		}
		return req, nil
	}
	var all *fleetwave.Selector
	for _, text := range selectors {
		s, err := parseSelector(text)
		if err != nil {
			return req, usageError{fmt.Sprintf("--selector %q: %v", text, err), selectorExample}
		}
		if all, err = mergeSelectors(all, s); err != nil {
			return req, usageError{fmt.Sprintf("--selector: %v", err), selectorExample}
		}
	}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || strings.ContainsAny(v, "=,()!") {
			return req, usageError{fmt.Sprintf("--label %q: want key=value (one label; --selector takes expressions)", kv), "--label tier=web"}
		}
		if err := checkLabelKey(k); err != nil {
			return req, usageError{fmt.Sprintf("--label %q: %v", kv, err), "--label tier=web"}
		}
		if err := checkLabelValue(v); err != nil {
			return req, usageError{fmt.Sprintf("--label %q: %v", kv, err), "--label tier=web"}
		}
		var err error
		if all, err = mergeSelectors(all, &fleetwave.Selector{MatchLabels: map[string]string{k: v}}); err != nil {
			return req, usageError{fmt.Sprintf("--label: %v", err), "--label tier=web"}
		}
	}
	req.Selector = all
	return req, nil
}

// dryRunTable shows what a rollout request would do.
func dryRunTable(w io.Writer, plan api.RolloutPlan, req api.RolloutCreate) {
	fmt.Fprintf(w, "dry run: nothing was written\n")
	name := plan.Name
	if req.Name == "" {
		name += "\t(made up for this dry run: pass --name to keep a name)"
	}
	fmt.Fprintf(w, "request\t%s\n", name)
	fmt.Fprintf(w, "rollout\t%s\n", plan.Rollout)
	if plan.ApprovalRequired {
		fmt.Fprintf(w, "approval\trequired: the request applies config; submit it with fleetwave approval submit, another admin approves it\n")
	}
	fmt.Fprintf(w, "nodes\t%d\n", len(plan.Targets))
	for _, n := range plan.Targets {
		fmt.Fprintf(w, "\t%s\n", n)
	}
	fmt.Fprintf(w, "\nITEMS (%d, in dispatch order)\n", len(plan.Items))
	fmt.Fprintln(w, "NODE\tBLOCK\tACTION\tVERSION\tNOTE")
	for _, it := range plan.Items {
		note := "-"
		switch {
		case it.Skipped != "":
			note = "skipped: " + it.Skipped
		case it.Blocked != "":
			note = "blocked: " + it.Blocked
			if it.Message != "" {
				note += ": " + it.Message
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", it.Node, it.Block, it.Action, dash(it.TargetVersion), note)
	}
}
