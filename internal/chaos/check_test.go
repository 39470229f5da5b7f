package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// Invariant names, in report order.
const (
	invOneShot    = "one-shot at most once"
	invTerminal   = "every item terminal"
	invCounters   = "counters exact, never negative"
	invConcurrent = "max_concurrent per BRC"
	invFences     = "fences never go back"
	invHumans     = "no human commit lost"
	invNoForce    = "no force push"
	invSecrets    = "no Redis password shown"
)

var invariantNames = []string{invOneShot, invTerminal, invCounters, invConcurrent, invFences, invHumans, invNoForce, invSecrets}

// invariant is the outcome of one check: how many facts it looked at and
// the violations it found.
type invariant struct {
	name       string
	checked    int
	violations []string
	notes      []string
}

func (v *invariant) fail(format string, args ...any) {
	if len(v.violations) < 25 {
		v.violations = append(v.violations, fmt.Sprintf(format, args...))
	}
}

// span is one command's run from its node's ledger.
type span struct {
	node, block, action, attempt string
	start, end                   time.Time
	open                         bool // no end line: the command was killed
	starts                       int  // start lines for this attempt
}

func (s *span) item() string {
	if i := strings.LastIndexByte(s.attempt, '.'); i > 0 {
		return s.attempt[:i]
	}
	return s.attempt
}

func (s *span) rollout() string {
	it := s.item()
	if i := strings.LastIndexByte(it, '.'); i > 0 {
		return it[:i]
	}
	return it
}

