package hub_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/testutil/browser"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// consoleWait bounds each wait on the console's DOM: the machines that run
// these tests are shared and slow, and a wait ends as soon as its condition
// holds.
const consoleWait = 60 * time.Second

// consoleTab drives one tab of the console.
type consoleTab struct {
	t    *testing.T
	ctx  context.Context
	dir  string // screenshots
	name string // who is signed in, for the screenshots' names
}

// js quotes a Go string as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func q(sel string) string { return "document.querySelector(" + js(sel) + ")" }

// textOf is a JavaScript expression: the trimmed text of sel, "" when absent.
func textOf(sel string) string {
	return "((" + q(sel) + " || {}).textContent || '').trim()"
}

// visible is a JavaScript expression: sel exists and is rendered.
func visible(sel string) string {
	return "(() => { const e = " + q(sel) + "; return !!e && e.getClientRects().length > 0; })()"
}

func (c *consoleTab) wait(what, expr string) {
	c.t.Helper()
	browser.WaitJS[bool](c.t, c.ctx, consoleWait, what, "!!("+expr+")")
}

func (c *consoleTab) click(sel string) {
	c.t.Helper()
	browser.Do(c.t, c.ctx, consoleWait, "click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

func (c *consoleTab) typeInto(sel, text string) {
	c.t.Helper()
	browser.Do(c.t, c.ctx, consoleWait, "type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// set sets a field's value as typing would, with its input and change events.
func (c *consoleTab) set(sel, value string) {
	c.t.Helper()
	c.wait(sel+" exists", q(sel))
	browser.Eval[bool](c.t, c.ctx, "(() => { const e = "+q(sel)+"; e.value = "+js(value)+
		"; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()")
}

func (c *consoleTab) text(sel string) string {
	c.t.Helper()
	return browser.Eval[string](c.t, c.ctx, textOf(sel))
}

// open routes the page to hash, as a link would.
func (c *consoleTab) open(hash string) {
	c.t.Helper()
	browser.Eval[bool](c.t, c.ctx, "(() => { location.hash = "+js(hash)+"; return true; })()")
}

func (c *consoleTab) shot(page string) {
	c.t.Helper()
	if p := browser.Shot(c.t, c.ctx, c.dir, c.name+"-"+page); p != "" {
		c.t.Logf("screenshot %s", p)
	}
}

// signIn opens the console in a new tab with a #token= link.
func signIn(t *testing.T, root context.Context, base, dir, token, name, role string) *consoleTab {
	t.Helper()
	c := &consoleTab{t: t, ctx: browser.NewTab(t, root), dir: dir, name: name}
	browser.Do(t, c.ctx, consoleWait, "open the console", chromedp.Navigate(base+"/#token="+token))
	c.wait(name+" signed in", textOf("#whoami-name")+" === "+js(name)+" && "+textOf("#whoami-role")+" === "+js(role))
	return c
}

// consoleFleet is writeFleet with a fourth node, n4, bound to a
// maintenance window that opens on the 15th of the month six months ahead
// (so it is closed now), and the app BRC over all four nodes. It returns
// the files and the window's next opening.
func consoleFleet(now time.Time) (map[string]string, time.Time) {
	now = now.UTC()
	month := time.Month((int(now.Month())+5)%12 + 1)
	opens := time.Date(now.Year(), month, 15, 0, 0, 0, 0, time.UTC)
	if !opens.After(now) {
		opens = opens.AddDate(1, 0, 0)
	}
	files := writeFleet()
	files["fleetwave.cue"] = fmt.Sprintf("kind: \"config\"\nname: \"fleetwave\"\nmax_concurrent: 5\n"+
		"maintenance_windows: {\n\t\"far\": {cron: \"0 0 15 %d *\", duration: \"1h\", timezone: \"UTC\"}\n}\n", int(month))
	files["nodes/n4.cue"] = "kind: \"node\"\nname: \"n4\"\nlabels: { tier: \"db\" }\nmaintenance_windows: [\"far\"]\n"
	files["brc/app.cue"] = "kind: \"trigger\"\nname: \"app\"\nblock_name: \"app\"\ntarget_version: \"1.0\"\nnodes: [\"n1\", \"n2\", \"n3\", \"n4\"]\n"
	return files, opens
}

var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// TestConsoleDrivesTheFleet: the operator's console in a real browser
// against a real hub, Redis, git remote and agents. An operator signs in,
// filters the rollouts, drills into one and sees why an item does not
// progress (a closed maintenance window, with its next opening), pauses
// and resumes it, edits a node's labels (refused in the browser, refused
// by the hub with its details, then committed with the operator as the
// actor), drains a node, previews and submits a rollout by selector whose
// item on the draining node waits with node_draining, and watches the
// counters change live; an admin rejects an approval request, the
// operator requests it again from the rejected one; a viewer sees no
// write button.
func TestConsoleDrivesTheFleet(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	browser.Require(t)
	files, opens := consoleFleet(time.Now())
	remote := gittest.NewRemote(t, files)
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3", "n4"}, nil, writeIdentities)
	addr := f.hub.Addr()
	base := "http://" + addr
	eng := f.hub.Engine()
	ctx := context.Background()
	dir := browser.ArtifactsDir(t)
	// the steps build on each other: after a failure, the rest is skipped
	failed := false
	run := func(name string, step func(t *testing.T)) {
		if !failed && !t.Run(name, step) {
			failed = true
		}
	}

	run("whoami answers the token's identity, 401 without one", func(t *testing.T) {
		for _, tc := range []struct {
			token string
			want  int
			body  string
		}{
			{"", http.StatusUnauthorized, `"unauthorized"`},
			{"tok-nobody", http.StatusUnauthorized, `"unauthorized"`},
			{"tok-vic", http.StatusOK, `{"name":"vic","role":"viewer"}`},
			{"tok-bob", http.StatusOK, `{"name":"bob","role":"operator"}`},
			{"tok-alice", http.StatusOK, `{"name":"alice","role":"admin"}`},
		} {
			if st, b := apiCall(t, addr, "GET", "/api/v1/whoami", tc.token, ""); st != tc.want || !strings.Contains(b, tc.body) {
				t.Fatalf("whoami with %q: %d %s, want %d %s", tc.token, st, b, tc.want, tc.body)
			}
		}
	})

	// app-g1: n1..n3 install, n4 waits for its window
	var lane string
	waitUntil(t, "app-g1 runs on n1..n3 while n4 waits for its window", func() bool {
		_, items, err := eng.Rollout(ctx, "app-g1")
		if err != nil || len(items) != 4 {
			return false
		}
		for _, it := range items {
			lane = it.ManagedBy
			if it.Node == "n4" && (it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonMaintenanceWindow || !it.RetryAfter.Equal(opens)) {
				return false
			}
			if it.Node != "n4" && it.Status != fleetwave.ItemCompleted {
				return false
			}
		}
		return true
	})

	root := browser.Start(t)
	op := &consoleTab{t: t, ctx: browser.NewTab(t, root), dir: dir, name: "operator"}

	run("sign in with the form; the overview counts the fleet", func(t *testing.T) {
		op.t = t
		browser.Do(t, op.ctx, consoleWait, "open the console", chromedp.Navigate(base+"/"))
		op.wait("the sign-in form", visible("#login")+" && "+textOf("#conn")+".includes('sign in with an API token')")
		if got := op.text("#rollouts-body"); strings.Contains(got, "app-g1") {
			t.Fatalf("the console shows rollouts without a token: %s", got)
		}
		op.shot("sign-in")
		op.typeInto("#token", "tok-bob")
		op.click("#signin")
		op.wait("bob signed in as operator", textOf("#whoami-name")+" === 'bob' && "+textOf("#whoami-role")+" === 'operator'")
		op.wait("the counters", textOf("#count-total")+" === '4' && "+textOf("#count-done")+" === '3' && "+
			textOf("#count-pending")+" === '1' && "+textOf("#count-failed")+" === '0' && "+textOf("#conn")+" === 'live'")
		op.wait("the rollout row", q(`#rollouts-body tr[data-rollout="app-g1"] a[href="#/rollouts/app-g1"]`))
		op.wait("the last sync", textOf("#sync-result")+" === 'ok'")
		op.shot("overview")
	})

	run("the rollouts filter by state, BRC and lane", func(t *testing.T) {
		op.t = t
		row := q(`#rollouts-body tr[data-rollout="app-g1"]`)
		for _, tc := range []struct {
			field, value string
			shown        bool
		}{
			{"#filter-state", "completed", false},
			{"#filter-state", "active", true},
			{"#filter-brc", "nope", false},
			{"#filter-brc", "app", true},
			{"#filter-lane", "no-such-lane", false},
			{"#filter-lane", lane, true},
		} {
			op.set(tc.field, tc.value)
			if tc.shown {
				op.wait(tc.field+"="+tc.value+" shows app-g1", row)
			} else {
				op.wait(tc.field+"="+tc.value+" hides app-g1", "!"+row+" && "+textOf("#rollouts-body")+" === 'no rollouts'")
			}
		}
		op.shot("overview-filtered")
		for _, field := range []string{"#filter-state", "#filter-brc", "#filter-lane"} {
			op.set(field, "")
		}
		op.wait("the unfiltered list", row)
	})

	run("a rollout's page says why an item does not progress", func(t *testing.T) {
		op.t = t
		op.click(`a[href="#/rollouts/app-g1"]`)
		n4 := `#ro-lanes tr[data-node="n4"]`
		next := iso(opens)
		op.wait("n4 waits for its window", textOf(n4+" td.reason")+" === 'maintenance_window' && "+
			textOf(n4+" td.next")+".startsWith("+js(next)+") && "+textOf(n4+" .state")+" === 'pending'")
		op.wait("the summary of why", textOf("#ro-why")+".includes("+js("maintenance_window: 1 item (n4); next opening "+next)+")")
		op.wait("n1 done with one attempt", textOf(`#ro-lanes tr[data-node="n1"] .state`)+" === 'completed' && "+
			textOf(`#ro-lanes tr[data-node="n1"] td.attempts`)+".startsWith('1') && "+textOf(`#ro-lanes tr[data-node="n1"] td.action`)+" === 'install'")
		op.wait("the lane", q(`#ro-lanes section.lane[data-lane=`+js(lane)+`]`))
		op.shot("rollout")
	})

	run("a rollout's items page by page", func(t *testing.T) {
		op.t = t
		rows := "document.querySelectorAll('#ro-lanes tr[data-item]').length"
		op.open("#/rollouts/app-g1?limit=3")
		op.wait("the first page of 3 items, with more", rows+" === 3 && "+visible("#ro-more")+" && "+
			textOf("#ro-shown")+" === '3 of 4 items shown' && "+textOf("#ro-why")+".includes('among the 3 shown of 4') && "+
			textOf("#ro-counters")+".startsWith('total 4 ')")
		op.shot("rollout-first-page")
		op.click("#ro-more")
		op.wait("every item, no more", rows+" === 4 && !"+visible("#ro-more")+" && "+textOf("#ro-shown")+" === '4 items' && "+
			"!"+textOf("#ro-why")+".includes('among the')")
		op.open("#/rollouts/app-g1")
		op.wait("the default page holds the 4 items", rows+" === 4 && !"+visible("#ro-more"))
		// a cursor that is not an item of the rollout
		for _, c := range []string{"app-g1.5", "db-g1.1"} {
			path := "/api/v1/rollouts/app-g1?cursor=" + base64.RawURLEncoding.EncodeToString([]byte(c))
			if st, b := apiCall(t, addr, "GET", path, "tok-vic", ""); st != http.StatusBadRequest || !strings.Contains(b, `"invalid_query"`) || !strings.Contains(b, `"field":"cursor"`) {
				t.Fatalf("GET with the cursor of %s: %d %s, want 400 invalid_query naming the cursor", c, st, b)
			}
		}
	})

	run("pause and resume, with the actor", func(t *testing.T) {
		op.t = t
		op.click("#ro-pause")
		op.wait("paused by bob", textOf("#ro-status")+" === 'paused' && "+textOf("#ro-action-result")+".startsWith('paused by bob')")
		if r, _, err := eng.Rollout(ctx, "app-g1"); err != nil || r.Status != fleetwave.RolloutPaused {
			t.Fatalf("app-g1 after pause: %+v %v", r, err)
		}
		op.shot("rollout-paused")
		op.wait("resume enabled", "!"+q("#ro-resume")+".disabled && "+q("#ro-pause")+".disabled")
		op.click("#ro-resume")
		op.wait("resumed by bob", textOf("#ro-status")+" === 'active' && "+textOf("#ro-action-result")+".startsWith('resumed by bob')")
		h, err := eng.RolloutHistory(ctx, "app-g1")
		if err != nil || len(h) != 2 || h[0].Action != "pause" || h[0].Actor != "bob" || h[1].Action != "resume" || h[1].Actor != "bob" {
			t.Fatalf("history of app-g1: %+v %v", h, err)
		}
	})

	run("nodes: the list, a node, its labels edited", func(t *testing.T) {
		op.t = t
		op.click(`nav a[data-nav="nodes"]`)
		op.wait("the nodes", q(`#nodes-body tr[data-node="n4"]`)+" && "+textOf(`#nodes-body tr[data-node="n2"]`)+".includes('high')")
		op.shot("nodes")
		op.click(`#nodes-body a[href="#/nodes/n1"]`)
		op.wait("n1's page", textOf("#node-id")+" === 'n1' && "+textOf("#node-crit")+" === 'low' && "+
			"document.querySelectorAll('#labels-rows tr').length === 2 && "+textOf("#node-labels")+".includes('rack=r1')")
		op.wait("n1's report and instance", textOf("#node-report")+" !== '-' && "+textOf("#node-instances")+".includes('app')")
		op.shot("node")
		before := pathCommits(t, remote, "nodes/n1.cue")

		// refused in the browser: a value over 63 characters
		op.click("#labels-add")
		op.typeInto("#labels-rows tr:last-child input.label-key", "zone")
		op.set("#labels-rows tr:last-child input.label-value", strings.Repeat("x", 64))
		op.click("#labels-save")
		op.wait("the browser's refusal", textOf("#labels-errors")+".includes('value of \"zone\": 64 characters; 1-63')")
		// refused by the hub: a key with a space, with the hub's details
		op.set("#labels-rows tr:last-child input.label-key", "Bad Key")
		op.set("#labels-rows tr:last-child input.label-value", "a")
		op.click("#labels-save")
		op.wait("the hub's refusal", textOf("#labels-errors")+".includes('invalid_labels') && "+
			textOf("#labels-errors")+".includes('Bad Key: invalid label key')")
		op.shot("node-labels-refused")
		if after := pathCommits(t, remote, "nodes/n1.cue"); after != before {
			t.Fatalf("refused label sets committed: %d commits of nodes/n1.cue, want %d", after, before)
		}
		// accepted: committed with bob as the actor
		op.set("#labels-rows tr:last-child input.label-key", "zone")
		op.set("#labels-reason", "moved to zone a")
		op.click("#labels-save")
		op.wait("the commit", visible("#node-write-result")+" && "+textOf("#node-write-what")+" === 'labels of n1 by bob'")
		commit := op.text("#node-write-commit")
		if !fullCommit.MatchString(commit) {
			t.Fatalf("the console shows commit %q", commit)
		}
		msg := commitText(t, remote, commit)
		for _, want := range []string{"Fleetwave-Actor: bob", "Fleetwave-Reason: moved to zone a", "nodes: labels of n1 (by bob)"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("commit %s lacks %q:\n%s", commit, want, msg)
			}
		}
		if doc, _ := gittest.ReadFile(t, remote, "nodes/n1.cue"); !strings.Contains(doc, "zone") || !strings.Contains(doc, "// n1: the first web node") {
			t.Fatalf("nodes/n1.cue after the edit:\n%s", doc)
		}
		op.wait("the new labels", textOf("#node-labels")+".includes('zone=a') && document.querySelectorAll('#labels-rows tr').length === 3")
		op.shot("node-labels-saved")
	})

	run("drain a node from its page", func(t *testing.T) {
		op.t = t
		op.open("#/nodes/n3")
		op.wait("n3's page", textOf("#node-id")+" === 'n3' && !"+q("#node-drain-btn")+".disabled")
		op.set("#drain-reason", "disk swap")
		op.click("#node-drain-btn")
		op.wait("the drain commit", textOf("#node-write-what")+" === 'drain n3 by bob' && "+visible("#node-drain"))
		commit := op.text("#node-write-commit")
		if msg := commitText(t, remote, commit); !strings.Contains(msg, "Fleetwave-Actor: bob") || !strings.Contains(msg, "Fleetwave-Reason: disk swap") {
			t.Fatalf("drain commit %s:\n%s", commit, msg)
		}
		waitNode(t, f, "n3", func(n *fleetwave.Node) bool { return n.Drain })
		op.shot("node-draining")
	})

	run("a rollout by selector: preview, submit, its item on the draining node waits", func(t *testing.T) {
		op.t = t
		op.click(`nav a[data-nav="new"]`)
		op.wait("the form", visible("#new-form"))
		op.set("#new-brc", "app")
		op.set("#new-action", "restart")
		op.set("#new-selector", "tier=db")
		op.set("#new-name", "restart-db")
		op.set("#new-reason", "stuck workers")
		op.wait("no submit before a preview", q("#new-submit")+".disabled")
		op.click("#new-preview-btn")
		op.wait("the preview", visible("#new-preview")+" && "+textOf("#new-preview-targets")+" === 'n3, n4' && "+
			textOf("#new-preview-rollout")+" === 'manual-restart-db' && "+q(`#new-preview-items tr[data-node="n3"]`)+" && !"+q("#new-submit")+".disabled")
		op.shot("new-preview")
		if n := pathCommits(t, remote, "rollouts"); n != 0 {
			t.Fatalf("the preview wrote %d commits under rollouts/", n)
		}
		// a changed form needs a new preview
		op.set("#new-selector", "tier=web")
		op.wait("submit disabled by a change", q("#new-submit")+".disabled")
		op.set("#new-selector", "tier=db")
		op.wait("submit enabled again", "!"+q("#new-submit")+".disabled")
		op.click("#new-submit")
		op.wait("the request's commit", visible("#new-result")+" && "+textOf("#new-rollout-link")+" === 'manual-restart-db' && "+textOf("#new-targets")+" === 'n3, n4'")
		commit := op.text("#new-commit")
		if !fullCommit.MatchString(commit) {
			t.Fatalf("the console shows commit %q", commit)
		}
		if msg := commitText(t, remote, commit); !strings.Contains(msg, "Fleetwave-Actor: bob") || !strings.Contains(msg, "Fleetwave-Reason: stuck workers") {
			t.Fatalf("request commit %s:\n%s", commit, msg)
		}
		if doc, ok := gittest.ReadFile(t, remote, "rollouts/restart-db.yaml"); !ok || !strings.Contains(doc, "- n3") || !strings.Contains(doc, "action_name: restart") {
			t.Fatalf("rollouts/restart-db.yaml (found %v):\n%s", ok, doc)
		}
		op.shot("new-submitted")
		op.click("#new-rollout-link")
		n3 := `#ro-lanes tr[data-node="n3"]`
		op.wait("n3's item waits, draining", textOf("#ro-id")+" === 'manual-restart-db' && "+textOf(n3+" td.reason")+" === 'node_draining' && "+
			textOf(n3+" .state")+" === 'pending' && "+textOf("#ro-why")+".includes('node_draining: 1 item (n3)')")
		op.shot("rollout-draining")
	})

	run("the counters change live", func(t *testing.T) {
		op.t = t
		op.click(`nav a[data-nav="overview"]`)
		op.wait("the manual rollout counted", q(`#rollouts-body tr[data-rollout="manual-restart-db"]`)+" && "+textOf("#count-total")+" === '6'")
		done := op.text("#count-done")
		browser.Eval[bool](t, op.ctx, "(() => { window.fleetwaveSamePage = true; return true; })()")
		// another operator undrains n3: its restart runs
		if st, b := apiCall(t, addr, "POST", "/api/v1/nodes/n3/undrain", "tok-alice", ""); st != http.StatusOK {
			t.Fatalf("undrain: %d %s", st, b)
		}
		op.wait("the done counter moves without a reload", "window.fleetwaveSamePage === true && "+textOf("#count-done")+" !== "+js(done)+" && "+
			textOf(`#rollouts-body tr[data-rollout="manual-restart-db"]`)+" !== ''")
		if got := appRuns(f, "n3"); !strings.Contains(got, "restart") {
			t.Fatalf("n3 ran %q", got)
		}
		op.shot("overview-live")
	})

	run("approvals: submit, an admin rejects, request again from the rejected one", func(t *testing.T) {
		op.t = t
		op.click(`nav a[data-nav="approvals"]`)
		op.wait("the approval form", visible("#approval-form"))
		op.set("#ap-id", "ui-req")
		op.set("#ap-brc", "app")
		op.set("#ap-version", "1.0")
		op.set("#ap-nodes", "n1")
		op.click("#ap-submit")
		row := `#approvals-list tr[data-approval="ui-req"]`
		op.wait("the pending request", textOf("#approvals-result")+".startsWith('submitted ui-req') && "+textOf(row+" .state")+" === 'pending'")
		if got := op.text(row + " .row-actions"); got != "" {
			t.Fatalf("an operator is offered %q on a pending request", got)
		}
		admin := signIn(t, root, base, dir, "tok-alice", "alice", "admin")
		admin.open("#/approvals")
		admin.wait("approve and reject offered", q(row+` button[data-decision="approve"]`)+" && "+q(row+` button[data-decision="reject"]`))
		admin.shot("approvals")
		admin.click(row + ` button[data-decision="reject"]`)
		admin.wait("rejected by alice", textOf("#approvals-result")+" === 'ui-req rejected by alice' && "+textOf(row+" .state")+" === 'rejected'")
		if a, err := eng.Approval(ctx, "ui-req"); err != nil || a.State != fleetwave.ApprovalRejected || a.DecidedBy != "alice" {
			t.Fatalf("ui-req: %+v %v", a, err)
		}
		op.wait("the operator sees the rejection", textOf(row+" .state")+" === 'rejected' && "+q(row+" button.again"))
		op.click(row + " button.again")
		op.wait("the form filled from the rejected request", q("#ap-brc")+".value === 'app' && "+q("#ap-version")+".value === '1.0' && "+
			q("#ap-nodes")+".value === 'n1' && "+q("#ap-id")+".value === ''")
		op.shot("approvals-again")
	})

	run("a viewer sees no write button", func(t *testing.T) {
		op.t = t
		v := signIn(t, root, base, dir, "tok-vic", "vic", "viewer")
		v.wait("the overview", textOf("#count-total")+" !== '-' && "+q(`#rollouts-body tr[data-rollout="app-g1"]`))
		if visibleNow(v, `nav a[data-nav="new"]`) {
			t.Fatal("a viewer is offered New rollout")
		}
		v.open("#/rollouts/app-g1")
		v.wait("the rollout", textOf("#ro-id")+" === 'app-g1' && "+textOf(`#ro-lanes tr[data-node="n4"] td.reason`)+" === 'maintenance_window'")
		for _, sel := range []string{"#ro-pause", "#ro-resume", "#ro-cancel"} {
			if visibleNow(v, sel) {
				t.Fatalf("a viewer sees %s", sel)
			}
		}
		v.shot("rollout")
		v.open("#/nodes/n1")
		v.wait("n1's page", textOf("#node-id")+" === 'n1' && "+textOf("#node-labels")+".includes('zone=a')")
		for _, sel := range []string{"#node-drain-btn", "#node-undrain-btn", "#labels-form", "#labels-save"} {
			if visibleNow(v, sel) {
				t.Fatalf("a viewer sees %s", sel)
			}
		}
		v.shot("node")
		v.open("#/new")
		v.wait("the refusal", visible("#new-forbidden")+" && !"+visible("#new-form"))
		v.open("#/approvals")
		v.wait("the approvals", q(`#approvals-list tr[data-approval="ui-req"]`))
		for _, sel := range []string{"#approval-form", `#approvals-list button`} {
			if visibleNow(v, sel) {
				t.Fatalf("a viewer sees %s", sel)
			}
		}
		v.shot("approvals")
	})
}

// visibleNow says whether sel is rendered in c's page now.
func visibleNow(c *consoleTab, sel string) bool {
	c.t.Helper()
	return browser.Eval[bool](c.t, c.ctx, visible(sel))
}

// iso formats t as the console does: RFC 3339 in UTC, whole seconds.
func iso(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
