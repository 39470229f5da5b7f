package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// approvalListAnswer is the answer of GET /api/v1/config-approvals.
type approvalListAnswer struct {
	Approvals []fleetwave.Approval `json:"approvals"`
}

// approvalSubmitAnswer is the answer of POST /api/v1/config-approvals.
type approvalSubmitAnswer struct {
	ID       string             `json:"id"`
	Approval fleetwave.Approval `json:"approval"`
}

func approvalCmd(stdout io.Writer) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "approval",
		Short: "Submit, approve, reject, list or inspect config approval requests (two-person control)",
		Long: `Approval requests pin a BRC's target version and its nodes; an admin other than
the submitter approves (or rejects) them, and an approved request creates the
rollout approval-<id>.

Submitting needs an operator or admin token, deciding an admin token
(--token or FLEETWAVE_TOKEN); listing and reading need none.`,
	}
	f.add(cmd)

	// call sends a request, reports an error a human can act on to stderr
	// (exit 1) and decodes the answer into out.
	call := func(cmd *cobra.Command, method, path string, in, out any, action string) error {
		c := f.client()
		if err := send(cmd.Context(), c, method, path, in, out); err != nil {
			return reportClientError(cmd, c, err, func(code string) string { return approvalHint(code, action) })
		}
		return nil
	}

	var sub api.ApprovalSubmission
	var nodes, selectors []string
	submit := &cobra.Command{
		Use:   "submit --brc BRC --target-version V (--nodes N1,N2 | --selector SEL) [--batch-size N] [--id ID]",
		Short: "Submit an approval request (operator or admin token); its nodes are resolved and pinned now",
		Long: `Submit an approval request for a BRC's target version. The targets are
--nodes (comma-separated, repeatable) or --selector, a label selector in the
syntax kubectl uses, resolved once by the hub and pinned:

  key=value, key==value    the label key has that value
  key!=value               the label key is absent or has another value
  key in (a,b)             the label key has one of the values
  key notin (a,b)          the label key is absent or has none of the values
  key                      the label key exists
  !key                     the label key does not exist

Terms are separated by commas (a comma inside parentheses belongs to the
list) and all must hold; a repeated --selector adds terms.`,
		Example: `  fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02
  fleetwave approval submit --brc app --target-version 2.1 --selector 'env=prod,tier in (edge,core),!canary' --batch-size 5`,
		Args: approvalNoArgs("fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			s, err := buildSubmission(cmd, sub, nodes, selectors)
			if err != nil {
				return err
			}
			var ans approvalSubmitAnswer
			if err := call(cmd, "POST", "/api/v1/config-approvals", s, &ans, "submit"); err != nil {
				return err
			}
			a := ans.Approval
			if a.ID == "" {
				a.ID = ans.ID
			}
			return emit(stdout, f.output, a, func(w io.Writer) {
				fmt.Fprintf(w, "approval %s submitted: %s, %d node(s) pinned\n", a.ID, dash(string(a.State)), len(a.Nodes))
				approvalTable(w, a)
				if a.State == fleetwave.ApprovalPending {
					fmt.Fprintf(w, "next: another admin approves it: fleetwave approval approve %s\n", a.ID)
				}
			})
		},
	}
	submit.Flags().StringVar(&sub.BRC, "brc", "", "the BRC (trigger) whose target version to approve (required)")
	submit.Flags().StringVar(&sub.TargetVersion, "target-version", "", "the version the BRC targets now (required)")
	submit.Flags().StringSliceVar(&nodes, "nodes", nil, "target node ids, comma-separated (repeatable)")
	submit.Flags().StringArrayVar(&selectors, "selector", nil, "target label selector, e.g. 'env=prod,tier in (a,b),!canary' (repeatable, ANDed)")
	submit.Flags().IntVar(&sub.BatchSize, "batch-size", 0, "nodes per batch of the rollout (default: the BRC's)")
	submit.Flags().StringVar(&sub.ID, "id", "", "request id (default: the hub names it <brc>-<version>-<random>)")
	cmd.AddCommand(submit)

	for _, d := range []struct {
		action string
		state  fleetwave.ApprovalState
	}{{"approve", fleetwave.ApprovalApproved}, {"reject", fleetwave.ApprovalRejected}} {
		cmd.AddCommand(&cobra.Command{
			Use:               d.action + " ID",
			Short:             strings.ToUpper(d.action[:1]) + d.action[1:] + " a pending approval request (admin token; not your own request)",
			Args:              approvalIDArg("fleetwave approval " + d.action + " app-2-1-a1b2c3"),
			ValidArgsFunction: completeApprovalIDs(&f, true),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := checkOutput(f.output); err != nil {
					return err
				}
				var a fleetwave.Approval
				if err := call(cmd, "POST", "/api/v1/config-approvals/"+url.PathEscape(args[0])+"/"+d.action, nil, &a, d.action); err != nil {
					return err
				}
				return emit(stdout, f.output, a, func(w io.Writer) {
					id := cmp.Or(a.ID, args[0])
					fmt.Fprintf(w, "approval %s %s by %s\n", id, d.state, dash(a.DecidedBy))
					if d.state == fleetwave.ApprovalApproved {
						ro := cmp.Or(a.Rollout, fleetwave.ApprovalRolloutID(id))
						fmt.Fprintf(w, "next: the hub creates rollout %s: fleetwave rollout watch %s\n", ro, ro)
					}
				})
			},
		})
	}

	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List approval requests, newest first",
		Args:  approvalNoArgs("fleetwave approval list"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var ans approvalListAnswer
			if err := call(cmd, "GET", "/api/v1/config-approvals", nil, &ans, "list"); err != nil {
				return err
			}
			list := ans.Approvals
			if list == nil {
				list = []fleetwave.Approval{}
			}
			slices.SortStableFunc(list, func(a, b fleetwave.Approval) int {
				return cmp.Or(b.SubmittedAt.Compare(a.SubmittedAt), cmp.Compare(a.ID, b.ID))
			})
			return emit(stdout, f.output, list, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tBRC\tVERSION\tNODES\tSTATE\tSUBMITTED BY\tDECIDED BY\tROLLOUT\tREASON")
				for _, a := range list {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", a.ID, dash(a.BRC), dash(a.TargetVersion), len(a.Nodes),
						dash(string(a.State)), dash(a.SubmittedBy), dash(a.DecidedBy), dash(a.Rollout), dash(a.Reason))
				}
			})
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:               "get ID",
		Short:             "Show an approval request: what it pins, who submitted and decided it, what became of it",
		Args:              approvalIDArg("fleetwave approval get app-2-1-a1b2c3"),
		ValidArgsFunction: completeApprovalIDs(&f, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var a fleetwave.Approval
			if err := call(cmd, "GET", "/api/v1/config-approvals/"+url.PathEscape(args[0]), nil, &a, "get"); err != nil {
				return err
			}
			return emit(stdout, f.output, a, func(w io.Writer) {
				fmt.Fprintf(w, "approval\t%s\t%s\n", a.ID, dash(string(a.State)))
				approvalTable(w, a)
			})
		},
	})
	return cmd
}

