package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// rolloutHint says what to do about an API error of a rollout command.
func rolloutHint(code string) string {
	switch code {
	case "not_found":
		return "fleetwave rollout list shows the rollouts"
	case "forbidden":
		return "pausing, resuming, cancelling and creating rollouts need an operator or admin token (--token or FLEETWAVE_TOKEN)"
	case "invalid_state":
		return "fleetwave rollout get ID shows the rollout's state"
	case fleetwave.ReasonApprovalRequired:
		return "the request applies config: an operator or admin submits it with fleetwave approval submit, another admin approves it"
	case "already_exists":
		return "request names are never reused: pick another --name, or leave it out and let the hub name the request"
	case "no_matching_nodes":
		return "check --nodes, --selector or --label against the nodes' labels (fleetwave node list)"
	}
	return ""
}

func rolloutCmd(stdout io.Writer) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{Use: "rollout", Short: "List, inspect, create, watch, pause, resume or cancel rollouts"}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List rollouts, newest first",
		Args:  approvalNoArgs("fleetwave rollout list"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var rs []fleetwave.Rollout
			if err := f.call(cmd, "GET", "/api/v1/rollouts", nil, &rs, rolloutHint); err != nil {
				return err
			}
			if rs == nil {
				rs = []fleetwave.Rollout{}
			}
			return emit(stdout, f.output, rs, func(w io.Writer) { rolloutTable(w, rs) })
		},
	})
	itemTable := func(w io.Writer, a api.RolloutAnswer) {
		r := a.Rollout
		fmt.Fprintf(w, "rollout\t%s\t%s\twave %d\tsource %s@%d\tcommit %s\tactor %s\n", r.ID, r.Status, r.Wave, r.Source.Object, r.Source.Generation, short(r.Source.Commit), r.Source.Actor)
		if r.Reason != "" {
			fmt.Fprintf(w, "reason\t%s\n", r.Reason)
		}
		fmt.Fprintln(w, "\nNODE\tBLOCK\tACTION\tLANE\tWAVE\tSTATUS\tREASON\tATTEMPTS\tRETRY AFTER")
		for _, it := range a.Items {
			reason, after := it.Reason, "-"
			if reason == "" {
				reason = "-"
			}
			if !it.RetryAfter.IsZero() {
				after = it.RetryAfter.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", it.Node, it.Block, it.Action, it.ManagedBy, it.Wave, it.Status, reason, it.Attempts, after)
		}
	}
	cmd.AddCommand(&cobra.Command{
		Use:               "get ID",
		Short:             "Show a rollout with every item and why it is (not) progressing",
		Args:              idArg("rollout", "fleetwave rollout get app-g1"),
		ValidArgsFunction: completeRolloutIDs(&f, nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var a api.RolloutAnswer
			if err := f.call(cmd, "GET", rolloutPath(args[0], ""), nil, &a, rolloutHint); err != nil {
				return err
			}
			if err := f.restOfItems(cmd, args[0], &a); err != nil {
				return err
			}
			return emit(stdout, f.output, a, func(w io.Writer) { itemTable(w, a) })
		},
	})
	cmd.AddCommand(watchCmd(stdout, &f))
	cmd.AddCommand(rolloutCreateCmd(stdout, &f))
	unfinished := []fleetwave.RolloutStatus{fleetwave.RolloutActive, fleetwave.RolloutPaused, fleetwave.RolloutBlocked}
	for _, a := range []struct {
		action string
		from   []fleetwave.RolloutStatus // what completion offers
	}{
		{"pause", []fleetwave.RolloutStatus{fleetwave.RolloutActive, fleetwave.RolloutBlocked}},
		{"resume", []fleetwave.RolloutStatus{fleetwave.RolloutPaused, fleetwave.RolloutBlocked}},
		{"cancel", unfinished},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:               a.action + " ID",
			Short:             strings.ToUpper(a.action[:1]) + a.action[1:] + " a rollout (operator or admin token; recorded with your identity)",
			Args:              idArg("rollout", "fleetwave rollout "+a.action+" app-g1"),
			ValidArgsFunction: completeRolloutIDs(&f, a.from),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := checkOutput(f.output); err != nil {
					return err
				}
				var ans api.RolloutAnswer
				if err := f.call(cmd, "POST", "/api/v1/rollouts/"+url.PathEscape(args[0])+"/"+a.action, nil, &ans, rolloutHint); err != nil {
					return err
				}
				if err := f.restOfItems(cmd, args[0], &ans); err != nil {
					return err
				}
				return emit(stdout, f.output, ans, func(w io.Writer) { itemTable(w, ans) })
			},
		})
	}
	return cmd
}

// rolloutPath is the path of a page of rollout id's items: the largest
// page the API gives, after cursor ("" for the first).
func rolloutPath(id, cursor string) string {
	q := url.Values{"limit": {strconv.Itoa(api.MaxPageLimit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return "/api/v1/rollouts/" + url.PathEscape(id) + "?" + q.Encode()
}

// restOfItems reads the pages of rollout id's items that follow a, a
// page the hub answered, and adds them to it: the CLI shows every item.
// The rollout becomes the last page's (the freshest counters).
func (f *clientFlags) restOfItems(cmd *cobra.Command, id string, a *api.RolloutAnswer) error {
	for a.Next != "" {
		var page api.RolloutAnswer
		if err := f.call(cmd, "GET", rolloutPath(id, a.Next), nil, &page, rolloutHint); err != nil {
			return err
		}
		if page.Next == a.Next {
			return fmt.Errorf("rollout %s: the hub answered the same page twice (cursor %s)", id, a.Next)
		}
		a.Rollout, a.Next = page.Rollout, page.Next
		a.Items = append(a.Items, page.Items...)
	}
	return nil
}

// idArg wants exactly one non-empty id of what ("rollout", "node").
func idArg(what, example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0 || strings.TrimSpace(args[0]) == "":
			return usageError{fmt.Sprintf("%s needs a %s id (fleetwave %s list shows them)", cmd.CommandPath(), what, what), example}
		case len(args) > 1:
			return usageError{fmt.Sprintf("%s takes one %s id, got %d arguments", cmd.CommandPath(), what, len(args)), example}
		}
		return nil
	}
}

// completionContext is the context of a completion call: short, so that a
// slow hub never hangs the shell.
func completionContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, 3*time.Second)
}

// completeRolloutIDs completes rollout ids from the hub (only those in one
// of states, when given); it quietly offers nothing when the hub cannot be
// asked.
func completeRolloutIDs(f *clientFlags, states []fleetwave.RolloutStatus) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := completionContext(cmd)
		defer cancel()
		var rs []fleetwave.Rollout
		if err := send(ctx, f.client(), "GET", "/api/v1/rollouts", nil, &rs); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, r := range rs {
			if !strings.HasPrefix(r.ID, toComplete) || (states != nil && !slices.Contains(states, r.Status)) {
				continue
			}
			out = append(out, cobra.CompletionWithDesc(r.ID, fmt.Sprintf("%s, wave %d, %d/%d done", r.Status, r.Wave, r.Counters.Done, r.Counters.Total)))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
