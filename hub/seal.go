package hub

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/reconciler"
)

// Sealed credentials keep generated credential values out of Redis.
//
// A template's credential_get_or_create renders, instead of the value, a
// marker that only the hub can open:
//
//	fwsealed.v1.<base64url, unpadded: nonce | AES-256-GCM(scope, value)>.
//
// Rendered configs travel through Redis (the item's template, the queued
// attempt) and so reach its AOF, its snapshots and, with an external
// server, another machine; with markers none of them holds a value. The
// hub opens the markers when it hands an attempt to its agent
// (PollAttempts), over the agent's authenticated request.
//
// The marker's alphabet (letters, digits, '-', '_', '.') is a plain YAML
// scalar and needs no escaping inside single or double quotes, JSON strings
// or URLs, so a marker renders wherever the value did. It ends with a '.',
// which base64url never contains, so text right after it (a suffix of
// letters) does not run into it. A filter applied to a credential in a
// template applies to the marker, not the value: one that alters it
// (upper, replace, truncate) leaves a marker that does not open, and the
// attempt fails (see unseal); one that leaves no trace of it (length,
// slices) works on the marker's text, which nothing can detect here.
//
// The nonce is derived from the scope, name and value, not random: the same
// credential seals to the same marker, so the rendered config and its
// config hash stay the same from one reconcile to the next, and across
// replicas sharing the credentials key (otherwise every reconcile would see
// a new config and upgrade the fleet again). It reveals only that two
// markers hold the same credential.
//
// The scope (reconciler.CredentialScope) is sealed with the value, and the
// hub checks it against the node an attempt is delivered to: a marker
// copied into another workspace's or node's config does not open there.
const (
	markerPrefix = "fwsealed.v1."
	markerEnd    = "."
	// sealLabel names the purpose of the keys derived from the credentials
	// key, and is the GCM additional data: the credentials key itself only
	// encrypts the credential store.
	sealLabel = "fleetwave payload seal v1"
)

// markerRE matches one marker; its group is the sealed bytes.
var markerRE = regexp.MustCompile(`fwsealed\.v1\.([A-Za-z0-9_-]+)\.`)

// markerWord is looked for, in any case, outside the markers found: a
// marker a filter or an edit broke must fail the config, not reach an
// agent as if it were the value.
const markerWord = "fwsealed"

// sealer seals credential values into markers and opens them. It is safe
// for concurrent use.
type sealer struct {
	aead   cipher.AEAD
	macKey []byte // derives the nonces
}

// newSealer derives the sealer's keys from the hub's credentials key.
func newSealer(key []byte) (*sealer, error) {
	encKey, err := hkdf.Key(sha256.New, key, nil, sealLabel+" encryption", 32)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	macKey, err := hkdf.Key(sha256.New, key, nil, sealLabel+" nonce", 32)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &sealer{aead: aead, macKey: macKey}, nil
}

// openSealer returns the sealer of the hub's credentials key, or nil when
// none is configured (then templates cannot create credentials at all).
func openSealer(cfg Config) (*sealer, error) {
	if cfg.CredentialsKeyFile == "" {
		return nil, nil
	}
	key, err := readKey(cfg.CredentialsKeyFile)
	if err != nil {
		return nil, err
	}
	return newSealer(key)
}

// appendField appends s with its length, so that fields never run into
// each other ("a"+"bc" and "ab"+"c" differ).
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// seal returns the marker of credential name of scope with value.
func (s *sealer) seal(scope, name, value string) string {
	mac := hmac.New(sha256.New, s.macKey)
	mac.Write(appendField(appendField(nil, scope), name))
	mac.Write([]byte(value))
	nonce := mac.Sum(nil)[:s.aead.NonceSize()]
	plain := append(appendField(nil, scope), value...)
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(sealLabel))
	return markerPrefix + base64.RawURLEncoding.EncodeToString(sealed) + markerEnd
}

// errNotOpen: a marker does not open. Its cause is not told apart on
// purpose (altered, truncated, sealed under another credentials key): GCM
// cannot tell them apart either.
var errNotOpen = errors.New("sealed credential does not open (altered, or sealed under another credentials key)")

