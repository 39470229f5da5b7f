package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// deadHub is the URL of a server that is gone: connections are refused.
func deadHub(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestHubUnreachableNamesTheURLAndWhereItCameFrom: every command that
// calls the hub says which URL it could not reach, whether --hub or
// FLEETWAVE_HUB said it, and how to point it elsewhere.
func TestHubUnreachableNamesTheURLAndWhereItCameFrom(t *testing.T) {
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	dead := deadHub(t)
	commands := [][]string{
		{"status"},
		{"node", "list"},
		{"node", "get", "n1"},
		{"node", "labels", "get", "n1"},
		{"node", "labels", "set", "n1", "tier=web"},
		{"node", "drain", "n1", "--reason", "disk"},
		{"node", "undrain", "n1"},
		{"rollout", "list"},
		{"rollout", "get", "app-g1"},
		{"rollout", "pause", "app-g1"},
		{"rollout", "create", "--brc", "app", "--nodes", "n1", "--dry-run"},
		{"rollout", "watch", "app-g1", "-o", "json"},
		{"approval", "list"},
	}
	for _, args := range commands {
		out, errb, code := runCLI(append(args, "--hub", dead+"/")...)
		if code != 1 || out != "" || !strings.HasPrefix(errb, "error: cannot reach the hub at "+dead+" (from --hub): ") ||
			!strings.Contains(errb, "connection refused") || !strings.Contains(errb, "\nhint: is the hub running there? point --hub or FLEETWAVE_HUB at its URL") {
			t.Fatalf("%q: exit %d\nstdout %q\nstderr %q", args, code, out, errb)
		}
	}
	t.Setenv("FLEETWAVE_HUB", dead)
	for _, args := range [][]string{{"node", "list"}, {"rollout", "watch", "x"}} {
		if _, errb, code := runCLI(args...); code != 1 || !strings.HasPrefix(errb, "error: cannot reach the hub at "+dead+" (from FLEETWAVE_HUB): ") {
			t.Fatalf("%q from FLEETWAVE_HUB: exit %d\n%s", args, code, errb)
		}
	}
}

// TestHubURLMustBeAnHTTPURL: a hub URL the client cannot call is refused
// before any request, saying how to fix it where it was given.
func TestHubURLMustBeAnHTTPURL(t *testing.T) {
	t.Setenv("FLEETWAVE_TOKEN", "")
	t.Setenv("FLEETWAVE_HUB", "")
	cases := []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"node", "list", "--hub", "127.0.0.1:8080"}, "fleetwave: --hub 127.0.0.1:8080: add http:// or https://\nTry: --hub http://127.0.0.1:8080\n"},
		{"", []string{"rollout", "watch", "x", "--hub", "localhost:8080"}, "fleetwave: --hub localhost:8080: add http:// or https://\nTry: --hub http://localhost:8080\n"},
		{"", []string{"status", "--hub", "hub.example"}, "fleetwave: --hub hub.example: add http:// or https://\nTry: --hub http://hub.example\n"},
		{"", []string{"approval", "list", "--hub", "ftp://hub.example"}, "fleetwave: --hub ftp://hub.example: the scheme must be http:// or https://, not ftp://\nTry: --hub http://hub.example\n"},
		{"", []string{"node", "list", "--hub", "http://"}, "fleetwave: --hub http://: no host after http://\nTry: --hub http://127.0.0.1:8080\n"},
		{"", []string{"node", "list", "--hub", ""}, "fleetwave: --hub : empty hub URL\nTry: --hub http://127.0.0.1:8080\n"},
		{"10.0.0.5:8080", []string{"rollout", "create", "--brc", "app", "--nodes", "n1"}, "fleetwave: FLEETWAVE_HUB=10.0.0.5:8080: add http:// or https://\nTry: FLEETWAVE_HUB=http://10.0.0.5:8080\n"},
	}
	for _, tc := range cases {
		t.Setenv("FLEETWAVE_HUB", tc.env)
		out, errb, code := runCLI(tc.args...)
		if code != 2 || out != "" || errb != tc.want {
			t.Fatalf("%q (FLEETWAVE_HUB=%q): exit %d\nstdout %q\nstderr\n got %q\nwant %q", tc.args, tc.env, code, out, errb, tc.want)
		}
	}
	// A URL with a path prefix (a hub behind a proxy) is fine.
	if err := checkHubURL("https://proxy.example/fleetwave/", "--hub"); err != nil {
		t.Fatal(err)
	}
}

// TestNodeLabelsSetRefusesBadPairsLocally: labels set checks its KEY=VALUE
// pairs as the hub would and never sends a refused set.
func TestNodeLabelsSetRefusesBadPairsLocally(t *testing.T) {
	fx := newApprovalFixture(t) // its hub panics on any node call: nothing may reach it
	const try = "\nTry: " + labelsSetExample + "\n"
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"node", "labels", "set"}, "labels set needs a node id, then the new labels as KEY=VALUE (or --clear)"},
		{[]string{"node", "labels", "set", "n1"}, "labels set replaces the whole label set: give every label as KEY=VALUE, or --clear to remove them all"},
		{[]string{"node", "labels", "set", "tier=web"}, `labels set needs the node id first, got "tier=web"`},
		{[]string{"node", "labels", "set", "n1", "tier=web", "--clear"}, "give --clear or KEY=VALUE labels, not both"},
		{[]string{"node", "labels", "set", "n1", "tier"}, `label "tier": want KEY=VALUE`},
		{[]string{"node", "labels", "set", "n1", "=web"}, `label "=web": missing key before '='`},
		{[]string{"node", "labels", "set", "n1", "tier="}, `label "tier=": missing value after '=' (values are never empty; to remove tier leave it out)`},
		{[]string{"node", "labels", "set", "n1", "tier=web", "tier=db"}, "label tier given twice (web and db): a node has one value per key"},
		{[]string{"node", "labels", "set", "n1", "tier=web", "bad key=x"}, `invalid label key "bad key", expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by "example.com/")`},
		{[]string{"node", "labels", "set", "n1", "tier=a/b"}, `invalid label value "a/b", expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit`},
	}
	for _, tc := range cases {
		out, errb, code := fx.cli(append(tc.args, "--token", "op-token")...)
		if want := "fleetwave: " + tc.msg + try; code != 2 || out != "" || errb != want {
			t.Fatalf("%q: exit %d\nstdout %q\nstderr\n got %q\nwant %q", tc.args, code, out, errb, want)
		}
	}
	if reqs := fx.requests(); len(reqs) != 0 {
		t.Fatalf("a refused label set reached the hub: %+v", reqs)
	}
}
