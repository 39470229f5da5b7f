package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/hub"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/freeport"
	"github.com/fleetwave/fleetwave/internal/testutil/browser"
	"github.com/fleetwave/fleetwave/internal/testutil/gittest"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
)

// signer is a person who signs commits: the public key hub.yaml lists and
// the git configuration (and environment) that signs with the private one.
type signer struct {
	pub    string
	config map[string]string
	env    []string
}

// sshSigner makes an ed25519 key with ssh-keygen.
func sshSigner(t *testing.T, name string) signer {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen (OpenSSH) is needed to sign commits: apt-get install openssh-client")
	}
	dir := t.TempDir()
	key := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return signer{pub: name + "@example.com " + strings.TrimSpace(string(pub)), // an allowed_signers line
		config: map[string]string{"gpg.format": "ssh", "user.signingkey": key, "commit.gpgsign": "true"}}
}

// gpgSigner makes an OpenPGP key with the gpg command in its own home.
func gpgSigner(t *testing.T, name, email string) signer {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Fatal("gpg (GnuPG) is needed to sign commits: apt-get install gnupg")
	}
	home, err := os.MkdirTemp("", "g") // short: gpg-agent's socket path is bounded
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"GNUPGHOME=" + home}
	gpg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("gpg", append([]string{"--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("gpg %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	t.Cleanup(func() {
		cmd := exec.Command("gpgconf", "--kill", "gpg-agent")
		cmd.Env = append(os.Environ(), env...)
		_ = cmd.Run()
		_ = os.RemoveAll(home)
	})
	uid := fmt.Sprintf("%s <%s>", name, email)
	gpg("--quick-gen-key", uid, "ed25519", "sign", "never")
	pub := gpg("--armor", "--export", email)
	return signer{pub: pub, env: env,
		config: map[string]string{"gpg.format": "openpgp", "user.signingkey": email, "commit.gpgsign": "true"}}
}

// pushSigned pushes files as s (signed), with author name.
func pushSigned(t *testing.T, remote string, s signer, author string, files map[string]string, msg string) string {
	t.Helper()
	return gittest.PushWith(t, remote, gittest.PushOptions{Files: files, Message: msg, Config: s.config, Env: s.env,
		AuthorName: author, AuthorEmail: strings.ToLower(author) + "@example.com"})
}

// apiCall calls the hub's API and returns the status and body.
func apiCall(t *testing.T, addr, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func errCode(body string) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// gateFleet is a three-node repository with a db block and a BRC at
// version 1.
func gateFleet() map[string]string {
	files := dbFleet()
	files["blocks/db.cue"] = `kind: "block"
name: "db"
actions: {
	install: command: "echo \"install $FLEETWAVE_VERSION\" >> runs"
	upgrade: command: "echo \"upgrade $FLEETWAVE_VERSION\" >> runs"
	backup: command:  "echo backup >> runs"
}
`
	return files
}

func dbBRC(version string) string {
	return fmt.Sprintf("kind: \"trigger\"\nname: \"db\"\nblock_name: \"db\"\ntarget_version: %q\nmax_concurrent: 3\n", version)
}

// TestApprovalAuthorizationMatrix: with approval.required, every path
// that would create a config rollout waits for an approved request, and
// who may do what is decided by verified identities only. The matrix:
// {operator bob, admin alice, second admin carol, viewer vic, an unknown
// key, no token, a forged author without signature} x {submit, approve
// own, approve another's, reject, rollback to an applied version, rollback
// to a never-applied version, direct create while gated}.
func TestApprovalAuthorizationMatrix(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	alice, bob, carol := sshSigner(t, "alice"), sshSigner(t, "bob"), gpgSigner(t, "Carol", "carol@example.com")
	mallory := sshSigner(t, "mallory") // a key no identity lists
	files := gateFleet()
	files["brc/db.cue"] = dbBRC("1")
	remote := gittest.NewRemote(t, files)
	nodes := []string{"n1", "n2", "n3"}
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, nodes, nil, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(300 * time.Millisecond)
		c.Approval = hub.ApprovalConfig{Required: true}
		c.Identities = []hub.Identity{
			{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice"), Keys: []string{alice.pub}},
			{Name: "carol", Role: "admin", TokenSHA256: hub.HashToken("tok-carol"), Keys: []string{carol.pub}},
			{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob"), Keys: []string{bob.pub}},
			{Name: "vic", Role: "viewer", TokenSHA256: hub.HashToken("tok-vic")},
		}
	})
	addr := f.hub.Addr()
	eng := f.hub.Engine()
	ctx := context.Background()
	rolloutOf := func(object string) []fleetwave.Rollout {
		rs, err := eng.Rollouts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []fleetwave.Rollout
		for _, r := range rs {
			if string(r.Source.Object) == object {
				out = append(out, r)
			}
		}
		return out
	}
	approval := func(id string) fleetwave.Approval {
		a, err := eng.Approval(ctx, id)
		if err != nil {
			t.Fatalf("approval %s: %v", id, err)
		}
		return a
	}
	waitApproval := func(id string, want fleetwave.ApprovalState) fleetwave.Approval {
		t.Helper()
		var a fleetwave.Approval
		waitUntil(t, "approval "+id+" "+string(want), func() bool {
			var err error
			a, err = eng.Approval(ctx, id)
			return err == nil && a.State == want
		})
		return a
	}

	t.Run("a BRC's first generation is gated: no rollout, approval_required in status", func(t *testing.T) {
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			return strings.Contains(s, "reason: approval_required") && strings.Contains(s, "target_version: \"1\"")
		})
		if rs := rolloutOf("trigger/db"); len(rs) != 0 {
			t.Fatalf("a gated generation created %v", rs)
		}
	})

	var first string
	t.Run("submit: an operator and an admin may, a viewer, an unknown token and no token may not", func(t *testing.T) {
		body := `{"brc":"db","target_version":"1","nodes":["n1","n2","n3"],"batch_size":2}`
		for _, tt := range []struct {
			token string
			want  int
			code  string
		}{
			{"", http.StatusUnauthorized, "unauthorized"},
			{"tok-nobody", http.StatusUnauthorized, "unauthorized"},
			{"tok-vic", http.StatusForbidden, "forbidden"},
		} {
			if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", tt.token, body); st != tt.want || errCode(b) != tt.code {
				t.Fatalf("submit with %q: %d %s, want %d %s", tt.token, st, b, tt.want, tt.code)
			}
		}
		st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-bob", body)
		if st != http.StatusCreated {
			t.Fatalf("operator submit: %d %s", st, b)
		}
		var created struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(b), &created)
		first = created.ID
		if a := approval(first); a.State != fleetwave.ApprovalPending || a.SubmittedBy != "bob" || strings.Join(a.Nodes, ",") != "n1,n2,n3" {
			t.Fatalf("submitted: %+v", a)
		}
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-alice", `{"brc":"db","target_version":"9","nodes":["n1"]}`); st != http.StatusUnprocessableEntity || errCode(b) != "version_mismatch" {
			t.Fatalf("a version the brc does not target: %d %s", st, b)
		}
		if rs := rolloutOf("approval/" + first); len(rs) != 0 {
			t.Fatal("submitting created a rollout")
		}
		// the hub committed the request to the repository, with its actor
		doc := waitFile(t, remote, "approvals/"+first+".yaml", func(string) bool { return true })
		if !strings.Contains(doc, "brc: db") || strings.Contains(doc, "decision") {
			t.Fatalf("approvals/%s.yaml:\n%s", first, doc)
		}
		msg := gittest.Git(t, "", "--git-dir", strings.TrimPrefix(remote, "file://"), "log", "-1", "--format=%an%n%B", "main", "--", "approvals/"+first+".yaml")
		if !strings.Contains(msg, "fleetwave hub") || !strings.Contains(msg, "Fleetwave-Actor: bob") {
			t.Fatalf("the request's commit:\n%s", msg)
		}
	})

	t.Run("approve: only an admin who did not submit", func(t *testing.T) {
		path := "/api/v1/config-approvals/" + first + "/approve"
		if st, b := apiCall(t, addr, "POST", path, "tok-bob", ""); st != http.StatusForbidden {
			t.Fatalf("the operator approving: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "POST", path, "tok-vic", ""); st != http.StatusForbidden {
			t.Fatalf("a viewer approving: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "POST", path, "", ""); st != http.StatusUnauthorized {
			t.Fatalf("no token: %d %s", st, b)
		}
		// an admin cannot approve their own request
		st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-alice", `{"id":"alice-own","brc":"db","target_version":"1","nodes":["n1"]}`)
		if st != http.StatusCreated {
			t.Fatalf("admin submit: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/alice-own/approve", "tok-alice", ""); st != http.StatusForbidden || errCode(b) != "self_approval" {
			t.Fatalf("self-approval: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "POST", path, "tok-alice", ""); st != http.StatusOK {
			t.Fatalf("another admin approving: %d %s", st, b)
		}
		r, items := f.waitRollout(t, fleetwave.ApprovalRolloutID(first), fleetwave.RolloutCompleted)
		if r.Source.Actor != "alice" || r.Source.Kind != fleetwave.SourceApproval || r.MaxConcurrent != 2 || len(items) != 3 {
			t.Fatalf("approval rollout %+v with %d items", r, len(items))
		}
		waitApproval(first, fleetwave.ApprovalConsumed)
		for _, n := range nodes {
			if got := runs(t, f, n); got != "install 1\n" {
				t.Fatalf("%s ran %q", n, got)
			}
		}
		if st, _ := apiCall(t, addr, "POST", path, "tok-carol", ""); st != http.StatusConflict {
			t.Fatalf("approving a consumed request again: %d", st)
		}
	})

	t.Run("reject: an admin rejects, terminal", func(t *testing.T) {
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/alice-own/reject", "tok-carol", ""); st != http.StatusOK {
			t.Fatalf("reject: %d %s", st, b)
		}
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/alice-own/approve", "tok-carol", ""); st != http.StatusConflict || errCode(b) != "not_pending" {
			t.Fatalf("approve after reject: %d %s", st, b)
		}
		if rs := rolloutOf("approval/alice-own"); len(rs) != 0 {
			t.Fatal("a rejected request created a rollout")
		}
	})

	t.Run("through git: a signed submission, a decision signed by another admin; forged and unknown signers change nothing", func(t *testing.T) {
		pushSigned(t, remote, bob, "Bob", map[string]string{"brc/db.cue": dbBRC("2")}, "db 2")
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			return strings.Contains(s, "target_version: \"2\"") && strings.Contains(s, "approval_required")
		})
		req := "kind: approval\nname: up-v2\nbrc: db\ntarget_version: \"2\"\nnodes: [n1, n2, n3]\n"
		pushSigned(t, remote, bob, "Bob", map[string]string{"approvals/up-v2.yaml": req}, "request db 2")
		a := waitApproval("up-v2", fleetwave.ApprovalPending)
		if a.SubmittedBy != "bob" || !strings.HasPrefix(a.SubmittedVia, "") || len(a.SubmittedVia) != 40 {
			t.Fatalf("git submission: %+v", a)
		}
		// a forged author, unsigned, sets the decision: nothing
		gittest.PushWith(t, remote, gittest.PushOptions{Files: map[string]string{"approvals/up-v2.yaml": req + "decision: approved\n"},
			Message: "approve (forged)", AuthorName: "Carol", AuthorEmail: "carol@example.com"})
		// an unknown key submits: refused
		pushSigned(t, remote, mallory, "Mallory", map[string]string{"approvals/sneaky.yaml": strings.Replace(req, "up-v2", "sneaky", 1)}, "sneaky")
		waitApproval("sneaky", fleetwave.ApprovalRefused)
		if a := approval("sneaky"); a.Reason != "unknown_signer" {
			t.Fatalf("unknown signer: %+v", a)
		}
		// bob (operator) signs a decision on his own request: ignored
		pushSigned(t, remote, bob, "Bob", map[string]string{"approvals/up-v2.yaml": req + "decision: rejected\n"}, "bob decides")
		time.Sleep(time.Second)
		if a := approval("up-v2"); a.State != fleetwave.ApprovalPending {
			t.Fatalf("after forged and non-admin decisions: %+v", a)
		}
		// carol (admin, gpg) decides
		pushSigned(t, remote, carol, "Carol", map[string]string{"approvals/up-v2.yaml": req + "decision: approved\n"}, "carol approves")
		a = waitApproval("up-v2", fleetwave.ApprovalConsumed)
		if a.DecidedBy != "carol" {
			t.Fatalf("decided by %q", a.DecidedBy)
		}
		f.waitRollout(t, fleetwave.ApprovalRolloutID("up-v2"), fleetwave.RolloutCompleted)
		for _, n := range nodes {
			if got := runs(t, f, n); got != "install 1\nupgrade 2\n" {
				t.Fatalf("%s ran %q", n, got)
			}
		}
		if rs := rolloutOf("approval/sneaky"); len(rs) != 0 {
			t.Fatal("a refused submission created a rollout")
		}
	})

	t.Run("a rollback to a version every node ran before needs no approval", func(t *testing.T) {
		// the history of versions is in status/nodes before the push
		waitFile(t, remote, "status/nodes/n1.yaml", func(s string) bool { return strings.Contains(s, "observed_versions") && strings.Contains(s, "- \"2\"") })
		pushSigned(t, remote, bob, "Bob", map[string]string{"brc/db.cue": dbBRC("1")}, "roll back to 1")
		var rolled []fleetwave.Rollout
		waitUntil(t, "the rollback's rollout", func() bool {
			for _, r := range rolloutOf("trigger/db") {
				if r.Status == fleetwave.RolloutCompleted {
					rolled = append(rolled, r)
					return true
				}
			}
			return false
		})
		if rolled[0].Source.Kind != fleetwave.SourceScheduler {
			t.Fatalf("rollback rollout %+v", rolled[0])
		}
		for _, n := range nodes {
			if got := runs(t, f, n); got != "install 1\nupgrade 2\nupgrade 1\n" {
				t.Fatalf("%s ran %q", n, got)
			}
		}
	})

	t.Run("a rollback to a version never applied is gated", func(t *testing.T) {
		pushSigned(t, remote, bob, "Bob", map[string]string{"brc/db.cue": dbBRC("0.9")}, "go to 0.9")
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			return strings.Contains(s, "target_version: \"0.9\"") && strings.Contains(s, "reason: approval_required")
		})
		for _, r := range rolloutOf("trigger/db") {
			if r.Status == fleetwave.RolloutActive {
				t.Fatalf("a never-applied version started %s", r.ID)
			}
		}
	})

	t.Run("a direct create while gated is refused with approval_required", func(t *testing.T) {
		pushSigned(t, remote, bob, "Bob", map[string]string{"rollouts/force.yaml": "kind: rollout\nname: force\nbrc: db\naction_name: upgrade\nnodes: [n1]\n"}, "force it")
		waitFile(t, remote, "status/summary.yaml", func(s string) bool {
			var doc struct {
				Requests map[string]fleetwave.RequestStatus `yaml:"requests"`
			}
			if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
				return false
			}
			r := doc.Requests["force"]
			return r.State == fleetwave.RequestRefused && r.Code == fleetwave.ReasonApprovalRequired
		})
		if got := runs(t, f, "n1"); strings.Contains(got, "0.9") {
			t.Fatalf("n1 ran %q", got)
		}
		// an operational request is not config: it runs
		pushSigned(t, remote, bob, "Bob", map[string]string{"rollouts/backup.yaml": "kind: rollout\nname: backup\nbrc: db\naction_name: backup\nnodes: [n1]\n"}, "back up")
		f.waitRollout(t, "manual-backup", fleetwave.RolloutCompleted)
	})

	t.Run("every record is in status", func(t *testing.T) {
		for id, state := range map[string]string{first: "consumed", "alice-own": "rejected", "up-v2": "consumed", "sneaky": "refused"} {
			doc := waitFile(t, remote, "status/approvals/"+id+".yaml", func(s string) bool { return strings.Contains(s, "state: "+state) })
			if id == "up-v2" && (!strings.Contains(doc, "decided_by: carol") || !strings.Contains(doc, "submitted_by: bob") || !strings.Contains(doc, "rollout: approval-up-v2")) {
				t.Fatalf("status/approvals/up-v2.yaml:\n%s", doc)
			}
		}
	})
}

