package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/fleetsim"
)

// addDevSim adds simulate, scale, tokens and probe to the root's dev command
// (devCmd, beside gen-fleet).
func addDevSim(root *cobra.Command, stdout io.Writer) {
	for _, c := range root.Commands() {
		if c.Name() == "dev" {
			c.AddCommand(devSimulateCmd(stdout), devScaleCmd(stdout), devTokensCmd(stdout), devProbeCmd(stdout), devProbeAgentCmd(stdout))
		}
	}
}

// simFlags are the simulated fleet's knobs shared by simulate and scale.
type simFlags struct {
	duration   time.Duration
	pollers    int
	posters    int
	h2c        bool
	localAddrs []string
	seed       int64
	logLevel   string
	hubLog     string
	statusInt  time.Duration
	heapDir    string
	mutexDir   string
	cpuDir     string
	replicas   int
	killLeader bool
}

func (f *simFlags) register(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.duration, "duration", 500*time.Millisecond, "how long each simulated action runs")
	cmd.Flags().IntVar(&f.pollers, "pollers", 15000, "most long polls open at once (a larger fleet takes turns; each needs a file descriptor here and on the hub)")
	cmd.Flags().IntVar(&f.posters, "posters", 256, "most results and reports posted at once")
	cmd.Flags().BoolVar(&f.h2c, "h2c", false, "speak unencrypted HTTP/2 to the hub (the hub must serve it): every poll over a few connections")
	cmd.Flags().StringSliceVar(&f.localAddrs, "local-addr", nil, "source address to spread connections over (repeatable; e.g. 127.0.0.2 for a loopback hub)")
	cmd.Flags().Int64Var(&f.seed, "seed", 1, "seed of the generated fleet, durations and failure draws")
	cmd.Flags().StringVar(&f.logLevel, "sim-log-level", "warn", "log level of the simulator (debug, info, warn, error)")
	cmd.Flags().DurationVar(&f.statusInt, "status-interval", 2*time.Second, "status.interval of the hub this command starts")
	cmd.Flags().StringVar(&f.hubLog, "hub-log-level", "warn", "log level of the hub this command starts (info logs every attempt and result)")
	cmd.Flags().StringVar(&f.heapDir, "heap-profile", "", "directory for the heap profile of the hub this command starts, taken once the rollout is done (heap-<nodes>.pprof; read with go tool pprof -top -inuse_space)")
	cmd.Flags().IntVar(&f.replicas, "replicas", 1, "hub replicas this command starts, sharing one redis-server: the first leads, the agents are spread over all, the API probe reads the last")
	cmd.Flags().BoolVar(&f.killLeader, "kill-leader", false, "with --replicas: kill the leading hub (SIGKILL) once half the rollout is done, and measure the takeover")
	cmd.Flags().StringVar(&f.cpuDir, "cpu-profile", "", "directory for the CPU profile of the (leading) hub this command starts, sampled from the rollout's first dispatch for its ideal makespan (cpu-<nodes>.pprof; read with go tool pprof -top)")
	cmd.Flags().StringVar(&f.mutexDir, "mutex-profile", "", "directory for the mutex profile of the hub this command starts (its lock waits over the whole run, one in ten sampled), taken once the rollout is done (mutex-<nodes>.pprof; read with go tool pprof -top)")
}

// shape is a scale run's action duration, pollers and protocol for n
// nodes: the flags given, and for those not given the size's own
// (fleetsim.ActionFor, PollersFor, H2CFor; 0 lets fleetsim.Run choose),
// so that one `make scale` runs each size as docs/scale.md's figures were
// taken.
func (f *simFlags) shape(cmd *cobra.Command, n int) (duration time.Duration, pollers int, h2c bool) {
	h2c = fleetsim.H2CFor(n)
	if cmd.Flags().Changed("h2c") {
		h2c = f.h2c
	}
	if cmd.Flags().Changed("duration") {
		duration = f.duration
	}
	if cmd.Flags().Changed("pollers") {
		pollers = f.pollers
	}
	return duration, pollers, h2c
}

// heapProfile is the file of the hub's heap profile for n nodes ("" for none).
func (f *simFlags) heapProfile(n int) string { return profileFile(f.heapDir, "heap", n) }

// cpuProfile is the file of the hub's CPU profile for n nodes ("" for none).
func (f *simFlags) cpuProfile(n int) string { return profileFile(f.cpuDir, "cpu", n) }

