package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// client is a small HTTP client of the hub API.
type client struct {
	hub, token string
	http       *http.Client
}

// clientFlags are the flags of every command that calls the hub: --hub
// (default FLEETWAVE_HUB, else http://127.0.0.1:8080), --token (default
// FLEETWAVE_TOKEN) and --output.
type clientFlags struct{ hub, token, output string }

// defaultHub is the hub URL when neither --hub nor FLEETWAVE_HUB says one.
const defaultHub = "http://127.0.0.1:8080"

// add registers the flags on cmd, for it and its subcommands, and checks
// the hub URL before any of them runs.
func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.hub, "hub", envOr("FLEETWAVE_HUB", defaultHub), "hub URL (env FLEETWAVE_HUB)")
	cmd.PersistentFlags().StringVar(&f.token, "token", "", "API bearer token (default: env FLEETWAVE_TOKEN)")
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "table", "table, json or yaml")
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return checkHubURL(f.hub, hubSource(cmd)) }
}

func (f *clientFlags) client() *client {
	tok := f.token
	if tok == "" {
		tok = os.Getenv("FLEETWAVE_TOKEN")
	}
	return &client{hub: strings.TrimRight(f.hub, "/"), token: tok, http: &http.Client{Timeout: 30 * time.Second}}
}

// call sends a request with f's client (in, when not nil, as its JSON
// body), decodes the answer into out and reports a failure the way
// reportClientError does, with hint's advice for an API error code.
func (f *clientFlags) call(cmd *cobra.Command, method, path string, in, out any, hint func(code string) string) error {
	c := f.client()
	if err := send(cmd.Context(), c, method, path, in, out); err != nil {
		return reportClientError(cmd, c, err, hint)
	}
	return nil
}

// hubSource says where the hub URL of cmd comes from.
func hubSource(cmd *cobra.Command) string {
	switch {
	case cmd.Flags().Changed("hub"):
		return "--hub"
	case os.Getenv("FLEETWAVE_HUB") != "":
		return "FLEETWAVE_HUB"
	}
	return "the default"
}

// checkHubURL refuses a hub URL the client cannot call, saying how to fix
// it where it was given (source: --hub or FLEETWAVE_HUB).
func checkHubURL(hub, source string) error {
	given := "--hub " + hub
	fix := func(u string) string { return "--hub " + u }
	if source == "FLEETWAVE_HUB" {
		given = "FLEETWAVE_HUB=" + hub
		fix = func(u string) string { return "FLEETWAVE_HUB=" + u }
	}
	if strings.TrimSpace(hub) == "" {
		return usageError{given + ": empty hub URL", fix(defaultHub)}
	}
	if !strings.Contains(hub, "://") {
		return usageError{given + ": add http:// or https://", fix("http://" + hub)}
	}
	u, err := url.Parse(hub)
	switch {
	case err != nil:
		return usageError{fmt.Sprintf("%s: not a URL: %v", given, errors.Unwrap(err)), fix(defaultHub)}
	case u.Scheme != "http" && u.Scheme != "https":
		return usageError{fmt.Sprintf("%s: the scheme must be http:// or https://, not %s://", given, u.Scheme), fix("http://" + u.Host)}
	case u.Host == "":
		return usageError{given + ": no host after " + u.Scheme + "://", fix(defaultHub)}
	case u.RawQuery != "" || u.Fragment != "":
		return usageError{given + ": the hub URL takes no query or fragment", fix(u.Scheme + "://" + u.Host)}
	}
	return nil
}

// apiFailure is an error answer of the API.
type apiFailure struct {
	status int
	body   struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
}

func (e *apiFailure) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.body.Error.Code, e.body.Error.Message, e.status)
}

// do sends a request without a body and decodes the answer into out.
func (c *client) do(ctx context.Context, method, path string, out any) error {
	return send(ctx, c, method, path, nil, out)
}

// send sends in (when not nil) as the JSON body of a request and
// decodes the answer into out; an error answer is an *apiFailure.
func send(ctx context.Context, c *client, method, path string, in, out any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.hub+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
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
			msg := strings.TrimSpace(string(data))
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
			f.body.Error.Code, f.body.Error.Message = fmt.Sprintf("HTTP %d", resp.StatusCode), cmp.Or(msg, http.StatusText(resp.StatusCode))
		}
		return f
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s answered %d with an unreadable body: %w", method, c.hub+path, resp.StatusCode, err)
	}
	return nil
}

// reportClientError prints an API error or an unreachable hub as
// "error: <message> (<code>)" with a hint a human can act on (hint's for
// an API error code, else apiHint's), and returns exitError{1}; other
// errors are returned as they are.
func reportClientError(cmd *cobra.Command, c *client, err error, hint func(code string) string) error {
	w := cmd.ErrOrStderr()
	var fail *apiFailure
	var uerr *url.Error
	switch {
	case errors.As(err, &fail):
		code, msg := fail.body.Error.Code, fail.body.Error.Message
		fmt.Fprintf(w, "error: %s (%s)\n", msg, code)
		for _, p := range labelProblems(fail.body.Error.Details) {
			fmt.Fprintf(w, "  %s\n", p)
		}
		h := ""
		if hint != nil {
			h = hint(code)
		}
		if h = cmp.Or(h, apiHint(code)); h != "" {
			fmt.Fprintf(w, "hint: %s\n", h)
		}
		return exitError{1}
	case errors.As(err, &uerr) && !errors.Is(err, context.Canceled):
		from := "the default"
		if src := hubSource(cmd); src != "the default" {
			from = "from " + src
		}
		fmt.Fprintf(w, "error: cannot reach the hub at %s (%s): %v\n", c.hub, from, uerr.Err)
		fmt.Fprintf(w, "hint: is the hub running there? point --hub or FLEETWAVE_HUB at its URL, e.g. FLEETWAVE_HUB=http://hub.example:8080\n")
		return exitError{1}
	}
	return err
}

// labelProblems are the lines of an invalid_labels answer's details
// ("key: problem"), none for other details.
func labelProblems(details json.RawMessage) []string {
	var d struct {
		Labels []struct {
			Key     string `json:"key"`
			Problem string `json:"problem"`
		} `json:"labels"`
	}
	if len(details) == 0 || json.Unmarshal(details, &d) != nil {
		return nil
	}
	var out []string
	for _, p := range d.Labels {
		if p.Key == "" {
			out = append(out, p.Problem)
		} else {
			out = append(out, fmt.Sprintf("%s: %s", p.Key, p.Problem))
		}
	}
	return out
}

// apiHint says what to do about an API error code any command may get.
func apiHint(code string) string {
	switch code {
	case "unauthorized":
		return "pass a valid API token with --token or FLEETWAVE_TOKEN (a viewer token reads, an operator or admin token writes)"
	case "forbidden":
		return "this needs an operator or admin token (--token or FLEETWAVE_TOKEN)"
	case "not_leader":
		return "point --hub or FLEETWAVE_HUB at the leading hub"
	case "not_ready":
		return "the hub is starting or has no valid snapshot of the config repository yet; retry in a moment"
	case "conflict", "git_busy":
		return "the config repository moved under the write; retry"
	case "git_unavailable", "redis_unavailable":
		return "the hub cannot reach its " + strings.TrimSuffix(code, "_unavailable") + " now; retry later, the hub's log says why"
	case "too_many_requests":
		return "the hub is busy; retry in a moment"
	}
	return ""
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
			if err := checkOutput(f.output); err != nil {
				return err
			}
			var s fleetwave.Summary
			if err := f.call(cmd, "GET", "/api/v1/summary", nil, &s, nil); err != nil {
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
