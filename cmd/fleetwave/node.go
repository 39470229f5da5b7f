package main

import (
	"cmp"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/schema"
)

// nodePageLimit is the page size node list and completion ask for.
const nodePageLimit = api.MaxPageLimit

// nodeHint says what to do about an API error of a node command.
func nodeHint(code string) string {
	switch code {
	case "not_found":
		return "fleetwave node list shows the nodes"
	case "forbidden":
		return "changing a node needs an operator or admin token (--token or FLEETWAVE_TOKEN)"
	case "invalid_labels":
		return "keys and values are 1-63 of [A-Za-z0-9._-], alphanumeric at both ends; a key may have a DNS prefix (example.com/role)"
	case "not_editable":
		return "change the node's file with a commit to the config repository"
	case "invalid_change":
		return "the config repository's schema refuses the change: fleetwave validate on a checkout says why"
	}
	return ""
}

func nodeCmd(stdout io.Writer) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List and inspect nodes; set their labels, drain and undrain them",
		Long: `List and inspect the nodes the hub knows (their record in the config
repository, their agent's last report, what waits on them).

Labels, drain and undrain are commits to the node's own file in the config
repository, authored by the hub with you in a Fleetwave-Actor trailer and
--reason in Fleetwave-Reason; they need an operator or admin token (--token
or FLEETWAVE_TOKEN). Each prints the commit, or says the file already said so.`,
	}
	f.add(cmd)

	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List the nodes, sorted by id",
		Args:  approvalNoArgs("fleetwave node list"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			if limit < 0 {
				return usageError{fmt.Sprintf("--limit %d: want a positive number of nodes (0: all)", limit), "--limit 50"}
			}
			nodes := []api.NodeView{}
			cursor := ""
			for {
				page := nodePageLimit
				if limit > 0 {
					page = min(page, limit-len(nodes))
				}
				q := url.Values{"limit": {fmt.Sprint(page)}}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var ans api.NodesAnswer
				if err := f.call(cmd, "GET", "/api/v1/nodes?"+q.Encode(), nil, &ans, nodeHint); err != nil {
					return err
				}
				nodes = append(nodes, ans.Nodes...)
				if cursor = ans.Next; cursor == "" || len(ans.Nodes) == 0 || (limit > 0 && len(nodes) >= limit) {
					break
				}
			}
			return emit(stdout, f.output, nodes, func(w io.Writer) { nodeTable(w, nodes) })
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many nodes (default: all)")
	cmd.AddCommand(list)

	getNode := func(cmd *cobra.Command, id string) (api.NodeView, error) {
		var n api.NodeView
		err := f.call(cmd, "GET", "/api/v1/nodes/"+url.PathEscape(id), nil, &n, nodeHint)
		return n, err
	}
	cmd.AddCommand(&cobra.Command{
		Use:               "get ID",
		Short:             "Show a node: its record, its agent's last report, drift and what waits on it",
		Args:              idArg("node", "fleetwave node get edge-01"),
		ValidArgsFunction: completeNodeIDs(&f, nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			n, err := getNode(cmd, args[0])
			if err != nil {
				return err
			}
			return emit(stdout, f.output, n, func(w io.Writer) { nodeDetail(w, n) })
		},
	})

	labels := &cobra.Command{Use: "labels", Short: "Show or replace a node's labels"}
	cmd.AddCommand(labels)
	labels.AddCommand(&cobra.Command{
		Use:               "get ID",
		Short:             "Show a node's labels",
		Args:              idArg("node", "fleetwave node labels get edge-01"),
		ValidArgsFunction: completeNodeIDs(&f, nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			n, err := getNode(cmd, args[0])
			if err != nil {
				return err
			}
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			return emit(stdout, f.output, n.Labels, func(w io.Writer) {
				if len(n.Labels) == 0 {
					fmt.Fprintf(w, "node %s has no labels\n", n.ID)
					return
				}
				fmt.Fprintln(w, "KEY\tVALUE")
				for _, k := range sortedLabelKeys(n.Labels) {
					fmt.Fprintf(w, "%s\t%s\n", k, n.Labels[k])
				}
			})
		},
	})

	var reason string
	var clear bool
	set := &cobra.Command{
		Use:   "set ID KEY=VALUE... | set ID --clear",
		Short: "Replace a node's whole label set (operator or admin token); labels left out are removed",
		Long: `Replace the labels of a node with exactly the KEY=VALUE pairs given: a label
left out is removed (fleetwave node labels get ID shows the current set).
--clear removes every label. Keys and values are 1-63 of [A-Za-z0-9._-],
alphanumeric at both ends; a key may have a DNS prefix (example.com/role).`,
		Example: `  fleetwave node labels set edge-01 env=prod tier=web --reason "moved to the web tier"
  fleetwave node labels set edge-01 --clear`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: completeNodeIDs(&f, nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			id, set, err := parseLabelArgs(args, clear)
			if err != nil {
				return err
			}
			var res api.NodeWrite
			body := api.LabelsBody{Labels: set, Reason: reason}
			if err := f.call(cmd, "PUT", "/api/v1/nodes/"+url.PathEscape(id)+"/labels", body, &res, nodeHint); err != nil {
				return err
			}
			return emit(stdout, f.output, res, func(w io.Writer) {
				shown := labelText(res.Node.Labels)
				if res.Node.Labels == nil {
					shown = labelText(set)
				}
				if res.Commit == "" {
					fmt.Fprintf(w, "node %s labels unchanged: the file already said so (no commit)\n", id)
				} else {
					fmt.Fprintf(w, "node %s labels set: commit %s\n", id, res.Commit)
				}
				fmt.Fprintf(w, "labels\t%s\n", shown)
			})
		},
	}
	set.Flags().StringVar(&reason, "reason", "", "why, recorded in the commit's Fleetwave-Reason trailer")
	set.Flags().BoolVar(&clear, "clear", false, "remove every label")
	labels.AddCommand(set)

	for _, d := range []struct {
		action, short string
		drain, offer  bool // offer: completion offers the nodes whose drain is this
	}{
		{"drain", "Drain a node: nothing new is dispatched to it (operator or admin token)", true, false},
		{"undrain", "Undrain a node: it takes work again (operator or admin token)", false, true},
	} {
		var reason string
		c := &cobra.Command{
			Use:               d.action + " ID",
			Short:             d.short,
			Args:              idArg("node", "fleetwave node "+d.action+" edge-01"),
			ValidArgsFunction: completeNodeIDs(&f, &d.offer),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := checkOutput(f.output); err != nil {
					return err
				}
				var body any
				if reason != "" {
					body = api.ReasonBody{Reason: reason}
				}
				var res api.NodeWrite
				if err := f.call(cmd, "POST", "/api/v1/nodes/"+url.PathEscape(args[0])+"/"+d.action, body, &res, nodeHint); err != nil {
					return err
				}
				return emit(stdout, f.output, res, func(w io.Writer) {
					id := args[0]
					switch {
					case res.Commit == "" && d.drain:
						fmt.Fprintf(w, "node %s was already drained (no commit)\n", id)
					case res.Commit == "":
						fmt.Fprintf(w, "node %s was not drained (no commit)\n", id)
					case d.drain:
						fmt.Fprintf(w, "node %s drained: commit %s\n", id, res.Commit)
						fmt.Fprintf(w, "its items wait with node_draining until fleetwave node undrain %s\n", id)
					default:
						fmt.Fprintf(w, "node %s undrained: commit %s\n", id, res.Commit)
					}
				})
			},
		}
		c.Flags().StringVar(&reason, "reason", "", "why, recorded in the commit's Fleetwave-Reason trailer")
		cmd.AddCommand(c)
	}
	return cmd
}

