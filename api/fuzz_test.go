package api_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/gitsync"
)

// The fuzz targets send arbitrary bodies to every endpoint that reads one
// and check what must hold for any input: no 500 (a panic is answered 500
// too), a well-formed JSON error object for every answer that is not 2xx,
// and nothing reaching the hub that breaks the documented limits.

// fuzzMaxBody keeps the fuzzers' bodies under the cap most of the time and
// over it some of the time.
const fuzzMaxBody = 4096

// serveFuzz runs one request through a fresh API in process.
func serveFuzz(t *testing.T, h *fakeHub, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := api.New(h, api.WithMetrics(reg, reg), api.WithMaxBody(fuzzMaxBody))
	req.RemoteAddr = "192.0.2.7:40000"
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// checkAnswer fails on a 500 or an error answer that is not the documented
// JSON error object, and returns the error code ("" for 2xx).
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, allowed ...int) string {
	t.Helper()
	if rec.Code == http.StatusInternalServerError || !slices.Contains(allowed, rec.Code) {
		t.Fatalf("status %d (allowed %v): %s", rec.Code, allowed, rec.Body.String())
	}
	if rec.Code < 300 {
		return ""
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error answer of type %q", ct)
	}
	var e struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Code == "" || e.Error.Message == "" || dec.More() {
		t.Fatalf("not a JSON error object (%v): %s", err, rec.Body.String())
	}
	return e.Error.Code
}

var fuzzBlockName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// okText mirrors the documented limits of identifiers.
func okText(s string, required bool) bool {
	return (s != "" || !required) && len(s) <= api.MaxFieldLen && !strings.ContainsFunc(s, unicode.IsControl)
}

// instanceBreaksLimits says what of in breaks the documented limits, or "".
func instanceBreaksLimits(in fleetwave.InstanceStatus) string {
	switch {
	case !fuzzBlockName.MatchString(in.Block):
		return "block"
	case in.Generation < 0:
		return "generation"
	case !slices.Contains([]fleetwave.DesiredState{"", "installed", "running", "stopped", "absent"}, in.State):
		return "state"
	case !okText(in.Version, false) || !okText(in.ConfigHash, false) || !okText(in.ManagedBy, false) || !okText(in.LastAttempt, false):
		return "text field"
	}
	return ""
}

// reportBreaksLimits says what of r breaks the documented limits, or "".
func reportBreaksLimits(r fleetwave.Report) string {
	if r.Node != "node-a" {
		return "node"
	}
	if len(r.Instances) > api.MaxReportInstances || len(r.Attempts) > api.MaxReportAttempts ||
		len(r.Capabilities) > api.MaxReportCapabilities || len(r.DataAddresses) > api.MaxReportDataAddresses {
		return "list length"
	}
	seen := map[string]bool{}
	for _, in := range r.Instances {
		if why := instanceBreaksLimits(in); why != "" {
			return "instance " + why
		}
		if seen[in.Block] {
			return "duplicate block"
		}
		seen[in.Block] = true
	}
	for k, v := range r.DataAddresses {
		if !okText(k, true) || !okText(v, false) {
			return "data address"
		}
	}
	for _, c := range append(slices.Clone(r.Capabilities), r.Attempts...) {
		if !okText(c, true) {
			return "capability or attempt"
		}
	}
	if !okText(r.AgentVersion, false) || !r.ReceivedAt.IsZero() {
		return "agent_version or received_at"
	}
	return ""
}