// mutexProfile is the file of the hub's mutex profile for n nodes ("" for none).
func (f *simFlags) mutexProfile(n int) string { return profileFile(f.mutexDir, "mutex", n) }

// profileFile is dir's file of the kind's profile for n nodes ("" for no dir).
func profileFile(dir, kind string, n int) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", kind, n))
}

func (f *simFlags) logger(w io.Writer) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		lvl = zerolog.WarnLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func devSimulateCmd(stdout io.Writer) *cobra.Command {
	var sf simFlags
	var nodes int
	var hubURL, tokensFile string
	var jitter, transient, permanent float64
	var wait, reportEvery time.Duration
	cmd := &cobra.Command{
		Use:   "simulate --nodes N [--hub URL --tokens FILE]",
		Short: "Simulated agents speaking the agent protocol: against a hub (--hub), or a whole scenario on a hub of its own",
		Long: `With --hub, runs N simulated agents against that hub until interrupted; --tokens names
a file of "node token" lines (fleetwave dev tokens writes one, and the hub.yaml agents
section to match). Each agent registers, long-polls, "runs" each attempt for --duration
(+- --jitter), posts a result drawn from --transient/--permanent and sends a full report
every --report-every.

Without --hub, starts a hub process of its own (managed Redis, a generated config
repository of N nodes), rolls a block out to every node and prints the scale report's rows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 && tokensFile == "" {
				return usageError{"simulate needs --nodes", "fleetwave dev simulate --nodes 1000"}
			}
			log := sf.logger(cmd.ErrOrStderr())
			if hubURL == "" {
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				res, err := fleetsim.Run(cmd.Context(), fleetsim.Scenario{Bin: bin, Nodes: nodes, Duration: sf.duration, Pollers: sf.pollers,
					H2C: sf.h2c, LocalAddrs: sf.localAddrs, Seed: sf.seed, HubLogLevel: sf.hubLog, StatusInterval: sf.statusInt,
					Logger: log, Progress: cmd.ErrOrStderr(), HeapProfile: sf.heapProfile(nodes),
					MutexProfile: sf.mutexProfile(nodes), CPUProfile: sf.cpuProfile(nodes), Replicas: sf.replicas, KillLeader: sf.killLeader})
				if err != nil {
					return err
				}
				return fleetsim.WriteTable(stdout, []fleetsim.Result{res})
			}
			if tokensFile == "" {
				return usageError{"simulate --hub needs --tokens", "fleetwave dev tokens --nodes 1000 --out tokens.txt --hub-yaml agents.yaml"}
			}
			list, err := readTokens(tokensFile)
			if err != nil {
				return err
			}
			if nodes > 0 && nodes < len(list) {
				list = list[:nodes]
			}
			fleet, err := fleetsim.New(fleetsim.Options{HubURL: hubURL, Nodes: list, Duration: sf.duration, Jitter: jitter,
				Transient: transient, Permanent: permanent, Pollers: sf.pollers, Posters: sf.posters, Wait: wait, ReportEvery: reportEvery,
				H2C: sf.h2c, LocalAddrs: sf.localAddrs, Seed: uint64(sf.seed), Logger: log})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			done := make(chan struct{})
			go func() { _ = fleet.Run(ctx); close(done) }()
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					<-done
					st := fleet.Stats()
					fmt.Fprintf(stdout, "registered %d, polls %d, attempts %d (%d redelivered), success %d, transient %d, permanent %d, refused %d, post errors %d\n",
						st.Registered, st.Polls, st.Attempts, st.Redelivered, st.Succeeded, st.Transient, st.Permanent, st.Refused, st.PostErrors)
					return nil
				case <-tick.C:
					st := fleet.Stats()
					fmt.Fprintf(stdout, "%s registered %d/%d, polls %d, attempts %d, running %d, success %d, failed %d, refused %d\n",
						time.Now().Format(time.TimeOnly), st.Registered, len(list), st.Polls, st.Attempts, st.InFlight, st.Succeeded, st.Transient+st.Permanent, st.Refused)
				}
			}
		},
	}
	sf.register(cmd)
	cmd.Flags().IntVar(&nodes, "nodes", 0, "number of simulated nodes (with --tokens: the first N of the file)")
	cmd.Flags().StringVar(&hubURL, "hub", "", "hub URL (http://host:port); unset: start a hub of its own")
	cmd.Flags().StringVar(&tokensFile, "tokens", "", `file of "node token" lines (with --hub)`)
	cmd.Flags().Float64Var(&jitter, "jitter", 0, "action duration spread, as a share of --duration (0..1)")
	cmd.Flags().Float64Var(&transient, "transient", 0, "share of attempts ending in a transient failure")
	cmd.Flags().Float64Var(&permanent, "permanent", 0, "share of attempts ending in a permanent failure")
	cmd.Flags().DurationVar(&wait, "wait", 25*time.Second, "long-poll wait when every agent has a poller")
	cmd.Flags().DurationVar(&reportEvery, "report-every", 30*time.Second, "send each agent's full report this often, as agents do (0: only at registration and when asked)")
	return cmd
}

func devTokensCmd(stdout io.Writer) *cobra.Command {
	var nodes int
	var out, hubYAML string
	cmd := &cobra.Command{
		Use:   "tokens --nodes N --out FILE --hub-yaml FILE",
		Short: "Write agent tokens for node-000000... (\"node token\" lines) and the hub.yaml agents section that accepts them",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if nodes < 1 || out == "" || hubYAML == "" {
				return usageError{"tokens needs --nodes, --out and --hub-yaml", "fleetwave dev tokens --nodes 1000 --out tokens.txt --hub-yaml agents.yaml"}
			}
			ids := make([]string, nodes)
			for i := range ids {
				ids[i] = fmt.Sprintf("node-%06d", i)
			}
			list, hashes, err := fleetsim.Tokens(ids)
			if err != nil {
				return err
			}
			var tok, hy strings.Builder
			hy.WriteString("agents:\n  tokens:\n")
			for _, n := range list {
				fmt.Fprintf(&tok, "%s %s\n", n.ID, n.Token)
				fmt.Fprintf(&hy, "    %s: %s\n", n.ID, hashes[n.ID])
			}
			if err := os.WriteFile(out, []byte(tok.String()), 0o600); err != nil {
				return err
			}
			if err := os.WriteFile(hubYAML, []byte(hy.String()), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %d tokens to %s and the hub.yaml agents section to %s\n", nodes, out, hubYAML)
			return nil
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 0, "number of nodes")
	cmd.Flags().StringVar(&out, "out", "", `file of "node token" lines`)
	cmd.Flags().StringVar(&hubYAML, "hub-yaml", "", "file for the agents section of hub.yaml")
	return cmd
}

func readTokens(path string) ([]fleetsim.Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []fleetsim.Node
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, tok, ok := strings.Cut(line, " ")
		if !ok || strings.TrimSpace(tok) == "" {
			return nil, fmt.Errorf("%s:%d: want \"node token\"", path, n)
		}
		out = append(out, fleetsim.Node{ID: id, Token: strings.TrimSpace(tok)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	return out, nil
}

func devProbeCmd(stdout io.Writer) *cobra.Command {
	var hubURL, rollout string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "probe --hub URL --rollout ID [--interval 200ms]",
		Short: "Read a hub's summary and one rollout's page in turn until interrupted, printing each read's latency as a JSON line (the scale report's API latency)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hubURL == "" || rollout == "" {
				return usageError{"probe needs --hub and --rollout", "fleetwave dev probe --hub http://127.0.0.1:8080 --rollout web-g1"}
			}
			return fleetsim.Probe(cmd.Context(), strings.TrimRight(hubURL, "/"), rollout, interval, stdout)
		},
	}
	cmd.Flags().StringVar(&hubURL, "hub", "", "the hub's URL")
	cmd.Flags().StringVar(&rollout, "rollout", "", "the rollout whose page is read")
	cmd.Flags().DurationVar(&interval, "interval", 200*time.Millisecond, "pause between two rounds of reads")
	return cmd
}

func devProbeAgentCmd(stdout io.Writer) *cobra.Command {
	var hubURL, tokensFile, logLevel string
	var duration, wait, reportEvery time.Duration
	var seed int64
	cmd := &cobra.Command{
		Use:   "probe-agent --hub URL --tokens FILE",
		Short: "Run the agents of a tokens file against a hub until interrupted, printing when they registered and each attempt and result as a JSON line (the scale report's probe node)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hubURL == "" || tokensFile == "" {
				return usageError{"probe-agent needs --hub and --tokens", "fleetwave dev probe-agent --hub http://127.0.0.1:8080 --tokens tokens.txt"}
			}
			list, err := readTokens(tokensFile)
			if err != nil {
				return err
			}
			lvl, err := zerolog.ParseLevel(logLevel)
			if err != nil {
				return usageError{fmt.Sprintf("--log-level %q: %v", logLevel, err), "fleetwave dev probe-agent --log-level warn"}
			}
			return fleetsim.RunAgents(cmd.Context(), fleetsim.Options{HubURL: strings.TrimRight(hubURL, "/"), Nodes: list, Duration: duration,
				Pollers: len(list), Posters: len(list), Wait: wait, ReportEvery: reportEvery, Seed: uint64(seed),
				Logger: zerolog.New(cmd.ErrOrStderr()).Level(lvl).With().Timestamp().Logger()}, stdout)
		},
	}
	cmd.Flags().StringVar(&hubURL, "hub", "", "the hub's URL")
	cmd.Flags().StringVar(&tokensFile, "tokens", "", `file of "node token" lines`)
	cmd.Flags().DurationVar(&duration, "duration", 500*time.Millisecond, "how long each simulated action runs")
	cmd.Flags().DurationVar(&wait, "wait", 25*time.Second, "long-poll wait")
	cmd.Flags().DurationVar(&reportEvery, "report-every", 30*time.Second, "send each agent's full report this often (0: only at registration and when asked)")
	cmd.Flags().Int64Var(&seed, "seed", 1, "seed of the durations")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level (debug, info, warn, error)")
	return cmd
}

const (
	scaleBegin = "<!-- scale:begin (written by fleetwave dev scale) -->"
	scaleEnd   = "<!-- scale:end -->"
)

func devScaleCmd(stdout io.Writer) *cobra.Command {
	var sf simFlags
	var nodeList, out, resultsFile string
	var keep, render bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "scale [--nodes \"1000 10000 100000\"] [--out docs] [--results docs/scale.json]",
		Short: "The scale report: one simulated scenario per fleet size, a table with targets, docs/scale.md and docs/scale.svg",
		Long: `Runs one simulated scenario per fleet size and prints a table of figures with their targets.

Unless --duration, --pollers or --h2c is given, each size has its own: an action of 500ms up
to 10,000 nodes and 50µs per node above (5s at 100,000); every agent holding its poll; HTTP/1.1
up to 15,000 nodes (a connection per poll), h2c above.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if render {
				if resultsFile == "" || out == "" {
					return usageError{"--render needs --results and --out", "fleetwave dev scale --render --results docs/scale.json --out docs"}
				}
				results, err := mergeResults(resultsFile, nil)
				if err != nil {
					return err
				}
				if err := fleetsim.WriteTable(stdout, results); err != nil {
					return err
				}
				return writeScaleDocs(out, sizesOf(results), results)
			}
			var sizes []int
			for _, f := range strings.FieldsFunc(nodeList, func(r rune) bool { return r == ' ' || r == ',' }) {
				n, err := strconv.Atoi(f)
				if err != nil || n < 2 {
					return usageError{fmt.Sprintf("--nodes %q: want numbers of at least 2", nodeList), `fleetwave dev scale --nodes "1000 10000"`}
				}
				sizes = append(sizes, n)
			}
			if len(sizes) == 0 {
				return usageError{"scale needs --nodes", `fleetwave dev scale --nodes "1000 10000"`}
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			log := sf.logger(cmd.ErrOrStderr())
			var results []fleetsim.Result
			var failed error
			for _, n := range sizes {
				var dir string
				if keep {
					if dir, err = os.MkdirTemp("", fmt.Sprintf("fwscale-%d-", n)); err != nil {
						return err
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "scale %d: keeping %s\n", n, dir)
				}
				duration, pollers, h2c := sf.shape(cmd, n)
				res, err := fleetsim.Run(cmd.Context(), fleetsim.Scenario{Bin: bin, Nodes: n, Dir: dir, Keep: keep, Duration: duration,
					Pollers: pollers, Posters: sf.posters, H2C: h2c, LocalAddrs: sf.localAddrs, Seed: sf.seed, HubLogLevel: sf.hubLog,
					StatusInterval: sf.statusInt, Logger: log, Progress: cmd.ErrOrStderr(), HeapProfile: sf.heapProfile(n),
					MutexProfile: sf.mutexProfile(n), CPUProfile: sf.cpuProfile(n), Timeout: timeout, Replicas: sf.replicas, KillLeader: sf.killLeader})
				if err != nil {
					// the sizes measured so far are still reported
					failed = fmt.Errorf("%d nodes: %w", n, err)
					break
				}
				results = append(results, res)
			}
			if resultsFile != "" && len(results) > 0 {
				if results, err = mergeResults(resultsFile, results); err != nil {
					return err
				}
			}
			if len(results) > 0 {
				if err := fleetsim.WriteTable(stdout, results); err != nil {
					return err
				}
				if out != "" {
					if err := writeScaleDocs(out, sizesOf(results), results); err != nil {
						return err
					}
					fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(out, "scale.md"), filepath.Join(out, "scale.svg"))
				}
			}
			return failed
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&nodeList, "nodes", "1000 10000 100000", "fleet sizes, space or comma separated")
	cmd.Flags().StringVar(&out, "out", "", "directory for scale.md (its generated section) and scale.svg; unset: only the table")
	cmd.Flags().StringVar(&resultsFile, "results", "", "JSON file of earlier results: this run's sizes replace theirs, and the report shows them all")
	cmd.Flags().BoolVar(&render, "render", false, "run nothing: print the table and write the docs from --results")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep each run's directory (repositories, hub data and log)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "bound on each fleet size's whole run (0: 10 min + 20 ms per node)")
	return cmd
}