// approvalTable prints every field of an approval, one per line, the
// pinned nodes last.
func approvalTable(w io.Writer, a fleetwave.Approval) {
	gen := ""
	if a.Generation != 0 {
		gen = fmt.Sprintf("\tgeneration %d", a.Generation)
	}
	fmt.Fprintf(w, "brc\t%s\tversion %s%s\n", dash(a.BRC), dash(a.TargetVersion), gen)
	if a.Reason != "" || a.Message != "" {
		fmt.Fprintf(w, "reason\t%s\t%s\n", dash(a.Reason), a.Message)
	}
	if a.Selector != "" {
		fmt.Fprintf(w, "selector\t%s\n", selectorText(a.Selector))
	}
	if a.BatchSize > 0 {
		fmt.Fprintf(w, "batch size\t%d\n", a.BatchSize)
	} else {
		fmt.Fprintf(w, "batch size\t-\t(the BRC's)\n")
	}
	fmt.Fprintf(w, "submitted by\t%s\tvia %s\tat %s\n", dash(a.SubmittedBy), dash(a.SubmittedVia), timeText(a.SubmittedAt))
	if a.DecidedBy != "" || !a.DecidedAt.IsZero() {
		fmt.Fprintf(w, "decided by\t%s\tat %s\n", dash(a.DecidedBy), timeText(a.DecidedAt))
	}
	if a.Rollout != "" || !a.ConsumedAt.IsZero() {
		fmt.Fprintf(w, "rollout\t%s\tconsumed at %s\n", dash(a.Rollout), timeText(a.ConsumedAt))
	}
	if !a.EndedAt.IsZero() {
		fmt.Fprintf(w, "ended at\t%s\n", timeText(a.EndedAt))
	}
	fmt.Fprintf(w, "nodes\t%d\n", len(a.Nodes))
	for _, n := range a.Nodes {
		fmt.Fprintf(w, "\t%s\n", n)
	}
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// selectorText shows the selector an approval records (its JSON) in the
// syntax --selector takes, or as recorded when it is not a selector's JSON.
func selectorText(recorded string) string {
	var s fleetwave.Selector
	dec := json.NewDecoder(strings.NewReader(recorded))
	dec.DisallowUnknownFields()
	if dec.Decode(&s) != nil || s.Empty() {
		return recorded
	}
	return formatSelector(&s)
}

func checkOutput(o string) error {
	switch o {
	case "", "table", "json", "yaml":
		return nil
	}
	return usageError{fmt.Sprintf("--output %q: want table, json or yaml", o), "-o json"}
}

func approvalNoArgs(example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " ")), example}
		}
		return nil
	}
}