const labelsSetExample = "fleetwave node labels set edge-01 env=prod tier=web"

// parseLabelArgs reads `labels set`'s arguments: the node id, then the
// whole new label set as KEY=VALUE pairs (or none with clear), checked as
// the hub checks them.
func parseLabelArgs(args []string, clear bool) (string, map[string]string, error) {
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" {
		return "", nil, usageError{"labels set needs a node id, then the new labels as KEY=VALUE (or --clear)", labelsSetExample}
	}
	id, pairs := args[0], args[1:]
	if strings.Contains(id, "=") {
		return "", nil, usageError{fmt.Sprintf("labels set needs the node id first, got %q", id), labelsSetExample}
	}
	switch {
	case clear && len(pairs) > 0:
		return "", nil, usageError{"give --clear or KEY=VALUE labels, not both", labelsSetExample}
	case !clear && len(pairs) == 0:
		return "", nil, usageError{"labels set replaces the whole label set: give every label as KEY=VALUE, or --clear to remove them all",
			labelsSetExample}
	}
	set := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case !ok:
			return "", nil, usageError{fmt.Sprintf("label %q: want KEY=VALUE", p), labelsSetExample}
		case k == "":
			return "", nil, usageError{fmt.Sprintf("label %q: missing key before '='", p), labelsSetExample}
		case v == "":
			return "", nil, usageError{fmt.Sprintf("label %q: missing value after '=' (values are never empty; to remove %s leave it out)", p, k), labelsSetExample}
		}
		if old, dup := set[k]; dup && old != v {
			return "", nil, usageError{fmt.Sprintf("label %s given twice (%s and %s): a node has one value per key", k, old, v), labelsSetExample}
		}
		set[k] = v
	}
	if probs := schema.CheckLabels(set); len(probs) > 0 {
		msgs := make([]string, len(probs))
		for i, p := range probs {
			msgs[i] = p.Problem
		}
		return "", nil, usageError{strings.Join(msgs, "; "), labelsSetExample}
	}
	return id, set, nil
}