// freeAddr returns a loopback address with a port free right now, never
// one given before in this test binary.
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Take()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// tryCall is apiCall for a hub that may die during the call: a transport
// error is status 0.
func tryCall(addr, method, path, token, body string) (int, string) {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAnApprovedRequestCreatesOneRolloutAcrossCrashes: the leader hub (a
// process) dies at each step of approve -> create the rollout -> record
// the request consumed -> commit the claim; the other replica takes over
// and, later, the dead one comes back. Each approved request ends with
// exactly one rollout, run once by each agent.
func TestAnApprovedRequestCreatesOneRolloutAcrossCrashes(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, point := range []string{"approval_decided", "approval_created", "approval_consumed", "claim_committed"} {
		t.Run("a crash at "+point, func(t *testing.T) {
			files := gateFleet()
			files["brc/db.cue"] = dbBRC("1")
			remote := gittest.NewRemote(t, files)
			srv := redistest.Start(t)
			redisURL := "unix://" + srv.Addr
			nodes := []string{"n1", "n2", "n3"}
			identities := fmt.Sprintf(`approval: {required: true}
identities:
  - {name: alice, role: admin, token_sha256: %s}
  - {name: bob, role: operator, token_sha256: %s}
`, hub.HashToken("tok-alice"), hub.HashToken("tok-bob"))
			addrA := freeAddr(t)
			cfgPath := childHubConfig(t, t.TempDir(), remote, redisURL, addrA, "reconcile_interval: 200ms\n"+identities)
			start := func(crashAt string) (*exec.Cmd, *lockedBuffer) { return startHubChild(t, cfgPath, crashAt) }
			t0 := time.Now()
			a, logA := start(point)
			waitUntil(t, "hub-a leads", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-a" })
			t.Logf("hub-a leads after %v", time.Since(t0).Round(time.Millisecond))
			// replica B serves the agents
			f := startFleetCfg(t, remote, redisURL, nodes, nil, func(c *hub.Config) {
				c.HubID, c.LeaseTTL = "hub-b", hub.Duration(time.Second)
				c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
				c.Approval = hub.ApprovalConfig{Required: true}
				c.Identities = []hub.Identity{
					{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice")},
					{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob")},
				}
			})
			t.Logf("hub-b started after %v", time.Since(t0).Round(time.Millisecond))
			waitUntil(t, "hub-a gates db 1", func() bool {
				s, _ := readStatus(t, remote, "status/summary.yaml")
				return strings.Contains(s, "approval_required")
			})
			t.Logf("gated after %v", time.Since(t0).Round(time.Millisecond))
			st, body := tryCall(addrA, "POST", "/api/v1/config-approvals", "tok-bob", `{"id":"db-1","brc":"db","target_version":"1","nodes":["n1","n2","n3"]}`)
			if st != http.StatusCreated {
				t.Fatalf("submit: %d %s", st, body)
			}
			// the answer may not come: the hub can die at any later step
			// while it answers (the reconcile the approval kicks runs at once)
			st, body = tryCall(addrA, "POST", "/api/v1/config-approvals/db-1/approve", "tok-alice", "")
			if st != 0 && st != http.StatusOK {
				t.Fatalf("approve: %d %s", st, body)
			}
			waitUntil(t, "hub-a crashed at "+point, func() bool { return strings.Contains(logA.String(), "crash at "+point) })
			_, _ = a.Process.Wait()
			// hub-b takes over and finishes the request
			waitUntil(t, "hub-b leads", func() bool { owner, _ := leaseHolder(t, srv); return owner == "hub-b" })
			t.Logf("hub-b leads after %v", time.Since(t0).Round(time.Millisecond))
			f.waitRollout(t, fleetwave.ApprovalRolloutID("db-1"), fleetwave.RolloutCompleted)
			t.Logf("rollout completed after %v", time.Since(t0).Round(time.Millisecond))
			// hub-a comes back; nothing more happens
			start("")
			time.Sleep(2 * time.Second)
			eng := f.hub.Engine()
			ap, err := eng.Approval(context.Background(), "db-1")
			if err != nil || ap.State != fleetwave.ApprovalConsumed || ap.Rollout != fleetwave.ApprovalRolloutID("db-1") || ap.DecidedBy != "alice" {
				t.Fatalf("approval %+v (%v)", ap, err)
			}
			rs, err := eng.Rollouts(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var mine []string
			for _, r := range rs {
				if r.Source.Object == fleetwave.Key(fleetwave.KindApproval, "db-1") || strings.HasPrefix(r.ID, "approval-db-1") || r.Source.Object == "trigger/db" && r.Counters.Total > 0 {
					mine = append(mine, r.ID)
				}
			}
			if len(mine) != 1 {
				t.Fatalf("rollouts for the request: %v, want exactly one", mine)
			}
			for _, n := range nodes {
				if got := runs(t, f, n); got != "install 1\n" {
					t.Fatalf("%s ran %q, want one install", n, got)
				}
			}
		})
	}
}

// TestUnsignedChangesAreRefusedWhenSignaturesAreRequired: with
// approval.require_signed_commits a commit changing a BRC that no
// configured identity signed is rejected (the snapshot stays), also when
// a signed commit lands on top of it; a signed one is applied; status
// lists who changed the fleet.
func TestUnsignedChangesAreRefusedWhenSignaturesAreRequired(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	alice := sshSigner(t, "alice")
	files := gateFleet()
	files["brc/db.cue"] = dbBRC("1")
	remote := gittest.NewRemote(t, files)
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, nil, func(c *hub.Config) {
		c.Approval = hub.ApprovalConfig{RequireSignedCommits: true}
		c.Identities = []hub.Identity{{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice"), Keys: []string{alice.pub}}}
	})
	f.waitEveryAgent(t, "db-g1")
	unsigned := gittest.Push(t, remote, map[string]string{"brc/db.cue": dbBRC("2")}, nil, "db 2, unsigned")
	waitFile(t, remote, "status/summary.yaml", func(s string) bool {
		return strings.Contains(s, "result: rejected") && strings.Contains(s, unsigned[:12]) && strings.Contains(s, "which is not signed")
	})
	// a signed commit on top does not make the unsigned change acceptable
	pushSigned(t, remote, alice, "Alice", map[string]string{"nodes/n1.cue": "kind: \"node\"\nname: \"n1\"\nlabels: { tier: \"web\" }\n"}, "touch n1, signed")
	time.Sleep(time.Second)
	if s, _ := readStatus(t, remote, "status/summary.yaml"); !strings.Contains(s, "result: rejected") {
		t.Fatalf("a signed commit on top of an unsigned change was applied:\n%s", s)
	}
	// the file the unsigned commit changed, written again by a signed one
	// (a reviewed change of its own): applied
	pushSigned(t, remote, alice, "Alice", map[string]string{"brc/db.cue": dbBRC("3")}, "db 3, signed")
	s := waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "result: ok") })
	if !strings.Contains(s, "signer: alice") || !strings.Contains(s, "signer: unsigned") {
		t.Fatalf("status does not say who changed the fleet:\n%s", s)
	}
	f.waitRollout(t, "db-g3", fleetwave.RolloutCompleted)
	rs, err := f.hub.Engine().Rollouts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID == "db-g2" {
			t.Fatal("the unsigned change was rolled out")
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if got := runs(t, f, n); got != "install 1\nupgrade 3\n" {
			t.Fatalf("%s ran %q, want the install and the signed upgrade only", n, got)
		}
	}
}

// TestApprovalTTLAndPinnedTargets: a request expires on the hub's clock
// (a fake one here) once its TTL passed since the hub first saw it, and an
// approval runs on the nodes pinned at submission even when labels change
// in between.
func TestApprovalTTLAndPinnedTargets(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := gateFleet()
	files["brc/db.cue"] = dbBRC("1")
	remote := gittest.NewRemote(t, files)
	// a day ahead: attempt deadlines (hub time) stay in the agents' future
	clk := clock.NewFake(time.Now().UTC().Add(24 * time.Hour).Truncate(time.Second))
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, []string{"n1", "n2", "n3"}, clk, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
		c.LeaseTTL = hub.Duration(time.Hour) // the fake clock jumps: the lease must outlive the jumps
		c.Approval = hub.ApprovalConfig{Required: true, TTL: hub.Duration(24 * time.Hour)}
		c.Identities = []hub.Identity{
			{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice")},
			{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob")},
		}
	})
	addr, eng, ctx := f.hub.Addr(), f.hub.Engine(), context.Background()
	waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "approval_required") })

	t.Run("a request expires after its ttl on the hub's clock", func(t *testing.T) {
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-bob", `{"id":"slow","brc":"db","target_version":"1","nodes":["n1"]}`); st != http.StatusCreated {
			t.Fatalf("submit: %d %s", st, b)
		}
		a, _ := eng.Approval(ctx, "slow")
		if !a.SubmittedAt.Equal(clk.Now().UTC()) {
			t.Fatalf("submitted_at %v, want the hub's clock %v", a.SubmittedAt, clk.Now())
		}
		clk.Advance(23 * time.Hour)
		time.Sleep(500 * time.Millisecond) // a few reconciles
		if a, _ := eng.Approval(ctx, "slow"); a.State != fleetwave.ApprovalPending {
			t.Fatalf("after 23h: %s", a.State)
		}
		clk.Advance(2 * time.Hour)
		waitUntil(t, "the request expires", func() bool {
			a, err := eng.Approval(ctx, "slow")
			return err == nil && a.State == fleetwave.ApprovalExpired
		})
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/slow/approve", "tok-alice", ""); st != http.StatusConflict || errCode(b) != "not_pending" {
			t.Fatalf("approving an expired request: %d %s", st, b)
		}
	})

	t.Run("the pinned targets do not follow a label change between submit and approve", func(t *testing.T) {
		st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-bob", `{"id":"web-tier","brc":"db","target_version":"1","selector":{"match_labels":{"tier":"web"}}}`)
		if st != http.StatusCreated {
			t.Fatalf("submit: %d %s", st, b)
		}
		if a, _ := eng.Approval(ctx, "web-tier"); strings.Join(a.Nodes, ",") != "n1,n2" {
			t.Fatalf("pinned %v, want n1,n2", a.Nodes)
		}
		relabel := gittest.Push(t, remote, map[string]string{
			"nodes/n1.cue": "kind: \"node\"\nname: \"n1\"\nlabels: { tier: \"batch\" }\n",
			"nodes/n3.cue": "kind: \"node\"\nname: \"n3\"\nlabels: { tier: \"web\" }\n",
		}, nil, "relabel n1 and n3")
		waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "applied: "+relabel) })
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/web-tier/approve", "tok-alice", ""); st != http.StatusOK {
			t.Fatalf("approve: %d %s", st, b)
		}
		_, items := f.waitRollout(t, fleetwave.ApprovalRolloutID("web-tier"), fleetwave.RolloutCompleted)
		if got := itemNodes(items); got != "n1,n2" {
			t.Fatalf("the approval ran on %s, want the pinned n1,n2", got)
		}
		if got := runs(t, f, "n3"); got != "" {
			t.Fatalf("n3, labelled web after the submission, ran %q", got)
		}
	})
}

