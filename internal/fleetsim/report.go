package fleetsim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// unit says how a row's values print.
type unit int

const (
	unitDuration unit = iota // seconds
	unitBytes
	unitRatio
	unitCount
	unitShare // a fraction, printed as a percentage
)

// Row is one measured quantity across the runs of a report.
type Row struct {
	Name   string
	Values []float64 // one per Result, in the results' order; NaN = not measured
	Unit   unit
	// Target is the largest value that meets the target (HasTarget).
	Target    float64
	HasTarget bool
	Baseline  string
	// Signed: the value is a difference of two moments that may come in
	// either order (a negative duration is written as such, not as a
	// histogram's "above its largest bound").
	Signed bool
	// MayBeZero: a measured 0 is a figure (a count of waits when nothing
	// waited), not a row left unfilled.
	MayBeZero bool
}

// Met reports whether value i meets the row's target.
func (r Row) Met(i int) bool {
	v := r.Values[i]
	return !r.HasTarget || (!math.IsNaN(v) && v >= 0 && v <= r.Target) // negative: above a bound
}

// Growth is the exponent k of value ~ N^k between the two largest runs
// ("" when it cannot be told).
func (r Row) Growth(nodes []int) string {
	n := len(r.Values)
	if n < 2 || r.Unit == unitShare { // a share does not grow with N
		return ""
	}
	a, b := r.Values[n-2], r.Values[n-1]
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) || nodes[n-1] == nodes[n-2] {
		return ""
	}
	return fmt.Sprintf("N^%.2f", math.Log(b/a)/math.Log(float64(nodes[n-1])/float64(nodes[n-2])))
}