// mergeResults reads the results kept in path (if any), replaces those of
// the sizes in fresh, writes the union back and returns it by size.
func mergeResults(path string, fresh []fleetsim.Result) ([]fleetsim.Result, error) {
	var kept []fleetsim.Result
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &kept); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	// a run replaces the one of its column (size, hubs, failover)
	byColumn := map[string]fleetsim.Result{}
	for _, r := range append(kept, fresh...) {
		byColumn[r.Column()] = r
	}
	out := slices.Collect(maps.Values(byColumn))
	slices.SortFunc(out, func(a, b fleetsim.Result) int {
		return cmp.Or(a.Nodes-b.Nodes, strings.Compare(a.Column(), b.Column()))
	})
	b, err = json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return out, os.WriteFile(path, append(b, '\n'), 0o644)
}

// sizesOf lists the results' fleet sizes as --nodes takes them.
func sizesOf(results []fleetsim.Result) string {
	f := make([]string, len(results))
	for i, r := range results {
		f[i] = strconv.Itoa(r.Nodes)
	}
	return strings.Join(f, " ")
}

// writeScaleDocs writes dir/scale.svg and the generated section of
// dir/scale.md (between scaleBegin and scaleEnd; the rest of an existing
// file, its analysis, is kept).
func writeScaleDocs(dir, nodeList string, results []fleetsim.Result) error {
	if err := os.WriteFile(filepath.Join(dir, "scale.svg"), fleetsim.SVG(results), 0o644); err != nil {
		return err
	}
	var sb strings.Builder
	sb.WriteString(scaleBegin + "\n")
	fmt.Fprintf(&sb, "Measured with `make scale SCALE_NODES=\"%s\"` (`fleetwave dev scale --nodes \"%s\" --out docs --results docs/scale.json`) on %d cores (%s/%s); ",
		nodeList, nodeList, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	sb.WriteString("the machine was shared with other builds, so the load averages of each run are listed with it.\n\n")
	sb.WriteString(fleetsim.RunsMarkdown(results))
	sb.WriteString("\n")
	sb.WriteString(fleetsim.Markdown(results))
	sb.WriteString("\n![each figure over its target](scale.svg)\n")
	sb.WriteString(scaleEnd + "\n")
	path := filepath.Join(dir, "scale.md")
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(path, []byte("# fleetwave at scale\n\n"+sb.String()), 0o644)
	}
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, scaleBegin), strings.Index(s, scaleEnd)
	if i < 0 || j < i {
		return os.WriteFile(path, []byte(strings.TrimRight(s, "\n")+"\n\n"+sb.String()), 0o644)
	}
	return os.WriteFile(path, []byte(s[:i]+sb.String()+strings.TrimPrefix(s[j+len(scaleEnd):], "\n")), 0o644)
}