// seedReports are reports an agent sends and near misses.
var seedReports = []string{
	`{"node":"node-a","agent_version":"0.1.0","capabilities":["gpu"],"data_addresses":{"data":"10.0.0.5:9000"},` +
		`"instances":[{"block":"web","version":"2.0","config_hash":"ab12","generation":4,"state":"running","managed_by":"ops",` +
		`"last_attempt":"web-g1.1.1","updated_at":"2026-01-01T00:00:00Z"}],"attempts":["web-g1.1.1"],"sent_at":"2026-01-01T00:00:00Z"}`,
	`{"instances":[]}`,
	`{"node":"node-a","instances":[{"block":"web","generation":-5,"state":"bogus"}]}`,
	`{"instances":[{"block":"web"},{"block":"web"}]}`,
	`{"instances":[{"block":"Web_1","generation":1e400}]}`,
	`{"data_addresses":{"":"x"},"instances":null}`,
	`{"node":"node-b"} {}`,
	`{"sent_at":"yesterday","received_at":"2030-01-01T00:00:00Z"}`,
	`[]`,
	"",
	`{"instances":[{"block":"a\u0000b"}]}`,
}

func fuzzReportEndpoint(f *testing.F, endpoint string) {
	for _, s := range seedReports {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var reached []fleetwave.Report
		h := &fakeHub{
			report:   func(r fleetwave.Report) error { reached = append(reached, r); return nil },
			register: func(r fleetwave.Report) error { reached = append(reached, r); return nil },
		}
		req := httptest.NewRequest("POST", "/api/v1/agent/nodes/node-a/"+endpoint, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer token-a")
		rec := serveFuzz(t, h, req)
		code := checkAnswer(t, rec, 204, 400, 413)
		if code != "" && len(reached) != 0 {
			t.Fatalf("refused report (%s) reached the hub", code)
		}
		for _, r := range reached {
			if why := reportBreaksLimits(r); why != "" {
				t.Fatalf("a report breaking the limits (%s) reached the hub: %+v", why, r)
			}
		}
	})
}

func FuzzReport(f *testing.F) { fuzzReportEndpoint(f, "report") }

func FuzzRegister(f *testing.F) { fuzzReportEndpoint(f, "register") }

// FuzzResult also fuzzes ownership: for another node's attempt the answer
// is 403, whatever the body (unless it is too large to read).
func FuzzResult(f *testing.F) {
	for _, s := range []string{
		`{"attempt_id":"att-1","fence":3,"class":"success","exit_code":0,"output":"ok",` +
			`"instance":{"block":"web","generation":2,"state":"running"}}`,
		`{"attempt_id":"att-1","fence":3,"class":"bogus","exit_code":0}`,
		`{"attempt_id":"att-1","fence":-1,"class":"lost","exit_code":-1}`,
		`{"attempt_id":"att-2","class":"transient"}`,
		`{"attempt_id":"att-1","class":"success","instance":{"block":"","generation":-5,"state":"bogus"}}`,
		`{"attempt_id":"att-1","class":"success"} trailing`,
		`{"attempt_id":"att-1","class":"success","extra":true}`,
		`{"attempt_id":"att-1","exit_code":99999999999999999999}`,
		`null`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, foreign bool) {
		owner := "node-a"
		if foreign {
			owner = "node-b"
		}
		var reached []fleetwave.AttemptResult
		h := &fakeHub{
			owner: func(string) (string, error) { return owner, nil },
			complete: func(node string, res fleetwave.AttemptResult) error {
				reached = append(reached, res)
				if node != owner {
					return &api.Error{Status: 403, Code: "forbidden", Message: "attempt belongs to another node"}
				}
				return nil
			},
		}
		req := httptest.NewRequest("POST", "/api/v1/agent/nodes/node-a/attempts/att-1/result", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer token-a")
		rec := serveFuzz(t, h, req)
		code := checkAnswer(t, rec, 204, 400, 403, 413)
		if foreign && len(body) <= fuzzMaxBody && code != "forbidden" {
			t.Fatalf("another node's attempt answered %d %s", rec.Code, rec.Body.String())
		}
		for _, res := range reached {
			switch {
			case res.AttemptID != "att-1", res.Fence < 0, len(res.Output) > api.MaxOutputLen,
				!slices.Contains([]fleetwave.ResultClass{"success", "transient", "permanent", "lost"}, res.Class):
				t.Fatalf("a result breaking the limits reached the hub: %+v", res)
			case res.Instance != nil && instanceBreaksLimits(*res.Instance) != "":
				t.Fatalf("an instance breaking the limits (%s) reached the hub: %+v", instanceBreaksLimits(*res.Instance), res.Instance)
			}
		}
	})
}

