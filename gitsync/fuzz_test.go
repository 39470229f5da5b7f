package gitsync_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/gitsync"
)

func fzSign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// fzFlip changes the byte at pos of b (appends one to an empty b): XOR
// with x, or with 1 when x is 0, so the result always differs.
func fzFlip(b []byte, pos uint16, x byte) []byte {
	if x == 0 {
		x = 1
	}
	out := bytes.Clone(b)
	if len(out) == 0 {
		return []byte{x}
	}
	out[int(pos)%len(out)] ^= x
	return out
}

// fzHMACHeaders are the header sets FuzzVerifyWebhook signs with.
var fzHMACHeaders = [][]string{
	{gitsync.HeaderGitHubSignature},
	{gitsync.HeaderFleetwaveSignature},
	{gitsync.HeaderGitHubSignature, gitsync.HeaderFleetwaveSignature},
}

func fzHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// fzSameDigest reports whether two signature header values differ only in
// the case of hex letters after "sha256=": the same digest (VerifyWebhook
// decodes the hex, which reads both cases).
func fzSameDigest(a, b string) bool {
	ha, okA := strings.CutPrefix(a, "sha256=")
	hb, okB := strings.CutPrefix(b, "sha256=")
	return okA && okB && strings.EqualFold(ha, hb) && strings.Trim(strings.ToLower(hb), "0123456789abcdef") == ""
}

// FuzzVerifyWebhook checks gitsync.VerifyWebhook, which the API runs on
// every git hook, for arbitrary bodies, secrets and header values. It never
// panics; without a secret nothing is accepted (ErrWebhookNoSecret);
// without a signature header ErrWebhookUnsigned; a body signed with the
// secret (X-Hub-Signature-256, X-Fleetwave-Signature or both) is accepted,
// and refused with ErrWebhookSignature after any single-byte change of the
// body, of the signature (other than the case of a hex digit: the same
// digest), or of the secret, and when a header is given twice; the GitLab
// token is accepted when it is the secret (it does not cover the body) and
// refused after any single-byte change; an arbitrary signature value is
// accepted only if it spells the body's HMAC.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main"}`), []byte("s3cret"), uint8(0), uint16(0), byte(1), "sha256=00")
	f.Add([]byte(""), []byte("k"), uint8(1), uint16(7), byte(0x20), " sha256="+strings.Repeat("AB", 32)+" ")
	f.Add([]byte("\x00\xff"), []byte(""), uint8(2), uint16(70), byte(0x80), "")
	f.Fuzz(func(t *testing.T, body, secret []byte, which uint8, pos uint16, x byte, raw string) {
		sig := fzSign(secret, body)
		names := fzHMACHeaders[int(which)%len(fzHMACHeaders)]
		signed := http.Header{}
		for _, n := range names {
			signed.Set(n, sig)
		}
		if len(secret) == 0 {
			for _, h := range []http.Header{signed, {}, fzHeader(gitsync.HeaderGitLabToken, "")} {
				if err := gitsync.VerifyWebhook(h, body, secret); !errors.Is(err, gitsync.ErrWebhookNoSecret) {
					t.Fatalf("no secret: %v", err)
				}
			}
			return
		}
		refused := func(what string, h http.Header, b, s []byte) {
			t.Helper()
			if err := gitsync.VerifyWebhook(h, b, s); !errors.Is(err, gitsync.ErrWebhookSignature) {
				t.Fatalf("%s: %v, want ErrWebhookSignature", what, err)
			}
		}
		if err := gitsync.VerifyWebhook(http.Header{}, body, secret); !errors.Is(err, gitsync.ErrWebhookUnsigned) {
			t.Fatalf("unsigned: %v", err)
		}
		if err := gitsync.VerifyWebhook(signed, body, secret); err != nil {
			t.Fatalf("signed with %v: %v", names, err)
		}
		refused("body changed", signed, fzFlip(body, pos, x), secret)
		refused("secret changed", signed, body, fzFlip(secret, pos, x))
		if bad := string(fzFlip([]byte(sig), pos, x)); !fzSameDigest(sig, bad) {
			for _, n := range names {
				h := signed.Clone()
				h.Set(n, bad)
				refused("signature changed in "+n, h, body, secret)
			}
		}
		twice := signed.Clone()
		twice.Add(names[0], sig)
		refused("header given twice", twice, body, secret)

		token := fzHeader(gitsync.HeaderGitLabToken, string(secret))
		if err := gitsync.VerifyWebhook(token, fzFlip(body, pos, x), secret); err != nil {
			t.Fatalf("GitLab token: %v", err)
		}
		refused("GitLab token changed", fzHeader(gitsync.HeaderGitLabToken, string(fzFlip(secret, pos, x))), body, secret)
		both := token.Clone()
		both.Set(names[0], string(fzFlip([]byte(sig), pos, x)))
		if err := gitsync.VerifyWebhook(both, body, secret); err == nil && !fzSameDigest(sig, both.Get(names[0])) {
			t.Fatal("a valid GitLab token let a wrong signature through")
		}

		// an arbitrary value: accepted only if it spells the digest
		if err := gitsync.VerifyWebhook(fzHeader(names[0], raw), body, secret); err == nil {
			hexSig, ok := strings.CutPrefix(strings.TrimSpace(raw), "sha256=")
			got, derr := hex.DecodeString(hexSig)
			want, _ := hex.DecodeString(strings.TrimPrefix(sig, "sha256="))
			if !ok || derr != nil || !bytes.Equal(got, want) {
				t.Fatalf("signature %q accepted for a body whose signature is %s", raw, sig)
			}
		} else if !errors.Is(err, gitsync.ErrWebhookSignature) {
			t.Fatalf("signature %q: %v, want ErrWebhookSignature", raw, err)
		}
	})
}