func (r Row) format(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	switch r.Unit {
	case unitDuration:
		if v < 0 && r.Signed {
			return "-" + fmtDuration(seconds(-v))
		}
		if v < 0 { // above every bucket of a histogram (histogram.Max)
			return "> " + fmtDuration(seconds(-v))
		}
		return fmtDuration(seconds(v))
	case unitBytes:
		return fmtBytes(v)
	case unitRatio:
		return fmt.Sprintf("%.2fx", v)
	case unitShare:
		return fmt.Sprintf("%.1f%%", 100*v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func (r Row) targetText() string {
	if !r.HasTarget {
		return "-"
	}
	return "<= " + r.format(r.Target)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", b/(1<<10))
	}
}

// Rows turns the results of one report (one per fleet size) into rows.
// Targets are the ones asked of 100,000 nodes on 2 cores; a smaller fleet
// is held to the same ones.
func Rows(results []Result) []Row {
	col := func(f func(Result) float64) []float64 {
		out := make([]float64, len(results))
		for i, r := range results {
			out[i] = f(r)
		}
		return out
	}
	dur := func(f func(Result) time.Duration) []float64 {
		return col(func(r Result) float64 { return f(r).Seconds() })
	}
	// a run from before the plain reads were measured shows none
	plain := func(f func(Result) Latency) []float64 {
		return col(func(r Result) float64 {
			if l := f(r); l.N > 0 {
				return l.P99.Seconds()
			}
			return math.NaN()
		})
	}
	// a baseline not measured in a run (no cue binary, or a run from
	// before it was) shows none
	measured := func(f func(Result) (time.Duration, bool)) []float64 {
		return col(func(r Result) float64 {
			if d, ok := f(r); ok {
				return d.Seconds()
			}
			return math.NaN()
		})
	}
	// a run from before the wave breakdown shows none
	wave := func(f func(Waves) time.Duration) []float64 {
		return col(func(r Result) float64 {
			if r.Waves.Count == 0 {
				return math.NaN()
			}
			return f(r.Waves).Seconds()
		})
	}
	// the summed means of some steps of the hub's status writes or
	// reconciles; none in a run from before they were read
	steps := func(of func(Result) map[string]time.Duration, names ...string) []float64 {
		return col(func(r Result) float64 {
			m := of(r)
			if m == nil {
				return math.NaN()
			}
			var d time.Duration
			for _, n := range names {
				d += m[n]
			}
			return d.Seconds()
		})
	}
	pool := func(f func(Result) float64) []float64 {
		return col(func(r Result) float64 {
			if !r.PoolMeasured {
				return math.NaN() // runs recorded before it was read
			}
			return f(r)
		})
	}
	statusSteps := func(names ...string) []float64 {
		return steps(func(r Result) map[string]time.Duration { return r.StatusSteps }, names...)
	}
	reconcileSteps := func(names ...string) []float64 {
		return steps(func(r Result) map[string]time.Duration { return r.ReconcileSteps }, names...)
	}
	maxPush := func(r Result) time.Duration {
		var m time.Duration
		for _, d := range r.PushDispatch {
			m = max(m, d)
		}
		return m
	}
	stage := func(f func(PushStage) time.Duration) func(Result) time.Duration {
		return func(r Result) time.Duration {
			var d []time.Duration
			for _, s := range r.PushStages {
				d = append(d, f(s))
			}
			if len(d) == 0 {
				return 0
			}
			slices.Sort(d)
			return d[len(d)/2]
		}
	}
	rows := []Row{
		{Name: "agents registered (all, from the fleet's start)", Values: dur(func(r Result) time.Duration { return r.Register }), Unit: unitDuration},
		{Name: "push -> first dispatch, p50", Values: dur(Result.PushDispatchP50), Unit: unitDuration, Target: 0.2, HasTarget: true},
		{Name: "push -> first dispatch, max", Values: dur(maxPush), Unit: unitDuration},
		{Name: "  git push itself (the client, not counted above; p50)", Values: dur(func(r Result) time.Duration { return median(r.GitPush) }), Unit: unitDuration},
		{Name: "  of which push -> snapshot applied (p50)", Values: dur(stage(func(s PushStage) time.Duration { return s.Applied })), Unit: unitDuration},
		{Name: "  of which push -> rollout created (p50)", Values: dur(stage(func(s PushStage) time.Duration { return s.Created })), Unit: unitDuration},
		{Name: "  of which push -> item dispatched (p50)", Values: dur(stage(func(s PushStage) time.Duration { return s.Dispatched })), Unit: unitDuration},
		{Name: "full validation (fleetwave validate, a process)", Values: dur(func(r Result) time.Duration { return r.Validate }), Unit: unitDuration, Target: 3, HasTarget: true,
			Baseline: "cue vet: the row below"},
		{Name: "  baseline: cue vet of the same repository (its YAML and JSON objects only; .cue ones cannot be vetted as data)", Values: measured(func(r Result) (time.Duration, bool) { return r.CueVet, r.CueVetFiles > 0 }), Unit: unitDuration},
		{Name: "hub sync of a commit (fetch, validate, apply), mean", Values: dur(func(r Result) time.Duration { return r.SyncMean }), Unit: unitDuration},
		{Name: "plan (hub reconcile), mean", Values: dur(func(r Result) time.Duration { return r.PlanMean }), Unit: unitDuration},
		{Name: "plan (hub reconcile), max (bucket bound)", Values: dur(func(r Result) time.Duration { return r.PlanMax }), Unit: unitDuration},
		{Name: "  of a reconcile, mean: observations read (with the waits for a read or a push plan in progress)", Values: reconcileSteps("wait", "observe"), Unit: unitDuration},
		{Name: "  of a reconcile, mean: plan (every node)", Values: reconcileSteps("plan"), Unit: unitDuration},
		{Name: "  of a reconcile, mean: items handed to the engine, and those sent before checked", Values: reconcileSteps("create"), Unit: unitDuration},
		{Name: "  of a reconcile, mean: the rest (drained, requests, approvals)", Values: reconcileSteps("drained", "requests", "approvals"), Unit: unitDuration},
		{Name: "rollout makespan (first dispatch -> last item completed)", Values: dur(func(r Result) time.Duration { return r.Makespan }), Unit: unitDuration},
		{Name: "rollout ideal (ceil(N/max_concurrent) x action)", Values: dur(func(r Result) time.Duration { return r.Ideal }), Unit: unitDuration},
		{Name: "makespan / ideal", Values: col(func(r Result) float64 {
			if r.Ideal == 0 {
				return math.NaN()
			}
			return float64(r.Makespan) / float64(r.Ideal)
		}), Unit: unitRatio, Target: 1.2, HasTarget: true},
		{Name: "  per wave (median): first -> last attempt received", Values: wave(func(w Waves) time.Duration { return w.Spread }), Unit: unitDuration},
		{Name: "  per wave (median): first received -> last result answered, less the action", Values: wave(func(w Waves) time.Duration { return w.Tail }), Unit: unitDuration, Signed: true},
		{Name: "  per wave (median): last result answered -> next wave's first received", Values: wave(func(w Waves) time.Duration { return w.Gap }), Unit: unitDuration, Signed: true},
		{Name: "status commit (documents built, committed, pushed), mean", Values: dur(func(r Result) time.Duration { return r.StatusMean }), Unit: unitDuration},
		{Name: "  of a status write, mean: documents built (read, engine, rollouts, summary, nodes)", Values: statusSteps("read", "engine", "rollouts", "summary", "nodes"), Unit: unitDuration},
		{Name: "  of a status write, mean: commit made (fetch, edit, encode, store)", Values: statusSteps("fetch", "edit", "encode", "store"), Unit: unitDuration},
		{Name: "  of a status write, mean: commit pushed (push, record, ack)", Values: statusSteps("push", "record", "ack"), Unit: unitDuration},
		{Name: "  baseline: git CLI, the same remote: N/10 node documents changed, added, committed and pushed", Values: measured(func(r Result) (time.Duration, bool) { return r.GitCLIStatus, r.GitCLIFiles > 0 }), Unit: unitDuration},
		{Name: "status commit, max (the hub's log; its histogram's bucket bound when none took 1 s)", Values: dur(Result.slowestStatus), Unit: unitDuration, Target: 3, HasTarget: true,
			Baseline: "git CLI: the row above"},
		{Name: "hub peak RSS", Values: col(func(r Result) float64 { return float64(r.HubRSSPeak) }), Unit: unitBytes, Target: 1 << 30, HasTarget: true},
		{Name: "  hub goroutine stacks per poll held (after the rollout, less the idle hub's)", Values: col(func(r Result) float64 {
			if r.PollStack == 0 {
				return math.NaN() // not measured then
			}
			return float64(r.PollStack)
		}), Unit: unitBytes},
		{Name: "hub Redis calls that waited for a pooled connection (from the push)", Values: pool(func(r Result) float64 { return float64(r.PoolWaits) }), Unit: unitCount, MayBeZero: true},
		{Name: "  their mean wait", Values: pool(func(r Result) float64 {
			if r.PoolWaits == 0 {
				return 0
			}
			return (r.PoolWait / time.Duration(r.PoolWaits)).Seconds()
		}), Unit: unitDuration, MayBeZero: true},
		{Name: "  calls for agents that waited for their share of the pool (two thirds)", Values: pool(func(r Result) float64 { return float64(r.AgentCallWaits) }), Unit: unitCount, MayBeZero: true},
		{Name: hubCPURow, Values: col(func(r Result) float64 {
			if r.RolloutWall <= 0 {
				return math.NaN()
			}
			return r.HubCPU.Seconds() / r.RolloutWall.Seconds()
		}), Unit: unitRatio},
		{Name: "Redis used_memory (after the rollout)", Values: col(func(r Result) float64 { return float64(r.RedisUsed) }), Unit: unitBytes},
		{Name: "Redis used_memory_peak", Values: col(func(r Result) float64 { return float64(r.RedisPeak) }), Unit: unitBytes},
		{Name: "GET /api/v1/summary p50 (during the rollout, as the console reads it)", Values: dur(func(r Result) time.Duration { return r.Summary.P50 }), Unit: unitDuration},
		{Name: "GET /api/v1/summary p99", Values: dur(func(r Result) time.Duration { return r.Summary.P99 }), Unit: unitDuration, Target: 0.1, HasTarget: true,
			Baseline: "GET /healthz p99: the last row"},
		{Name: "  a plain client's read (no stale answer accepted), p99", Values: plain(func(r Result) Latency { return r.SummaryPlain }), Unit: unitDuration},
		{Name: "  answered by the hub within 100 ms (its own histogram, both reads)", Values: col(func(r Result) float64 { return share(r.Summary.HubWithin100ms) }), Unit: unitShare},
		{Name: "GET /api/v1/rollouts/{id} p50 (first page: 500 items, as the console reads it)", Values: dur(func(r Result) time.Duration { return r.RolloutPage.P50 }), Unit: unitDuration},
		{Name: "GET /api/v1/rollouts/{id} p99", Values: dur(func(r Result) time.Duration { return r.RolloutPage.P99 }), Unit: unitDuration, Target: 0.1, HasTarget: true,
			Baseline: "GET /healthz p99: the last row"},
		{Name: "  a plain client's read (no stale answer accepted), p99", Values: plain(func(r Result) Latency { return r.RolloutPagePlain }), Unit: unitDuration},
		{Name: "  answered by the hub within 100 ms (its own histogram, both reads)", Values: col(func(r Result) float64 { return share(r.RolloutPage.HubWithin100ms) }), Unit: unitShare},
		{Name: "baseline: GET /healthz p99 (answers ok, reads nothing; read beside the two above)", Values: plain(func(r Result) Latency { return r.Healthz }), Unit: unitDuration},
		{Name: "items completed", Values: col(func(r Result) float64 { return float64(r.Completed) }), Unit: unitCount},
		{Name: "  of which by their one attempt's result (the others: by the node's report)", Values: col(func(r Result) float64 { return float64(r.DoneOnce) }), Unit: unitCount},
		{Name: "items run twice (two successes taken)", Values: col(func(r Result) float64 { return float64(r.Duplicates) }), Unit: unitCount, Target: 0, HasTarget: true},
	}
	// the replicas' rows follow the CPU of all hubs
	at := slices.IndexFunc(rows, func(r Row) bool { return r.Name == hubCPURow }) + 1
	return slices.Insert(rows, at, replicaRows(results, col)...)
}

// hubCPURow is the row of the hub's CPU (with replicas, theirs together).
const hubCPURow = "hub CPU during the rollout (cores)"

// Column names a result's column: its size, its hubs when several, and
// whether their leader was killed. Runs of the same column replace each
// other (docs/scale.json).
func (r Result) Column() string {
	if r.Failover != nil {
		return fmt.Sprintf("%d nodes, %d hubs, leader killed", r.Nodes, len(r.Hubs))
	}
	if len(r.Hubs) > 1 {
		return fmt.Sprintf("%d nodes, %d hubs", r.Nodes, len(r.Hubs))
	}
	return fmt.Sprintf("%d nodes", r.Nodes)
}

// replicaRows are the rows of a report holding a run of several hub
// replicas (none otherwise): how the leader's work and the followers'
// compare. A run of one hub shows none.
func replicaRows(results []Result, col func(func(Result) float64) []float64) []Row {
	if !slices.ContainsFunc(results, func(r Result) bool { return len(r.Hubs) > 1 }) {
		return nil
	}
	// of the leader (the hub that led at the end) or of the followers
	pick := func(leader bool, f func(Result, []HubFigures) float64) []float64 {
		return col(func(r Result) float64 {
			var hs []HubFigures
			for _, h := range r.Hubs {
				if h.Leader == leader {
					hs = append(hs, h)
				}
			}
			if len(hs) == 0 || r.RolloutWall <= 0 {
				return math.NaN()
			}
			return f(r, hs)
		})
	}
	cores := func(r Result, hs []HubFigures) float64 {
		var cpu time.Duration
		for _, h := range hs {
			cpu += h.CPU
		}
		return cpu.Seconds() / r.RolloutWall.Seconds() / float64(len(hs))
	}
	rss := func(_ Result, hs []HubFigures) float64 {
		var m int64
		for _, h := range hs {
			m = max(m, h.RSSPeak)
		}
		return float64(m)
	}
	rows := []Row{
		{Name: "hub replicas sharing one Redis (agents spread evenly; the API probe reads a follower; CPU above: theirs together, peak RSS: the largest)", Values: col(func(r Result) float64 { return float64(max(1, len(r.Hubs))) }), Unit: unitCount},
		{Name: "  the leader's CPU during the rollout (cores)", Values: pick(true, cores), Unit: unitRatio},
		{Name: "  a follower's CPU during the rollout (cores, their mean)", Values: pick(false, cores), Unit: unitRatio},
		{Name: "  the leader's peak RSS", Values: pick(true, rss), Unit: unitBytes},
		{Name: "  a follower's peak RSS (the largest)", Values: pick(false, rss), Unit: unitBytes},
	}
	if !slices.ContainsFunc(results, func(r Result) bool { return r.Failover != nil }) {
		return rows
	}
	failover := func(f func(*Failover) time.Duration) []float64 {
		return col(func(r Result) float64 {
			if r.Failover == nil {
				return math.NaN()
			}
			return f(r.Failover).Seconds()
		})
	}
	return append(rows,
		Row{Name: "  leader killed (SIGKILL) at half the rollout: a follower's lease acquired after (target: the lease TTL, 15 s)", Values: failover(func(f *Failover) time.Duration { return f.Takeover }),
			Unit: unitDuration, Target: hubLeaseTTL.Seconds(), HasTarget: true},
		Row{Name: "    of which the dead leader's lease was still valid (renewed every third of its TTL)", Values: failover(func(f *Failover) time.Duration { return f.LeaseLeft }), Unit: unitDuration},
		Row{Name: "  the new leader's first attempt received by an agent, after the kill", Values: failover(func(f *Failover) time.Duration { return f.FirstDispatch }), Unit: unitDuration},
		Row{Name: "  a probe pushed once the new leader took the lease: push -> first dispatch", Values: failover(func(f *Failover) time.Duration { return f.TakeoverPush }), Unit: unitDuration},
		Row{Name: "  the new leader's first status commit, after the kill (to the second)", Values: failover(func(f *Failover) time.Duration { return f.FirstStatus }), Unit: unitDuration})
}

// share is a measured share, NaN when not measured.
func share(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// WriteTable prints the rows as an aligned text table: one column per
// fleet size, each targeted value followed by ok or MISS.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := []string{"measure"}
	for _, r := range results {
		head = append(head, r.Column())
	}
	head = append(head, "target", "growth", "baseline")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	nodes := nodesOf(results)
	for _, row := range Rows(results) {
		cells := []string{row.Name}
		for i, v := range row.Values {
			c := row.format(v)
			if row.HasTarget {
				c += map[bool]string{true: " ok", false: " MISS"}[row.Met(i)]
			}
			cells = append(cells, c)
		}
		cells = append(cells, row.targetText(), row.Growth(nodes), row.Baseline)
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// Markdown is the rows as a markdown table (the same cells as WriteTable).
func Markdown(results []Result) string {
	var sb strings.Builder
	sb.WriteString("| measure |")
	for _, r := range results {
		fmt.Fprintf(&sb, " %s |", r.Column())
	}
	sb.WriteString(" target | growth | baseline |\n|---|")
	for range results {
		sb.WriteString("---:|")
	}
	sb.WriteString("---|---|---|\n")
	nodes := nodesOf(results)
	for _, row := range Rows(results) {
		fmt.Fprintf(&sb, "| %s |", row.Name)
		for i, v := range row.Values {
			c := row.format(v)
			if row.HasTarget {
				c += map[bool]string{true: " ✓", false: " **✗**"}[row.Met(i)]
			}
			fmt.Fprintf(&sb, " %s |", c)
		}
		fmt.Fprintf(&sb, " %s | %s | %s |\n", strings.ReplaceAll(row.targetText(), "<=", "≤"), row.Growth(nodes), row.Baseline)
	}
	return sb.String()
}

// RunsMarkdown lists each run's conditions: when, the machine's load, the
// pollers and the rollout's shape.
func RunsMarkdown(results []Result) string {
	var sb strings.Builder
	sb.WriteString("| nodes | started (UTC) | load at start | load at end | protocol | pollers | posters | max_concurrent | action | full reports every | long poll wait | fleet: attempts, redelivered, refused, poll errors |\n|---:|---|---|---|---|---:|---:|---:|---|---|---|---|\n")
	for _, r := range results {
		wait := r.PollWait
		if wait == 0 {
			wait = 25 * time.Second // the fleet's default before runs recorded it
		}
		posters := r.Posters
		if posters == 0 {
			posters = 256 // the fleet's default before runs recorded it
		}
		protocol := r.Protocol
		if protocol == "" {
			protocol = "-" // not recorded before
		}
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %d | %d | %d | %v | %v | %v | %d, %d, %d, %d |\n", r.Nodes, r.Started.Format("2006-01-02 15:04"), r.Load, r.LoadEnd,
			protocol, r.Pollers, posters, r.MaxConcurrent, r.ActionDuration, ReportEvery(r.Nodes), wait, r.Fleet.Attempts, r.Fleet.Redelivered, r.Fleet.Refused, r.Fleet.PollErrors)
	}
	return sb.String()
}

func nodesOf(results []Result) []int {
	out := make([]int, len(results))
	for i, r := range results {
		out[i] = r.Nodes
	}
	return out
}

// SVG plots each targeted row as its value over its target against the
// number of nodes, both axes logarithmic; the target is the line at 1.
func SVG(results []Result) []byte {
	const (
		width, height          = 830, 440
		left, right, top, bott = 70, 300, 40, 50
	)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
	var rows []Row
	for _, r := range Rows(results) {
		if r.HasTarget {
			rows = append(rows, r)
		}
	}
	nodes := nodesOf(results)
	// axes ranges (log10)
	xmin, xmax := math.Log10(float64(slicesMin(nodes))), math.Log10(float64(slicesMax(nodes)))
	if xmax-xmin < 1 {
		xmin, xmax = xmin-0.5, xmax+0.5
	}
	ymin, ymax := -2.0, 1.0
	for _, r := range rows {
		for _, v := range r.Values {
			if q := v / r.Target; q > 0 && !math.IsNaN(q) {
				ymin = math.Min(ymin, math.Floor(math.Log10(q)))
				ymax = math.Max(ymax, math.Ceil(math.Log10(q)))
			}
		}
	}
	pw, ph := float64(width-left-right), float64(height-top-bott)
	x := func(n int) float64 { return float64(left) + (math.Log10(float64(n))-xmin)/(xmax-xmin)*pw }
	y := func(q float64) float64 { return float64(top) + (ymax-math.Log10(q))/(ymax-ymin)*ph }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&sb, `<text x="%d" y="22" font-size="14" font-weight="bold">fleetwave at scale: each figure over its target (below 1 = met)</text>`+"\n", left)
	for e := ymin; e <= ymax; e++ {
		q := math.Pow(10, e)
		fmt.Fprintf(&sb, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, float64(left)+pw, y(q), y(q), left-6, y(q)+4, q)
	}
	fmt.Fprintf(&sb, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6 4"/><text x="%.1f" y="%.1f">target</text>`+"\n",
		left, float64(left)+pw, y(1), y(1), float64(left)+pw-40, y(1)-4)
	for _, n := range nodes {
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x(n), x(n), top, float64(top)+ph, x(n), float64(top)+ph+18, humanN(n))
	}
	fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">nodes (log)</text>`+"\n", float64(left)+pw/2, height-8)
	fmt.Fprintf(&sb, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">figure / target (log)</text>`+"\n", float64(top)+ph/2)
	fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", left, top, pw, ph)
	for i, r := range rows {
		c := colors[i%len(colors)]
		var pts []string
		for j, v := range r.Values {
			q := v / r.Target
			if q <= 0 || math.IsNaN(q) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(nodes[j]), y(q)))
			fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x(nodes[j]), y(q), c)
		}
		if len(pts) > 1 {
			fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		}
		ly := top + 10 + i*20
		fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s (%s)</text>`+"\n",
			width-right+12, width-right+32, ly, ly, c, width-right+38, ly+4, xmlEscape(shortName(r.Name)), xmlEscape(r.targetText()))
	}
	sb.WriteString("</svg>\n")
	return []byte(sb.String())
}

func shortName(s string) string {
	s, _, _ = strings.Cut(s, " (")
	return strings.TrimSuffix(s, ",")
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func humanN(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func slicesMin(v []int) int {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []int) int {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