// webhookSecret signs the fuzzer's hooks.
var webhookSecret = []byte("fuzz-secret")

// FuzzGitHook sends bodies with a valid signature (sign), with the given
// signature header value, or unsigned (an empty header).
func FuzzGitHook(f *testing.F) {
	for _, s := range []string{`{"ref":"refs/heads/main"}`, ``, `not json`, `{"ref":` + strings.Repeat("x", 100)} {
		f.Add([]byte(s), true, "")
		f.Add([]byte(s), false, "")
		f.Add([]byte(s), false, "sha256=00")
		f.Add([]byte(s), false, "sha256="+strings.Repeat("ab", 32))
	}
	f.Fuzz(func(t *testing.T, body []byte, sign bool, signature string) {
		h := &fakeHub{verify: func(hd http.Header, b []byte) error { return gitsync.VerifyWebhook(hd, b, webhookSecret) }}
		req := httptest.NewRequest("POST", "/api/v1/hooks/git", bytes.NewReader(body))
		if sign {
			m := hmac.New(sha256.New, webhookSecret)
			m.Write(body)
			signature = "sha256=" + hex.EncodeToString(m.Sum(nil))
		}
		if signature != "" {
			req.Header.Set(gitsync.HeaderGitHubSignature, signature)
		}
		rec := serveFuzz(t, h, req)
		code := checkAnswer(t, rec, 202, 401, 413)
		switch {
		case len(body) > fuzzMaxBody && code != "body_too_large":
			t.Fatalf("oversized hook answered %d", rec.Code)
		case len(body) <= fuzzMaxBody && sign && rec.Code != 202:
			t.Fatalf("signed hook answered %d %s", rec.Code, rec.Body.String())
		case rec.Code == 202 != (h.synced == 1):
			t.Fatalf("answer %d but %d syncs", rec.Code, h.synced)
		}
	})
}

// FuzzRolloutState sends bodies to a rollout action: none or an empty JSON
// object are the only ones accepted.
func FuzzRolloutState(f *testing.F) {
	for _, s := range []string{``, `{}`, ` { } `, `{"force":true}`, `{} {}`, `[]`, `null`, `{"a":`} {
		f.Add([]byte(s), "pause")
		f.Add([]byte(s), "explode")
	}
	f.Fuzz(func(t *testing.T, body []byte, action string) {
		h := &fakeHub{rollout: func(id string) (fleetwave.Rollout, []fleetwave.Item, error) {
			return fleetwave.Rollout{ID: id}, nil, nil
		}}
		req := httptest.NewRequest("POST", "/api/v1/rollouts/r1/"+url.PathEscape(action), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-op")
		rec := serveFuzz(t, h, req)
		if action == "." || action == ".." {
			// an unclean path: the router redirects to the clean one first
			if rec.Code != http.StatusTemporaryRedirect {
				t.Fatalf("unclean path answered %d", rec.Code)
			}
			return
		}
		checkAnswer(t, rec, 200, 400, 404, 413)
		valid := slices.Contains([]string{"pause", "resume", "cancel"}, action)
		// JSON's white space only
		squeezed := bytes.Map(func(r rune) rune {
			if strings.ContainsRune(" \t\r\n", r) {
				return -1
			}
			return r
		}, body)
		empty := len(squeezed) == 0 || string(squeezed) == "{}" && bytes.Count(body, []byte("{")) == 1
		if valid && empty && len(body) <= fuzzMaxBody && rec.Code != 200 {
			t.Fatalf("%s with body %q answered %d %s", action, body, rec.Code, rec.Body.String())
		}
		if rec.Code == 200 && !valid {
			t.Fatalf("unknown action %q accepted", action)
		}
	})
}
