package gitsync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
)

func sign(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func TestVerifyWebhook(t *testing.T) {
	const secret = "s3cret-hook"
	body := `{"ref":"refs/heads/main","after":"0123"}`
	tests := []struct {
		name   string
		header http.Header
		body   string
		secret string
		want   error
	}{
		{"GitHub signature verifies", http.Header{"X-Hub-Signature-256": {sign(secret, body)}}, body, secret, nil},
		{"generic signature verifies", http.Header{"X-Fleetwave-Signature": {sign(secret, body)}}, body, secret, nil},
		{"GitLab token verifies", http.Header{"X-Gitlab-Token": {secret}}, body, secret, nil},
		{"a tampered body is refused", http.Header{"X-Hub-Signature-256": {sign(secret, body)}}, body + " ", secret, ErrWebhookSignature},
		{"another secret is refused", http.Header{"X-Hub-Signature-256": {sign("other", body)}}, body, secret, ErrWebhookSignature},
		{"a sha1 signature is refused", http.Header{"X-Hub-Signature-256": {"sha1=0123456789abcdef0123456789abcdef01234567"}}, body, secret, ErrWebhookSignature},
		{"a truncated digest is refused", http.Header{"X-Fleetwave-Signature": {sign(secret, body)[:20]}}, body, secret, ErrWebhookSignature},
		{"a wrong GitLab token is refused", http.Header{"X-Gitlab-Token": {secret + "x"}}, body, secret, ErrWebhookSignature},
		{"one good and one bad header are refused", http.Header{"X-Gitlab-Token": {secret}, "X-Hub-Signature-256": {sign("other", body)}}, body, secret, ErrWebhookSignature},
		{"a repeated header is refused", http.Header{"X-Hub-Signature-256": {sign(secret, body), sign(secret, body)}}, body, secret, ErrWebhookSignature},
		{"no signature is refused", http.Header{"X-GitHub-Event": {"push"}}, body, secret, ErrWebhookUnsigned},
		{"no configured secret refuses everything", http.Header{"X-Gitlab-Token": {""}}, body, "", ErrWebhookNoSecret},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyWebhook(tc.header, []byte(tc.body), []byte(tc.secret))
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("VerifyWebhook = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWebhookBranch(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		body   string
		branch string
		ok     bool
	}{
		{"GitHub push", http.Header{"X-Github-Event": {"push"}}, `{"ref":"refs/heads/main"}`, "main", true},
		{"GitHub push to a nested branch", http.Header{"X-Github-Event": {"push"}}, `{"ref":"refs/heads/feature/x"}`, "feature/x", true},
		{"GitHub ping", http.Header{"X-Github-Event": {"ping"}}, `{"zen":"hi"}`, "", false},
		{"GitHub tag push", http.Header{"X-Github-Event": {"push"}}, `{"ref":"refs/tags/v1"}`, "", false},
		{"GitLab push", http.Header{"X-Gitlab-Event": {"Push Hook"}}, `{"object_kind":"push","ref":"refs/heads/release"}`, "release", true},
		{"GitLab merge request", http.Header{"X-Gitlab-Event": {"Merge Request Hook"}}, `{"ref":"refs/heads/main"}`, "", false},
		{"generic branch field", http.Header{}, `{"branch":"main"}`, "main", true},
		{"not JSON", http.Header{}, `ref=main`, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := WebhookBranch(tc.header, []byte(tc.body))
			if b != tc.branch || ok != tc.ok {
				t.Fatalf("WebhookBranch = %q, %v; want %q, %v", b, ok, tc.branch, tc.ok)
			}
		})
	}
}
