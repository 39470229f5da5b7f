package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
)

// client is a small HTTP client of the hub API.
type client struct {
	hub, token string
	http       *http.Client
}

type clientFlags struct{ hub, token, output string }

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.hub, "hub", envOr("FLEETWAVE_HUB", "http://127.0.0.1:8080"), "hub URL (env FLEETWAVE_HUB)")
	cmd.PersistentFlags().StringVar(&f.token, "token", "", "API bearer token (default: env FLEETWAVE_TOKEN)")
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "table", "table, json or yaml")
}

func (f *clientFlags) client() *client {
	tok := f.token
	if tok == "" {
		tok = os.Getenv("FLEETWAVE_TOKEN")
	}
	return &client{hub: strings.TrimRight(f.hub, "/"), token: tok, http: &http.Client{Timeout: 30 * time.Second}}
}

// apiFailure is an error answer of the API.
type apiFailure struct {
	status int
	body   struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
}

func (e *apiFailure) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.body.Error.Code, e.body.Error.Message, e.status)
}

func (c *client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.hub+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		f := &apiFailure{status: resp.StatusCode}
		if json.Unmarshal(data, &f.body) != nil || f.body.Error.Code == "" {
			f.body.Error.Code, f.body.Error.Message = "http_error", strings.TrimSpace(string(data))
		}
		return f
	}
	return json.Unmarshal(data, out)
}

// emit prints v as JSON or YAML, or calls table for the human form.
func emit(w io.Writer, output string, v any, table func(io.Writer)) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var generic any
		_ = json.Unmarshal(data, &generic)
		out, err := yaml.Marshal(generic)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	}
	return usageError{"--output must be table, json or yaml", "-o json"}
}

func countersLine(c fleetwave.Counters) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d", c.Total, c.Done, c.InProgress, c.Pending, c.Failed, c.Skipped)
}

func statusCmd(stdout io.Writer) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the fleet counters, the last sync and the rollouts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s fleetwave.Summary
			if err := f.client().do(cmd.Context(), "GET", "/api/v1/summary", &s); err != nil {
				return err
			}
			return emit(stdout, f.output, s, func(w io.Writer) {
				fmt.Fprintf(w, "nodes\t%d\n", s.Nodes)
				fmt.Fprintf(w, "sync\t%s\tcommit %s\tapplied %s\n", s.Sync.Result, short(s.Sync.Commit), short(s.Sync.Applied))
				for _, e := range s.Sync.Errors {
					fmt.Fprintf(w, "\t%s\n", e.Error())
				}
				fmt.Fprintf(w, "\nFLEET NOW\tTOTAL\tDONE\tIN PROGRESS\tPENDING\tFAILED\tSKIPPED\n\t%s\n", countersLine(s.Counters))
				fmt.Fprintf(w, "history\t%s\n", countersLine(s.History))
				if len(s.Rollouts) > 0 {
					fmt.Fprintln(w)
					rolloutTable(w, s.Rollouts)
				}
				if len(s.Requests) > 0 {
					fmt.Fprintln(w, "\nREQUEST\tSTATE\tROLLOUT\tCODE\tMESSAGE")
					names := make([]string, 0, len(s.Requests))
					for name := range s.Requests {
						names = append(names, name)
					}
					sort.Strings(names)
					for _, name := range names {
						r := s.Requests[name]
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", name, r.State, dash(r.Rollout), dash(r.Code), dash(r.Message))
					}
				}
			})
		},
	}
	f.add(cmd)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "-"
	}
	return h
}

func rolloutTable(w io.Writer, rs []fleetwave.Rollout) {
	fmt.Fprintln(w, "ROLLOUT\tSTATUS\tWAVE\tTOTAL\tDONE\tIN PROGRESS\tPENDING\tFAILED\tSKIPPED\tREASON")
	for _, r := range rs {
		reason := r.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, r.Wave, countersLine(r.Counters), reason)
	}
}

func rolloutCmd(stdout io.Writer) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{Use: "rollout", Short: "List, inspect, watch, pause, resume or cancel rollouts"}
	f.add(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List rollouts, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rs []fleetwave.Rollout
			if err := f.client().do(cmd.Context(), "GET", "/api/v1/rollouts", &rs); err != nil {
				return err
			}
			return emit(stdout, f.output, rs, func(w io.Writer) { rolloutTable(w, rs) })
		},
	})
	get := func(ctx context.Context, id string) (api.RolloutAnswer, error) {
		var a api.RolloutAnswer
		err := f.client().do(ctx, "GET", "/api/v1/rollouts/"+id, &a)
		return a, err
	}
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
		Use:   "get ID",
		Short: "Show a rollout with every item and why it is (not) progressing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return emit(stdout, f.output, a, func(w io.Writer) { itemTable(w, a) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "watch ID",
		Short: "Print a line each time the rollout changes, until it ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			last := ""
			for {
				a, err := get(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				r := a.Rollout
				line := fmt.Sprintf("%s %s wave %d  total=%d done=%d in_progress=%d pending=%d failed=%d skipped=%d %s",
					r.ID, r.Status, r.Wave, r.Counters.Total, r.Counters.Done, r.Counters.InProgress, r.Counters.Pending, r.Counters.Failed, r.Counters.Skipped, r.Reason)
				if line != last {
					fmt.Fprintf(stdout, "%s  %s\n", time.Now().Format(time.TimeOnly), strings.TrimSpace(line))
					last = line
				}
				if r.Status == fleetwave.RolloutCompleted || r.Status == fleetwave.RolloutCancelled {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	})
	for _, action := range []string{"pause", "resume", "cancel"} {
		cmd.AddCommand(&cobra.Command{
			Use:   action + " ID",
			Short: strings.ToUpper(action[:1]) + action[1:] + " a rollout (operator or admin token; recorded with your identity)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var a api.RolloutAnswer
				if err := f.client().do(cmd.Context(), "POST", "/api/v1/rollouts/"+args[0]+"/"+action, &a); err != nil {
					return err
				}
				return emit(stdout, f.output, a, func(w io.Writer) { itemTable(w, a) })
			},
		})
	}
	return cmd
}
