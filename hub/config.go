package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/gitsync"
)

// DefaultStatusBranch is where status commits go unless repo.status_branch
// says otherwise.
const DefaultStatusBranch = "fleetwave/status"

// Approval scopes (approval.scope).
const (
	ApprovalScopeConfig = "config"
	ApprovalScopeAll    = "all"
)

// signerKey turns a configured key into what gitsync verifies with: an
// allowed_signers line's leading principal (and options) are dropped, the
// key type, data and comment kept; an armored OpenPGP block is kept as is.
func signerKey(k string) string {
	k = strings.TrimSpace(k)
	if strings.HasPrefix(k, "-----BEGIN") {
		return k
	}
	f := strings.Fields(k)
	for i, w := range f {
		if strings.HasPrefix(w, "ssh-") || strings.HasPrefix(w, "ecdsa-") || strings.HasPrefix(w, "sk-") {
			return strings.Join(f[i:], " ")
		}
	}
	return k
}

// SignerKeys returns the commit signing keys of the identities, keyed
// "name" (first key) or "name#n" (the n-th): IdentityOfSigner maps back.
func (c *Config) SignerKeys() gitsync.SignerKeys {
	out := gitsync.SignerKeys{}
	for _, id := range c.Identities {
		for j, k := range id.Keys {
			name := id.Name
			if j > 0 {
				name = fmt.Sprintf("%s#%d", id.Name, j+1)
			}
			out[name] = signerKey(k)
		}
	}
	return out
}

// IdentityOfSigner returns the identity name of a SignerKeys key.
func IdentityOfSigner(key string) string {
	name, _, _ := strings.Cut(key, "#")
	return name
}

// Config is the hub configuration (hub.yaml). Policy and identities live
// here, not in the config repository.
type Config struct {
	Repo RepoConfig `yaml:"repo"`
	// Redis is "managed" (default: a supervised redis-server child with AOF
	// in DataDir), "embedded" (in-process, not durable: demos and first
	// tries) or a URL (redis://host:port/db, rediss://..., unix:///path).
	Redis  string `yaml:"redis"`
	Listen string `yaml:"listen"`
	// DataDir holds the git mirror and, in managed mode, Redis's files.
	DataDir string       `yaml:"data_dir"`
	Status  StatusConfig `yaml:"status"`
	Agents  AgentsConfig `yaml:"agents"`
	// LeaseTTL is the leader lease; a lost leader is replaced within it.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// StepInterval is how often the engine dispatches and expires work.
	StepInterval Duration `yaml:"step_interval"`
	// ReconcileInterval re-plans the fleet even without a trigger.
	ReconcileInterval Duration `yaml:"reconcile_interval"`
	// HubID names this replica in the leader lease (default: host name + pid).
	HubID string `yaml:"hub_id"`
	// Identities are the API callers: a name, a role (admin, operator,
	// viewer) and the hex sha256 of their bearer token.
	Identities []Identity `yaml:"identities"`
	// CredentialsKeyFile holds the 32-byte key (64 hex characters) that
	// encrypts credentials created by templates (credential_get_or_create)
	// at rest in DataDir; unset = templates cannot create credentials.
	CredentialsKeyFile string `yaml:"credentials_key_file"`
	// StaleAfter marks a node stale when its last full report is older.
	StaleAfter Duration `yaml:"stale_after"`
	// WebhookSecretFile holds the secret POST /api/v1/hooks/git payloads are
	// signed with (GitHub, GitLab or generic HMAC); unset = hooks unsigned.
	WebhookSecretFile string `yaml:"webhook_secret_file"`
	// Approval is the two-person policy of config rollouts.
	Approval ApprovalConfig `yaml:"approval"`
}

// ApprovalConfig is the approval policy. It lives in hub.yaml, not in the
// repository, which the people it controls can edit.
type ApprovalConfig struct {
	// Required gates every path that creates a config rollout (a BRC change
	// raising a generation, a manual request that applies config, a
	// rollback to a version not applied everywhere): the rollout is created
	// only by an approved request.
	Required bool `yaml:"required"`
	// TTL bounds how long a request waits for its decision, counted on the
	// hub's clock from when the hub first saw it (default 24h).
	TTL Duration `yaml:"ttl"`
	// Scope says what the gate covers: "config" (default: changes of
	// versions or rendered configs) or "all" (lifecycle and operational
	// actions too: start, stop, uninstall, backup, ...).
	Scope string `yaml:"scope"`
	// RequireSignedCommits refuses a commit that changes BRCs, blocks or
	// nodes without a signature by a configured identity's key: the
	// snapshot stays at the last good commit.
	RequireSignedCommits bool `yaml:"require_signed_commits"`
}

// readKey reads a 32-byte key written as 64 hex characters.
func readKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credentials key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("credentials key %s: want 64 hex characters (32 bytes): head -c 32 /dev/urandom | xxd -p -c 64", path)
	}
	return key, nil
}

