package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/hub"
)

func planCmd(stdout io.Writer) *cobra.Command {
	var base, head, branch, statusBranch, format, output string
	var approvalGate, approvalRequired bool
	cmd := &cobra.Command{
		Use:   "plan [--base REV] [--head REV] [DIR]",
		Short: "Show what a change would do: objects whose generation grows, items by rollout, lane and wave",
		Long: `plan compares two revisions of a config repository (default: the merge base of HEAD
with the tracked branch, and HEAD) and prints what the hub would do: the objects whose
generation grows, which block instances get which action on which nodes, rendered-config
hashes (never values), waves by lane, maintenance-window waits, the targets new manual
requests (rollouts/) would pin, the next tick of changed schedules, and which rollouts
would need an approved request under the approval policy (hub.yaml approval.required, as the
hub committed it in status; --approval-required=true|false to assume one) and which requests
exist for them. Observations come from the status/ files the hub committed. Exit 0 ("no changes" when nothing would happen), 1 when the head is invalid.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if format != "text" && format != "markdown" {
				return usageError{"--format must be text or markdown", "fleetwave plan --format markdown"}
			}
			req := hub.PlanRequest{Dir: dir, Branch: branch, StatusBranch: statusBranch, Base: base, Head: head, Now: time.Now()}
			switch {
			case cmd.Flags().Changed("approval-required"):
				req.ApprovalRequired = &approvalRequired
			case approvalGate:
				req.ApprovalRequired = &approvalGate
			}
			rep, err := hub.Plan(cmd.Context(), req)
			if err != nil {
				return err
			}
			if err := emit(stdout, output, rep, func(w io.Writer) { rep.WriteText(w, format == "markdown") }); err != nil {
				return err
			}
			if len(rep.Errors) > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&base, "base", "", "base revision (default: merge base of HEAD with the tracked branch)")
	cmd.Flags().StringVar(&head, "head", "", "head revision (default: HEAD)")
	cmd.Flags().StringVar(&branch, "branch", "main", "the tracked branch")
	cmd.Flags().StringVar(&statusBranch, "status-branch", hub.DefaultStatusBranch, "the branch the hub commits status to (its hub.yaml repo.status_branch)")
	cmd.Flags().StringVar(&format, "format", "text", "text or markdown (for a pull-request comment)")
	cmd.Flags().BoolVar(&approvalRequired, "approval-required", false, "assume hub.yaml's approval.required (default: the policy the hub committed in status)")
	cmd.Flags().BoolVar(&approvalGate, "approval-gate", false, "same as --approval-required=true")
	_ = cmd.Flags().MarkDeprecated("approval-gate", "use --approval-required")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
