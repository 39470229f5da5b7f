package gitsync

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// MaxWebhookBody is the body size the API reads at most from a git
// webhook: push payloads are a few KiB; a larger body (GitHub allows up to
// 25 MB) is refused with 413 before verification, and the poll interval
// picks the push up instead. Reading less bounds what an unauthenticated
// caller can make the hub hold in memory.
const MaxWebhookBody = 1 << 20

// Webhook signature headers VerifyWebhook accepts.
const (
	HeaderGitHubSignature    = "X-Hub-Signature-256"   // "sha256=" + hex HMAC-SHA256 of the body
	HeaderGitLabToken        = "X-Gitlab-Token"        // the shared secret itself
	HeaderFleetwaveSignature = "X-Fleetwave-Signature" // "sha256=" + hex HMAC-SHA256 of the body
)

// ErrWebhookUnsigned is returned by VerifyWebhook when the request carries
// none of the accepted signature headers.
var ErrWebhookUnsigned = errors.New("webhook carries no signature")

// ErrWebhookSignature is returned by VerifyWebhook when a signature header
// is malformed or does not match the body and secret.
var ErrWebhookSignature = errors.New("webhook signature does not match")

// ErrWebhookNoSecret is returned by VerifyWebhook when no secret is
// configured: it never accepts a hook without one. (The hub, without a
// webhook_secret_file, accepts unsigned hooks by not calling it: a hook
// only asks for a fetch, which polling does anyway.)
var ErrWebhookNoSecret = errors.New("no webhook secret configured")

// VerifyWebhook checks that a git webhook request was sent by someone who
// knows secret. It accepts GitHub's X-Hub-Signature-256 ("sha256=" + hex
// HMAC-SHA256 of the body; Gitea and Forgejo send the same header),
// GitLab's X-Gitlab-Token (the secret itself, compared in constant time)
// and fleetwave's generic X-Fleetwave-Signature (same format as GitHub's).
// Every one of these headers present must verify, and at least one must be.
// It returns nil, ErrWebhookNoSecret, ErrWebhookUnsigned or an error
// wrapping ErrWebhookSignature; the API answers 401 to all but nil and
// must not echo the header values. body is the raw request body, read with
// a cap of MaxWebhookBody.
func VerifyWebhook(header http.Header, body []byte, secret []byte) error {
	if len(secret) == 0 {
		return ErrWebhookNoSecret
	}
	seen := false
	for _, name := range []string{HeaderGitHubSignature, HeaderFleetwaveSignature} {
		vals := header.Values(name)
		if len(vals) == 0 {
			continue
		}
		seen = true
		if len(vals) != 1 {
			return fmt.Errorf("%w: %s given %d times", ErrWebhookSignature, name, len(vals))
		}
		if err := checkHMAC(vals[0], body, secret); err != nil {
			return fmt.Errorf("%w: %s: %s", ErrWebhookSignature, name, err)
		}
	}
	if vals := header.Values(HeaderGitLabToken); len(vals) > 0 {
		seen = true
		if len(vals) != 1 {
			return fmt.Errorf("%w: %s given %d times", ErrWebhookSignature, HeaderGitLabToken, len(vals))
		}
		// hashing first makes the comparison constant-time in the length too
		got, want := sha256.Sum256([]byte(vals[0])), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return fmt.Errorf("%w: %s", ErrWebhookSignature, HeaderGitLabToken)
		}
	}
	if !seen {
		return ErrWebhookUnsigned
	}
	return nil
}

func checkHMAC(value string, body, secret []byte) error {
	hexSig, ok := strings.CutPrefix(strings.TrimSpace(value), "sha256=")
	if !ok {
		return errors.New(`not "sha256=<hex>"`)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return errors.New("not a hex SHA-256 digest")
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return errors.New("digest mismatch")
	}
	return nil
}

// WebhookBranch returns the branch a verified push webhook is about: the
// "ref" field of GitHub, GitLab, Gitea and generic payloads
// ("refs/heads/<branch>"), or a generic payload's "branch" field. ok is
// false when the payload names no branch: a ping, a tag push, another
// event or an unknown format. The hub ignores a hook whose ok is true and
// whose branch is not the tracked one; any other verified hook may trigger
// a fetch (it is cheap when nothing moved).
func WebhookBranch(header http.Header, body []byte) (branch string, ok bool) {
	if ev := header.Get("X-GitHub-Event"); ev != "" && ev != "push" {
		return "", false
	}
	if ev := header.Get("X-Gitea-Event"); ev != "" && ev != "push" {
		return "", false
	}
	if ev := header.Get("X-Gitlab-Event"); ev != "" && ev != "Push Hook" && ev != "System Hook" {
		return "", false
	}
	var p struct {
		Ref    string `json:"ref"`
		Branch string `json:"branch"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return "", false
	}
	if p.Ref != "" {
		b, ok := strings.CutPrefix(p.Ref, "refs/heads/")
		if !ok || b == "" {
			return "", false
		}
		return b, true
	}
	if p.Branch != "" && !strings.HasPrefix(p.Branch, "refs/") {
		return p.Branch, true
	}
	return "", false
}