func approvalIDArg(example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0 || args[0] == "":
			return usageError{cmd.CommandPath() + " needs an approval id (fleetwave approval list shows them)", example}
		case len(args) > 1:
			return usageError{fmt.Sprintf("%s takes one approval id, got %d arguments", cmd.CommandPath(), len(args)), example}
		}
		return nil
	}
}

// buildSubmission checks the submit flags and returns the request body.
func buildSubmission(cmd *cobra.Command, sub api.ApprovalSubmission, nodes, selectors []string) (api.ApprovalSubmission, error) {
	const example = "fleetwave approval submit --brc app --target-version 2.1 --nodes edge-01,edge-02"
	sub.BRC, sub.TargetVersion, sub.ID = strings.TrimSpace(sub.BRC), strings.TrimSpace(sub.TargetVersion), strings.TrimSpace(sub.ID)
	hasNodes, hasSelector := cmd.Flags().Changed("nodes"), cmd.Flags().Changed("selector")
	switch {
	case sub.BRC == "" && sub.TargetVersion == "":
		return sub, usageError{"submit needs --brc and --target-version", example}
	case sub.BRC == "":
		return sub, usageError{"submit needs --brc", example}
	case sub.TargetVersion == "":
		return sub, usageError{"submit needs --target-version (the version the BRC targets now)", example}
	case hasNodes && hasSelector:
		return sub, usageError{"give --nodes or --selector, not both", example}
	case !hasNodes && !hasSelector:
		return sub, usageError{"submit needs --nodes or --selector to say which nodes", example}
	case sub.BatchSize < 0:
		return sub, usageError{fmt.Sprintf("--batch-size %d: want a positive number of nodes", sub.BatchSize), "--batch-size 5"}
	}
	if hasNodes {
		if len(nodes) == 0 {
			return sub, usageError{"--nodes is empty", example}
		}
		for _, n := range nodes {
			n = strings.TrimSpace(n)
			if n == "" {
				return sub, usageError{"--nodes holds an empty node id (two commas, or one at an end)", example}
			}
			sub.Nodes = append(sub.Nodes, n)
		}
		return sub, nil
	}
	var all *fleetwave.Selector
	for _, text := range selectors {
		s, err := parseSelector(text)
		if err != nil {
			return sub, usageError{fmt.Sprintf("--selector %q: %v", text, err), selectorExample}
		}
		if all, err = mergeSelectors(all, s); err != nil {
			return sub, usageError{fmt.Sprintf("--selector: %v", err), selectorExample}
		}
	}
	sub.Selector = all
	return sub, nil
}

// approvalHint says what to do about an API error code.
func approvalHint(code, action string) string {
	switch code {
	case "self_approval":
		if action == "reject" {
			return "you submitted this request: another admin must reject it"
		}
		return "you submitted this request: another admin must approve it"
	case "forbidden":
		switch action {
		case "submit":
			return "submitting needs an operator or admin token (--token or FLEETWAVE_TOKEN)"
		case "approve", "reject":
			return action + " needs an admin token (--token or FLEETWAVE_TOKEN), of an admin other than the submitter"
		}
		return "this needs a token of a higher role (--token or FLEETWAVE_TOKEN)"
	case "approval_required":
		return "the change needs an approved request: an operator or admin submits one (fleetwave approval submit), another admin approves it"
	case "unauthorized":
		return "pass a valid API token with --token or FLEETWAVE_TOKEN"
	case "not_pending":
		return "only a pending request is decided; fleetwave approval get ID shows its state, a resubmission is a new request"
	case "not_found":
		if action != "submit" && action != "list" {
			return "fleetwave approval list shows the requests"
		}
	case "already_exists":
		return "pick another --id, or leave it out and let the hub name the request"
	case "version_mismatch":
		return "--target-version must be the version the BRC targets now"
	case "no_matching_nodes":
		return "check --nodes or --selector against the nodes' labels"
	case "not_leader":
		return "point --hub or FLEETWAVE_HUB at the leading hub"
	}
	return ""
}

// completeApprovalIDs completes approval ids from the list endpoint (only
// the pending ones when pendingOnly); it quietly offers nothing when the
// hub cannot be asked.
func completeApprovalIDs(f *clientFlags, pendingOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var ans approvalListAnswer
		if err := send(ctx, f.client(), "GET", "/api/v1/config-approvals", nil, &ans); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, a := range ans.Approvals {
			if !strings.HasPrefix(a.ID, toComplete) || (pendingOnly && a.State != fleetwave.ApprovalPending) {
				continue
			}
			out = append(out, cobra.CompletionWithDesc(a.ID, fmt.Sprintf("%s %s, %d node(s), %s by %s", a.BRC, a.TargetVersion, len(a.Nodes), a.State, dash(a.SubmittedBy))))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