// readLedgers parses every node's ledger into spans (one per attempt).
func (c *cluster) readLedgers() ([]*span, []string) {
	var spans []*span
	var bad []string
	for _, n := range c.nodes {
		b, err := os.ReadFile(filepath.Join(c.ledger, n+".log"))
		if err != nil {
			continue // the node never ran anything
		}
		byAttempt := map[string]*span{}
		for i, line := range strings.Split(string(b), "\n") {
			if line == "" {
				continue
			}
			f := strings.Fields(line)
			ns, err := strconv.ParseInt(lastField(f), 10, 64)
			if len(f) != 6 || err != nil || f[1] != n || (f[0] != "start" && f[0] != "end") {
				bad = append(bad, fmt.Sprintf("%s.log:%d: %q", n, i+1, line))
				continue
			}
			at := time.Unix(0, ns)
			s := byAttempt[f[4]]
			switch f[0] {
			case "start":
				if s == nil {
					s = &span{node: f[1], block: f[2], action: f[3], attempt: f[4], start: at, open: true}
					byAttempt[f[4]] = s
					spans = append(spans, s)
				}
				s.starts++
			case "end":
				if s == nil {
					bad = append(bad, fmt.Sprintf("%s.log:%d: end without start: %q", n, i+1, line))
					continue
				}
				s.end, s.open = at, false
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	return spans, bad
}

func lastField(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// agentState is state.json (agent/state.go), read as data.
type agentState struct {
	Version   int                                 `json:"version"`
	Node      string                              `json:"node"`
	MaxFence  int64                               `json:"max_fence"`
	Instances map[string]fleetwave.InstanceStatus `json:"instances"`
	Journal   map[string]*journalEntry            `json:"journal"`
}

type journalEntry struct {
	Seq       int64                    `json:"seq"`
	Status    string                   `json:"status"`
	Fence     int64                    `json:"fence"`
	StartedAt time.Time                `json:"started_at"`
	DoneAt    time.Time                `json:"done_at"`
	Result    *fleetwave.AttemptResult `json:"result"`
}

// refused reports a journal entry of an attempt the agent refused without
// running it (agent.handle).
func (e *journalEntry) refused() bool {
	if e.Status != "done" || e.Result == nil || e.Result.ExitCode != -1 {
		return false
	}
	switch e.Result.Output {
	case "stale fencing token", "attempt is for another node", "invalid block name", "deadline passed before start":
		return true
	}
	return false
}

func (c *cluster) readStates() (map[string]*agentState, error) {
	out := map[string]*agentState{}
	for _, n := range c.nodes {
		b, err := os.ReadFile(filepath.Join(c.agents[n].stateDir, "state.json"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		var st agentState
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("%s: state.json: %w", n, err)
		}
		out[n] = &st
	}
	return out, nil
}

// checkResult is everything the checker found in one run.
type checkResult struct {
	inv    map[string]*invariant
	spans  []*span
	fences map[string]int64 // attempt -> fence it ran with (journals)
}

func (r *checkResult) passed() bool {
	for _, v := range r.inv {
		if len(v.violations) > 0 {
			return false
		}
	}
	return true
}

// check runs every invariant over the settled cluster.
func (c *cluster) check(rollouts []rolloutAnswer, summary fleetwave.Summary) *checkResult {
	r := &checkResult{inv: map[string]*invariant{}, fences: map[string]int64{}}
	for _, n := range invariantNames {
		r.inv[n] = &invariant{name: n}
	}
	spans, bad := c.readLedgers()
	r.spans = spans
	states, err := c.readStates()
	if err != nil {
		r.inv[invOneShot].fail("agent state: %v", err)
		states = map[string]*agentState{}
	}
	for _, st := range states {
		for id, e := range st.Journal {
			if !e.refused() {
				r.fences[id] = e.Fence
			}
		}
	}
	c.checkOneShot(r.inv[invOneShot], spans, states)
	c.checkTerminal(r.inv[invTerminal], rollouts, summary)
	c.checkCounters(r.inv[invCounters], rollouts, summary)
	c.checkStatusInGit(r.inv[invCounters], summary)
	c.checkConcurrency(r.inv[invConcurrent], spans)
	c.checkFences(r.inv[invFences], states)
	c.checkHumans(r.inv[invHumans])
	c.checkNoForce(r.inv[invNoForce])
	c.checkSecrets(r.inv[invSecrets])
	for _, b := range bad {
		r.inv[invConcurrent].notes = append(r.inv[invConcurrent].notes, "unparsable ledger line "+b)
	}
	return r
}

// requestOf names the manual request a one-shot rollout id belongs to
// ("manual-<request>", or with a suffix the engine adds).
func (c *cluster) requestOf(rollout string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.requests {
		if rollout == "manual-"+req || strings.HasPrefix(rollout, "manual-"+req+"-") {
			return req
		}
	}
	return rollout
}

// (1) Every one-shot action ran at most once per node and request: from
// the ledgers (start lines per attempt, attempts per item, items per node
// and request) and from the journals (accepted attempts per item and per
// node and request). Also: no attempt id ran twice, whatever its action
// (the agent's journal promise), and every ledger start is an attempt the
// node's journal accepted.
func (c *cluster) checkOneShot(v *invariant, spans []*span, states map[string]*agentState) {
	perItem := map[string][]string{}
	perRequest := map[string][]string{}
	for _, s := range spans {
		v.checked++
		if s.starts > 1 {
			v.fail("attempt %s (%s %s on %s) ran %d times (ledger)", s.attempt, s.block, s.action, s.node, s.starts)
		}
		if st := states[s.node]; st != nil {
			if e, ok := st.Journal[s.attempt]; !ok {
				if len(st.Journal) < 1024 { // the journal keeps the newest 1024
					v.fail("attempt %s ran on %s (ledger) but is not in its journal", s.attempt, s.node)
				}
			} else if e.refused() {
				v.fail("attempt %s ran on %s (ledger) but its journal says refused: %s", s.attempt, s.node, e.Result.Output)
			}
		}
		if s.action != "migrate" {
			continue
		}
		perItem[s.node+" "+s.item()] = append(perItem[s.node+" "+s.item()], s.attempt)
		key := s.node + " " + s.block + " " + s.action + " request " + c.requestOf(s.rollout())
		perRequest[key] = append(perRequest[key], s.attempt)
	}
	for k, atts := range perItem {
		if len(atts) > 1 {
			v.fail("one-shot item %s ran %d attempts: %v (ledger)", k, len(atts), atts)
		}
	}
	for k, atts := range perRequest {
		if len(atts) > 1 {
			v.fail("one-shot %s ran %d times: %v (ledger)", k, len(atts), atts)
		}
	}
	for node, st := range states {
		accepted := map[string][]string{}
		for id, e := range st.Journal {
			if e.refused() || !strings.HasPrefix(id, "manual-") {
				continue
			}
			v.checked++
			s := &span{attempt: id}
			key := c.requestOf(s.rollout())
			accepted[key] = append(accepted[key], id)
		}
		for req, ids := range accepted {
			if len(ids) > 1 {
				sort.Strings(ids)
				v.fail("%s accepted %d attempts of one-shot request %s: %v (journal)", node, len(ids), req, ids)
			}
		}
	}
}

// (2) Every item of every rollout is terminal, every rollout finished,
// and every manual request pushed has an outcome: a finished rollout the
// hub still has, or a refusal.
func (c *cluster) checkTerminal(v *invariant, rollouts []rolloutAnswer, summary fleetwave.Summary) {
	have := map[string]fleetwave.RolloutStatus{}
	for _, ra := range rollouts {
		have[ra.Rollout.ID] = ra.Rollout.Status
	}
	c.mu.Lock()
	requests := append([]string(nil), c.requests...)
	c.mu.Unlock()
	for _, req := range requests {
		v.checked++
		st, ok := summary.Requests[req]
		switch {
		case !ok:
			v.fail("request %s: no outcome in the summary", req)
		case st.State == fleetwave.RequestRefused:
			v.notes = append(v.notes, fmt.Sprintf("request %s refused: %s %s", req, st.Code, st.Message))
		case st.Rollout == "":
			v.fail("request %s is %s without a rollout", req, st.State)
		case !fleetwave.RolloutStatus(st.State).Finished():
			if _, ok := have[st.Rollout]; !ok {
				v.fail("request %s is %q forever: its rollout %s is gone from the hub (Redis lost it), nothing runs its remaining items and nothing says so", req, st.State, st.Rollout)
			} else {
				v.fail("request %s is %q (rollout %s is %s)", req, st.State, st.Rollout, have[st.Rollout])
			}
		}
	}
	for _, ra := range rollouts {
		if !ra.Rollout.Status.Finished() {
			v.fail("rollout %s is %s (%s)", ra.Rollout.ID, ra.Rollout.Status, ra.Rollout.Reason)
		}
		for _, it := range ra.Items {
			v.checked++
			if !it.Status.Terminal() {
				v.fail("item %s (%s %s on %s) is %s (%s)", it.ID, it.Block, it.Action, it.Node, it.Status, it.Reason)
			}
			if it.Status == fleetwave.ItemFailed || it.Status == fleetwave.ItemBlocked {
				v.notes = append(v.notes, fmt.Sprintf("item %s %s (%s, %s)", it.ID, it.Status, it.Reason, it.LastClass))
			}
		}
	}
}

// (3) Counters: each rollout's counters are its items' statuses, bucket by
// bucket; the fleet history is the sum of the rollouts'; none negative, and
// Total the sum of the buckets in every sample taken during the run; and
// the status committed to Git ends up showing the same counters
// (checkStatusInGit).
func (c *cluster) checkCounters(v *invariant, rollouts []rolloutAnswer, summary fleetwave.Summary) {
	var sum fleetwave.Counters
	for _, ra := range rollouts {
		v.checked++
		var want fleetwave.Counters
		for _, it := range ra.Items {
			want.Add(it.Status, 1)
		}
		if want != ra.Rollout.Counters {
			v.fail("rollout %s: counters %+v, its items say %+v", ra.Rollout.ID, ra.Rollout.Counters, want)
		}
		for _, p := range counterProblems("rollout "+ra.Rollout.ID, ra.Rollout.Counters) {
			v.fail("%s", p)
		}
		sum = sum.Plus(ra.Rollout.Counters)
	}
	v.checked++
	if summary.History != sum {
		v.fail("fleet history %+v != the sum of the rollouts' counters %+v", summary.History, sum)
	}
	c.mu.Lock()
	v.checked += c.samples.counterSamples
	for _, p := range c.samples.counterViolations {
		v.fail("sampled: %s", p)
	}
	c.mu.Unlock()
}

// (4) The commands of a BRC's block never overlapped more than its
// max_concurrent, from the ledgers' spans (a command killed with its agent
// ends when the agent was killed). While commands of a first version with
// a larger max_concurrent (firstMax) run, that larger bound applies.
func (c *cluster) checkConcurrency(v *invariant, spans []*span) {
	limitOf := func(s *span) int {
		if s.rollout() == s.block+"-g1" {
			return c.limit(s.block, 1)
		}
		return c.limit(s.block, 2)
	}
	type ev struct {
		at    time.Time
		delta int
		s     *span
	}
	evs := map[string][]ev{}
	now := time.Now()
	for _, s := range spans {
		end := s.end
		if s.open {
			end = now
			c.mu.Lock()
			for _, k := range c.kills[s.node] {
				if k.After(s.start) {
					end = k
					break
				}
			}
			c.mu.Unlock()
			if end == now {
				// not killed by the suite: the agent killed it at its
				// timeout (its process group, after a grace period)
				timeout := actionTimeout
				if s.action == "migrate" {
					timeout = migrateTimeout
				}
				if cut := s.start.Add(timeout + killGrace); cut.Before(end) {
					end = cut
				}
				v.notes = append(v.notes, fmt.Sprintf("attempt %s on %s has no end and its agent was not killed (cut at its timeout)", s.attempt, s.node))
			}
		}
		evs[s.block] = append(evs[s.block], ev{s.start, 1, s}, ev{end, -1, s})
	}
	for block, list := range evs {
		sort.Slice(list, func(i, j int) bool {
			if !list[i].at.Equal(list[j].at) {
				return list[i].at.Before(list[j].at)
			}
			return list[i].delta < list[j].delta // an end before a start at the same instant
		})
		cur, peak := 0, 0
		running := map[*span]bool{}
		for _, e := range list {
			v.checked++
			cur += e.delta
			if e.delta > 0 {
				running[e.s] = true
			} else {
				delete(running, e.s)
			}
			if cur > peak {
				peak = cur
			}
			limit := c.limit(block, 2)
			for s := range running {
				limit = max(limit, limitOf(s))
			}
			if cur > limit {
				var ids []string
				for s := range running {
					ids = append(ids, s.attempt)
				}
				sort.Strings(ids)
				v.fail("BRC %s: %d commands at once at %s (max_concurrent %d): %v", block, cur, e.at.Format("15:04:05.000"), limit, ids)
			}
		}
		v.notes = append(v.notes, fmt.Sprintf("BRC %s: at most %d commands at once (max_concurrent %d, first version %d)", block, peak, c.limit(block, 2), c.limit(block, 1)))
	}
}

// (5) Fences never go back: the Fleetwave-Fence trailers of the status
// commits, in first-parent order on the status branch, and each agent's
// accepted attempts in journal order.
func (c *cluster) checkFences(v *invariant, states map[string]*agentState) {
	out, err := runGit("", "--git-dir", c.bare, "log", "--first-parent", "--reverse",
		"--format=%H %(trailers:key=Fleetwave-Fence,valueonly,separator=%x2C)", "refs/heads/"+c.statusRef())
	if err != nil {
		v.fail("status history: %v", err)
	}
	var last int64
	lastCommit := ""
	for _, line := range strings.Split(out, "\n") {
		hash, val, _ := strings.Cut(strings.TrimSpace(line), " ")
		if val == "" {
			continue
		}
		f, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			v.fail("status commit %s: fence trailer %q", hash, val)
			continue
		}
		v.checked++
		if f < last {
			v.fail("status commit %.10s has fence %d after %.10s with fence %d", hash, f, lastCommit, last)
		}
		if f >= last {
			last, lastCommit = f, hash
		}
	}
	for node, st := range states {
		type acc struct {
			id string
			e  *journalEntry
		}
		var list []acc
		for id, e := range st.Journal {
			if !e.refused() {
				list = append(list, acc{id, e})
			}
		}
		sort.Slice(list, func(i, j int) bool { return list[i].e.Seq < list[j].e.Seq })
		var prev int64
		prevID := ""
		for _, a := range list {
			v.checked++
			if a.e.Fence < prev {
				v.fail("%s ran attempt %s with fence %d after %s with fence %d", node, a.id, a.e.Fence, prevID, prev)
			}
			if a.e.Fence >= prev {
				prev, prevID = a.e.Fence, a.id
			}
			if a.e.Fence > st.MaxFence {
				v.fail("%s: attempt %s fence %d above the journal's max_fence %d", node, a.id, a.e.Fence, st.MaxFence)
			}
		}
	}
}

// (6) Every human commit pushed is an ancestor of main's final tip, and
// the remote still takes pushes: no ref lock was left behind (a git
// process killed while it updated a branch leaves <ref>.lock, and every
// later push to that branch fails, people's included).
func (c *cluster) checkHumans(v *invariant) {
	locks, _ := filepath.Glob(filepath.Join(c.bare, "refs", "heads", "*.lock"))
	if _, err := os.Stat(filepath.Join(c.bare, "packed-refs.lock")); err == nil {
		locks = append(locks, filepath.Join(c.bare, "packed-refs.lock"))
	}
	v.checked++
	for _, l := range locks {
		fi, err := os.Stat(l)
		if err == nil && time.Since(fi.ModTime()) > 5*time.Second {
			v.fail("stale %s in the remote since %s: every push to it fails (cannot lock ref)", strings.TrimPrefix(l, c.bare+"/"), fi.ModTime().Format("15:04:05.000"))
		}
	}
	c.mu.Lock()
	hashes := append([]string(nil), c.humanHashes...)
	c.mu.Unlock()
	for _, h := range hashes {
		v.checked++
		if _, err := runGit("", "--git-dir", c.bare, "merge-base", "--is-ancestor", h, "refs/heads/main"); err != nil {
			v.fail("human commit %s is not in main's history", h)
		}
	}
}

// (7) No force push: every tip sampled during the run is an ancestor of
// the next one, and every update in the remote's reflog moved its ref
// from an ancestor (old -> new).
//
// git logs an update before it renames the ref's lock into place: a push
// whose rename failed (the remote moved away under it) leaves a logged
// update the ref never took, and the next update starts from the value
// before it. Such an entry is noted, not counted as the ref's tip.
func (c *cluster) checkNoForce(v *invariant) {
	refs := c.refs()
	// the tips first, the graph after: the hubs may still commit status,
	// and the graph must hold every tip read
	sampled := map[string][]string{}
	updates := map[string][][2]string{}
	for _, ref := range refs {
		c.mu.Lock()
		sampled[ref] = append([]string(nil), c.tips[ref]...)
		c.mu.Unlock()
		raw, err := os.ReadFile(filepath.Join(c.bare, "logs", "refs", "heads", filepath.FromSlash(ref)))
		if err != nil {
			v.fail("reflog of %s: %v", ref, err)
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				updates[ref] = append(updates[ref], [2]string{f[0], f[1]})
			}
		}
	}
	graph, err := commitGraph(c.bare)
	if err != nil {
		v.fail("commit graph: %v", err)
		return
	}
	const zero = "0000000000000000000000000000000000000000"
	for _, ref := range refs {
		list := sampled[ref]
		for i := 1; i < len(list); i++ {
			v.checked++
			if list[i] != list[i-1] && !graph.isAncestor(list[i-1], list[i]) {
				v.fail("%s: sampled tip %.10s was replaced by %.10s, not a descendant (force push)", ref, list[i-1], list[i])
			}
		}
		ups := updates[ref]
		for i, u := range ups {
			v.checked++
			if u[0] != zero && u[0] != u[1] && !graph.isAncestor(u[0], u[1]) {
				v.fail("%s: the reflog moved %.10s to %.10s, not a descendant (force push)", ref, u[0], u[1])
			}
			if i+1 < len(ups) && ups[i+1][0] != u[1] {
				v.notes = append(v.notes, fmt.Sprintf("%s: update %.10s -> %.10s logged but not taken (the next starts from %.10s)", ref, u[0], u[1], ups[i+1][0]))
			}
		}
	}
}

type graph map[string][]string

func commitGraph(bare string) (graph, error) {
	out, err := runGit("", "--git-dir", bare, "rev-list", "--parents", "--all", "--reflog")
	if err != nil {
		return nil, err
	}
	g := graph{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g, nil
}

func (g graph) isAncestor(a, b string) bool {
	seen := map[string]bool{}
	stack := []string{b}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == a {
			return true
		}
		if seen[x] {
			continue
		}
		seen[x] = true
		stack = append(stack, g[x]...)
	}
	return false
}

// recoveries fills in how long the system took to make progress again
// after each fault, from the ledgers and journals:
//   - a fault of the leader, of Redis or a second hub id: the first command
//     started after the injection under a fence above the lease's fence at
//     injection (a leader, new or confirmed after the fault, dispatched);
//   - an agent killed: the first command of the block it was running
//     (its lost attempt's instance) started after its restart, else the
//     first command its node started (n/a when it had no more work);
//   - the remote away: the first status commit after it is back (measured
//     as it happened);
//   - Redis answering late: the first command started after it answers in
//     time again.
func (c *cluster) recoveries(r *checkResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.faults {
		if f.kind == faultRemoteDown {
			continue
		}
		if f.kind == faultAgentKill {
			// killed mid-action: recovered when that block instance runs
			// again (its lost attempt resolved); else when the node does
			f.block = ""
			for _, s := range r.spans {
				if s.node == f.node && s.open && s.start.Before(f.at) && !s.start.Before(f.at.Add(-actionTimeout-killGrace)) {
					f.block = s.block
				}
			}
			if !c.hasSpanAfter(r.spans, f) {
				f.block = ""
			}
		}
		for _, s := range r.spans {
			if !s.start.After(f.at) {
				continue
			}
			switch f.kind {
			case faultAgentKill:
				if s.node != f.node || !s.start.After(f.restored) || (f.block != "" && s.block != f.block) {
					continue
				}
			case faultDupHub:
			case faultRedisSlow:
				if !s.start.After(f.restored) {
					continue
				}
			default:
				if r.fences[s.attempt] <= f.fenceBefore {
					continue
				}
			}
			f.recovery, f.recovered = s.start.Sub(f.at), true
			break
		}
	}
}

// hasSpanAfter reports whether f's node ran f's block again after its
// restart.
func (c *cluster) hasSpanAfter(spans []*span, f *faultRec) bool {
	for _, s := range spans {
		if s.node == f.node && s.block == f.block && s.start.After(f.restored) {
			return true
		}
	}
	return false
}

// statusCounters reads the counters status/summary.yaml holds at the tip
// of the status branch.
func (c *cluster) statusCounters() (counters, history fleetwave.Counters, err error) {
	out, err := runGit("", "--git-dir", c.bare, "show", "refs/heads/"+c.statusRef()+":status/summary.yaml")
	if err != nil {
		return counters, history, err
	}
	var doc struct {
		Counters fleetwave.Counters `yaml:"counters"`
		History  fleetwave.Counters `yaml:"history"`
	}
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		return counters, history, err
	}
	return doc.Counters, doc.History, nil
}

// checkStatusInGit waits (generously) until the status committed to Git
// shows the counters the API shows: what reviewers read is what happened.
func (c *cluster) checkStatusInGit(v *invariant, summary fleetwave.Summary) {
	v.checked++
	deadline := time.Now().Add(45 * time.Second)
	var gotC, gotH fleetwave.Counters
	var err error
	for {
		gotC, gotH, err = c.statusCounters()
		if err == nil && gotC == summary.Counters && gotH == summary.History {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		v.fail("status/summary.yaml on %s: %v", c.statusRef(), err)
		return
	}
	v.fail("status/summary.yaml on %s shows counters %+v history %+v; the API shows %+v and %+v", c.statusRef(), gotC, gotH, summary.Counters, summary.History)
}