// open returns the scope and value sealed in marker.
func (s *sealer) open(marker string) (scope, value string, err error) {
	m := markerRE.FindStringSubmatch(marker)
	if m == nil || m[0] != marker {
		return "", "", errNotOpen
	}
	// Strict: one text per ciphertext (no ignored trailing bits), so an
	// altered character never opens.
	sealed, err := base64.RawURLEncoding.Strict().DecodeString(m[1])
	ns := s.aead.NonceSize()
	if err != nil || len(sealed) < ns+s.aead.Overhead() {
		return "", "", errNotOpen
	}
	plain, err := s.aead.Open(nil, sealed[:ns], sealed[ns:], []byte(sealLabel))
	if err != nil {
		return "", "", errNotOpen
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > uint64(len(plain)-k) {
		return "", "", errNotOpen
	}
	return string(plain[k : k+int(n)]), string(plain[k+int(n):]), nil
}

// mayHoldMarker reports whether text may hold a marker, whole or broken.
func mayHoldMarker(text string) bool {
	return strings.Contains(strings.ToLower(text), markerWord)
}

// unseal replaces every marker in text by its value and returns the text
// and the values. allow says whether a scope's credentials may be opened
// here (nil: any). It fails, naming the marker by its position and never
// holding a value, when a marker does not open, holds a scope allow
// refuses, or when text holds a broken marker (markerWord outside the
// markers found).
func (s *sealer) unseal(text string, allow func(scope string) bool) (string, []string, error) {
	if !mayHoldMarker(text) {
		return text, nil, nil
	}
	var out strings.Builder
	var values []string
	last := 0
	for i, loc := range markerRE.FindAllStringIndex(text, -1) {
		if mayHoldMarker(text[last:loc[0]]) {
			return "", nil, errors.New("config holds a malformed sealed credential")
		}
		scope, value, err := s.open(text[loc[0]:loc[1]])
		if err != nil {
			return "", nil, fmt.Errorf("credential %d: %w", i+1, err)
		}
		if allow != nil && !allow(scope) {
			return "", nil, fmt.Errorf("credential %d: sealed for scope %s, which this node is not in", i+1, scope)
		}
		out.WriteString(text[last:loc[0]])
		out.WriteString(value)
		values = append(values, value)
		last = loc[1]
	}
	if mayHoldMarker(text[last:]) {
		return "", nil, errors.New("config holds a malformed sealed credential")
	}
	out.WriteString(text[last:])
	return out.String(), values, nil
}

// credential wraps the credential store's get so that templates render a
// marker instead of the value.
func (s *sealer) credential(get reconciler.CredentialFunc) reconciler.CredentialFunc {
	return func(scope, name string, length int) (string, error) {
		v, err := get(scope, name, length)
		if err != nil {
			return "", err
		}
		return s.seal(scope, name, v), nil
	}
}

// validateConfig wraps a config_schema check so that it sees the values,
// not the markers (a schema may constrain a password's length or
// characters). A marker it cannot open fails the check: the item is then
// blocked as invalid_config at planning, before any attempt. Values are
// masked in its error, whatever the check's messages quote.
func (s *sealer) validateConfig(validate func(schema, rendered string) error) func(schema, rendered string) error {
	return func(schema, rendered string) error {
		plain, values, err := s.unseal(rendered, nil)
		if err != nil {
			return err
		}
		if err := validate(schema, plain); err != nil {
			msg := err.Error()
			for _, v := range values {
				msg = strings.ReplaceAll(msg, v, "(credential)")
			}
			return errors.New(msg)
		}
		return nil
	}
}

// deliveryScope says which credential scopes node may receive: the scope
// of its record in this hub's snapshot. A replica that never held the
// lease has no snapshot (only the leader loads the repository): there the
// node's own scope is checked, and a workspace scope is let through,
// since the node's workspace is not known here.
func (h *Hub) deliveryScope(node string) func(scope string) bool {
	snap := h.Snapshot()
	var n *fleetwave.Node
	if snap != nil {
		n = snap.Nodes[node]
	}
	return func(scope string) bool {
		switch {
		case n != nil:
			return scope == reconciler.CredentialScope(n)
		case snap != nil: // not in the repository (any more): no workspace
			return scope == "node/"+node
		default:
			return scope == "node/"+node || strings.HasPrefix(scope, "workspace/")
		}
	}
}

// unsealFor returns config with its markers replaced by their values for
// node, and how many there were.
func (h *Hub) unsealFor(node, config string) (string, int, error) {
	if !mayHoldMarker(config) {
		return config, 0, nil
	}
	if h.sealer == nil {
		return "", 0, errors.New("config holds sealed credentials and this hub has no credentials key")
	}
	out, values, err := h.sealer.unseal(config, h.deliveryScope(node))
	return out, len(values), err
}

// refuseAttempt ends an attempt whose config does not unseal for its node
// as a permanent failure, without handing it to the agent: the agent
// would run the action with a marker in place of a credential (an install
// could set a password to it). The item is then blocked
// (permanent_failure) and the warning says why; neither holds the config.
func (h *Hub) refuseAttempt(ctx context.Context, node string, a fleetwave.Attempt, cause error) {
	h.log.Warn().Str("node", node).Str("attempt", a.ID).Str("item", a.Item).Str("rollout", a.Rollout).
		Str("block", a.Block).Str("action", a.Action).Str("error", cause.Error()).
		Msg("attempt not delivered: its config does not unseal for this node; failed as permanent")
	// Popped is delivered: the failure is recorded even if the poll ended.
	res := fleetwave.AttemptResult{AttemptID: a.ID, Fence: a.Fence, Class: fleetwave.ResultPermanent, ExitCode: -1}
	if err := h.eng.Complete(context.WithoutCancel(ctx), node, res); err != nil && !errors.Is(err, engine.ErrResultRecorded) {
		h.log.Warn().Err(err).Str("node", node).Str("attempt", a.ID).
			Msg("refused attempt not recorded as failed: it ends at its deadline")
		return
	}
	h.kick(h.statusNow)
}