// TestTheApprovalFlowThroughGit: a change goes the way a team works: a
// branch, plan on it (which says the merge needs an approval and none
// exists), the merge, approval_required in status, a request submitted by
// an operator and approved by an admin, the rollout, and every step in the
// status committed to the repository.
func TestTheApprovalFlowThroughGit(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	files := gateFleet()
	files["brc/db.cue"] = dbBRC("1")
	remote := gittest.NewRemote(t, files)
	nodes := []string{"n1", "n2", "n3"}
	f := startFleetCfg(t, remote, "unix://"+redistest.Start(t).Addr, nodes, nil, func(c *hub.Config) {
		c.ReconcileInterval = hub.Duration(200 * time.Millisecond)
		c.Approval = hub.ApprovalConfig{Required: true}
		c.Identities = []hub.Identity{
			{Name: "alice", Role: "admin", TokenSHA256: hub.HashToken("tok-alice")},
			{Name: "bob", Role: "operator", TokenSHA256: hub.HashToken("tok-bob")},
		}
	})
	addr := f.hub.Addr()
	approve := func(version string) string {
		t.Helper()
		st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals", "tok-bob",
			fmt.Sprintf(`{"brc":"db","target_version":%q,"selector":{"match_labels":{"tier":"web"}}}`, version))
		if st != http.StatusCreated {
			t.Fatalf("submit: %d %s", st, b)
		}
		var created struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(b), &created)
		if st, b := apiCall(t, addr, "POST", "/api/v1/config-approvals/"+created.ID+"/approve", "tok-alice", ""); st != http.StatusOK {
			t.Fatalf("approve: %d %s", st, b)
		}
		return created.ID
	}
	waitFile(t, remote, "status/summary.yaml", func(s string) bool { return strings.Contains(s, "approval_required") })
	first := approve("1")
	f.waitRollout(t, fleetwave.ApprovalRolloutID(first), fleetwave.RolloutCompleted)

	// a branch bumps the version; plan on it
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", remote, work)
	gittest.Git(t, work, "checkout", "-q", "-b", "db-2")
	if err := os.WriteFile(filepath.Join(work, "brc", "db.cue"), []byte(dbBRC("2")), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "commit", "-qam", "db 2")
	rep, err := hub.Plan(context.Background(), hub.PlanRequest{Dir: work, Branch: "main", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.ApprovalRequired || rep.ApprovalPolicyFrom != "status" || rep.ApprovalsNeeded != 1 || len(rep.Rollouts) != 1 ||
		!rep.Rollouts[0].ApprovalRequired || len(rep.Rollouts[0].Approvals) != 0 || rep.Rollouts[0].TargetVersion != "2" {
		t.Fatalf("plan on the branch: %+v", rep)
	}
	var text strings.Builder
	rep.WriteText(&text, true)
	if !strings.Contains(text.String(), "approval: REQUIRED") || !strings.Contains(text.String(), "none exists yet") {
		t.Fatalf("plan's markdown does not say an approval is needed:\n%s", text.String())
	}
	// merge
	gittest.Git(t, work, "checkout", "-q", "main")
	for i := 0; ; i++ { // the hub's status commits race the merge's push
		gittest.Git(t, work, "pull", "-q", "--no-rebase", "origin", "main")
		if i == 0 {
			gittest.Git(t, work, "merge", "-q", "--no-ff", "-m", "Merge db-2", "db-2")
		}
		cmd := exec.Command("git", "push", "-q", "origin", "main")
		cmd.Dir, cmd.Env = work, gittest.Env()
		if out, err := cmd.CombinedOutput(); err == nil {
			break
		} else if i > 20 {
			t.Fatalf("push the merge: %v\n%s", err, out)
		}
	}
	waitFile(t, remote, "status/summary.yaml", func(s string) bool {
		return strings.Contains(s, "reason: approval_required") && strings.Contains(s, "target_version: \"2\"")
	})
	if _, _, err := f.hub.Engine().Rollout(context.Background(), "db-g2"); err == nil {
		t.Fatal("the merge created a rollout without an approval")
	}
	second := approve("2")
	_, items := f.waitRollout(t, fleetwave.ApprovalRolloutID(second), fleetwave.RolloutCompleted)
	if got := itemNodes(items); got != "n1,n2" {
		t.Fatalf("the approved rollout ran on %s, want the web tier n1,n2", got)
	}
	doc := waitFile(t, remote, "status/approvals/"+second+".yaml", func(s string) bool { return strings.Contains(s, "state: consumed") })
	for _, want := range []string{"submitted_by: bob", "decided_by: alice", "rollout: " + fleetwave.ApprovalRolloutID(second), "- n1", "- n2"} {
		if !strings.Contains(doc, want) {
			t.Fatalf("status/approvals/%s.yaml lacks %q:\n%s", second, want, doc)
		}
	}
	waitFile(t, remote, "status/rollouts/"+fleetwave.ApprovalRolloutID(second)+".yaml", func(s string) bool {
		return strings.Contains(s, "status: completed") && strings.Contains(s, "actor: alice")
	})
	// n3 (batch tier) still waits for an approval of version 2
	waitFile(t, remote, "status/summary.yaml", func(s string) bool {
		return strings.Contains(s, "nodes: 1") && strings.Contains(s, "approval_required")
	})
	// the console, in a real browser, shows the requests and what waits
	// (identities configured: without a token it asks for one)
	if dom := browser.DumpDOM(t, "http://"+addr+"/", 3*time.Second); !strings.Contains(dom, "sign in with an API token") || strings.Contains(dom, second) {
		t.Fatalf("the console without a token:\n%s", dom)
	}
	dom := browser.DumpDOM(t, "http://"+addr+"/#token=tok-bob", 3*time.Second)
	for _, want := range []string{second, "consumed", "approval_required", fleetwave.ApprovalRolloutID(second)} {
		if !strings.Contains(dom, want) {
			t.Fatalf("console lacks %s:\n%s", want, dom)
		}
	}
}