// labelText shows labels as k=v,k=v sorted by key, "-" for none.
func labelText(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(labels))
	for _, k := range sortedLabelKeys(labels) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

// lastReport says when a node last reported, for a table.
func lastReport(n api.NodeView) string {
	switch {
	case !n.Reported || n.LastReportAt.IsZero():
		return "never"
	case n.Stale:
		return n.LastReportAt.UTC().Format(time.RFC3339) + " (stale)"
	}
	return n.LastReportAt.UTC().Format(time.RFC3339)
}

func nodeTable(w io.Writer, nodes []api.NodeView) {
	fmt.Fprintln(w, "NODE\tCRITICALITY\tDRAIN\tLAST REPORT\tINSTANCES\tDRIFT\tWAITING\tLABELS")
	for _, n := range nodes {
		drain := "-"
		if n.Drain {
			drain = "drain"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", n.ID, dash(string(n.Criticality)), drain, lastReport(n),
			len(n.Instances), len(n.Drift), len(n.Waiting), labelText(n.Labels))
	}
}

func nodeDetail(w io.Writer, n api.NodeView) {
	fmt.Fprintf(w, "node\t%s\n", n.ID)
	if n.UnknownNode {
		fmt.Fprintf(w, "record\tnone: an agent reports this node but the config repository has no file for it\n")
	}
	if n.Organization != "" || n.Workspace != "" {
		fmt.Fprintf(w, "organization\t%s\tworkspace %s\n", dash(n.Organization), dash(n.Workspace))
	}
	fmt.Fprintf(w, "criticality\t%s\n", dash(string(n.Criticality)))
	fmt.Fprintf(w, "labels\t%s\n", labelText(n.Labels))
	fmt.Fprintf(w, "drain\t%t\n", n.Drain)
	fmt.Fprintf(w, "windows\t%s\n", dash(strings.Join(n.MaintenanceWindows, ",")))
	fmt.Fprintf(w, "last report\t%s\tagent %s\n", lastReport(n), dash(n.AgentVersion))
	fmt.Fprintf(w, "capabilities\t%s\n", dash(strings.Join(n.Capabilities, ",")))
	if len(n.DataAddresses) > 0 {
		fmt.Fprintf(w, "data addresses\t%s\n", strings.Join(n.DataAddresses, ","))
	}
	if len(n.Instances) > 0 {
		fmt.Fprintln(w, "\nBLOCK\tVERSION\tSTATE\tGENERATION\tCONFIG\tMANAGED BY")
		for _, in := range n.Instances {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", in.Block, dash(in.Version), dash(string(in.State)), in.Generation, short(in.ConfigHash), dash(in.ManagedBy))
		}
	}
	if len(n.Drift) > 0 {
		fmt.Fprintln(w, "\nDRIFT\tBLOCK\tBRC\tDESIRED\tOBSERVED")
		for _, d := range n.Drift {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Kind, dash(d.Block), dash(d.Trigger), dash(d.Desired), dash(d.Observed))
		}
	}
	if len(n.Waiting) > 0 {
		fmt.Fprintln(w, "\nWAITING\tITEM\tBLOCK\tACTION\tSTATUS\tREASON")
		for _, it := range n.Waiting {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", it.Rollout, it.Item, it.Block, it.Action, it.Status, dash(it.Reason))
		}
	}
	if len(n.Held) > 0 {
		fmt.Fprintln(w, "\nHELD\tBRC\tREASON\tMESSAGE")
		for _, h := range n.Held {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", h.Block, h.Trigger, h.Reason, dash(h.Message))
		}
	}
}

// completeNodeIDs completes node ids from the hub (only the drained ones,
// or only the others, when drained is set); it quietly offers nothing
// when the hub cannot be asked.
func completeNodeIDs(f *clientFlags, drained *bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if cmd.Name() != "set" && cmd.Name() != "create" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if cmd.Name() == "set" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp // KEY=VALUE pairs
		}
		ctx, cancel := completionContext(cmd)
		defer cancel()
		c := f.client()
		var out []cobra.Completion
		// --nodes a,b,c: complete the last id of the list
		prefix, partial := "", toComplete
		if cmd.Name() == "create" {
			if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
				prefix, partial = toComplete[:i+1], toComplete[i+1:]
			}
		}
		cursor := ""
		for range 10 {
			q := url.Values{"limit": {fmt.Sprint(nodePageLimit)}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var ans api.NodesAnswer
			if err := send(ctx, c, "GET", "/api/v1/nodes?"+q.Encode(), nil, &ans); err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, n := range ans.Nodes {
				if !strings.HasPrefix(n.ID, partial) || (drained != nil && n.Drain != *drained) {
					continue
				}
				desc := labelText(n.Labels)
				if n.Drain {
					desc = "drained, " + desc
				}
				out = append(out, cobra.CompletionWithDesc(prefix+n.ID, cmp.Or(desc, "-")))
			}
			if cursor = ans.Next; cursor == "" {
				break
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