// Identity is one person or system of hub.yaml: an API caller (bearer
// token, by its sha256) and a commit signer (its public keys).
type Identity struct {
	Name        string `yaml:"name"`
	Role        string `yaml:"role"`
	TokenSHA256 string `yaml:"token_sha256"`
	// Keys are the public keys the identity signs commits with: armored
	// OpenPGP public key blocks and/or SSH public keys (an allowed_signers
	// or authorized_keys line: "ssh-ed25519 AAAA... comment", with or
	// without a leading principal).
	Keys []string `yaml:"keys"`
}

// RepoConfig says which repository and branch to follow.
type RepoConfig struct {
	// URL is a file:// URL or local path of the config repository's remote.
	URL          string   `yaml:"url"`
	Branch       string   `yaml:"branch"`
	PollInterval Duration `yaml:"poll_interval"`
	// StatusBranch receives the status commits (default fleetwave/status:
	// an orphan branch holding only status/), so the tracked branch carries
	// only people's commits and the hub's commits of API writes; the
	// tracked branch's own name (e.g. main) puts status there instead.
	StatusBranch string `yaml:"status_branch"`
	// NoWatch turns off watching a local remote (then only polling and the
	// webhook notice pushes).
	NoWatch bool `yaml:"no_watch"`
}

// StatusConfig tunes status write-back.
type StatusConfig struct {
	// Interval batches status changes into one commit at most this often.
	Interval Duration `yaml:"interval"`
}

// AgentsConfig holds the agents' credentials: node id -> hex sha256 of the
// node's bearer token (the token itself never enters the hub config).
type AgentsConfig struct {
	Tokens map[string]string `yaml:"tokens"`
}

// Duration is a time.Duration written as "5s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// LoadConfig reads and checks a hub.yaml; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// SetDefaults fills unset fields.
func (c *Config) SetDefaults() {
	if c.Repo.Branch == "" {
		c.Repo.Branch = "main"
	}
	if c.Repo.StatusBranch == "" {
		c.Repo.StatusBranch = DefaultStatusBranch
	}
	if c.Repo.PollInterval == 0 {
		c.Repo.PollInterval = Duration(5 * time.Second)
	}
	if c.Redis == "" {
		c.Redis = "managed"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Status.Interval == 0 {
		c.Status.Interval = Duration(5 * time.Second)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = Duration(15 * time.Second)
	}
	if c.StepInterval == 0 {
		c.StepInterval = Duration(200 * time.Millisecond)
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = Duration(2 * time.Minute)
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = Duration(30 * time.Second)
	}
	if c.Approval.TTL == 0 {
		c.Approval.TTL = Duration(24 * time.Hour)
	}
	if c.Approval.Scope == "" {
		c.Approval.Scope = ApprovalScopeConfig
	}
	if c.HubID == "" {
		host, _ := os.Hostname()
		c.HubID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
}

// Validate checks a configuration after SetDefaults.
func (c *Config) Validate() error {
	var errs []error
	if c.Repo.URL == "" {
		errs = append(errs, errors.New("repo.url is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	for node, h := range c.Agents.Tokens {
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("agents.tokens.%s: want the hex sha256 of the token (64 hex characters)", node))
		}
	}
	seen := map[string]bool{}
	for i, id := range c.Identities {
		if id.Name == "" || seen[id.Name] {
			errs = append(errs, fmt.Errorf("identities[%d]: a unique name is required", i))
		}
		seen[id.Name] = true
		switch id.Role {
		case "admin", "operator", "viewer":
		default:
			errs = append(errs, fmt.Errorf("identities[%d] (%s): role %q, want admin, operator or viewer", i, id.Name, id.Role))
		}
		if b, err := hex.DecodeString(id.TokenSHA256); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("identities[%d] (%s): token_sha256 must be 64 hex characters", i, id.Name))
		}
		for j, k := range id.Keys {
			if err := (gitsync.SignerKeys{id.Name: signerKey(k)}).Check(); err != nil {
				errs = append(errs, fmt.Errorf("identities[%d] (%s): keys[%d]: %w", i, id.Name, j, err))
			}
		}
	}
	switch c.Approval.Scope {
	case ApprovalScopeConfig, ApprovalScopeAll:
	default:
		errs = append(errs, fmt.Errorf("approval.scope %q: want %s or %s", c.Approval.Scope, ApprovalScopeConfig, ApprovalScopeAll))
	}
	if c.Approval.TTL.D() < time.Minute {
		errs = append(errs, errors.New("approval.ttl must be at least 1m"))
	}
	if c.LeaseTTL.D() < time.Second {
		errs = append(errs, errors.New("lease_ttl must be at least 1s"))
	}
	return errors.Join(errs...)
}

// HashToken returns the hex sha256 of an agent token, the form hub.yaml holds.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return hex.EncodeToString(sum[:])
}
