package hub

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/api"
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
	// tries), a URL (redis://host:port/db, rediss://..., unix:///path), or
	// a Sentinel or Cluster deployment in its URL form
	// (RedisSentinel.URL, RedisCluster.URL). In hub.yaml a deployment is
	// written as a mapping, which LoadConfig turns into that URL form:
	//
	//	redis:
	//	  sentinel: {master: mymaster, addrs: [h1:26379, h2:26379, h3:26379], password_file: /etc/fleetwave/redis.pass}
	//
	//	redis:
	//	  cluster: {addrs: [h1:6379, h2:6379, h3:6379], password_file: /etc/fleetwave/redis.pass}
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
	// AgentArtifacts holds the agent builds the hub serves for the
	// built-in upgrade of the fleetwave-agent block (artifacts.go).
	AgentArtifacts AgentArtifactsConfig `yaml:"agent_artifacts"`
	// Debug serves the Go runtime's profiles; off unless debug.listen is set.
	Debug DebugConfig `yaml:"debug"`
}

// DebugConfig is hub.yaml's debug section: the Go runtime's profiles
// (net/http/pprof: heap, goroutines, CPU, ...) under /debug/pprof/ on a
// listener of their own, never the API's.
type DebugConfig struct {
	// Listen is the host:port of the profiles, e.g. 127.0.0.1:6060; unset
	// = no profiles. It must be a loopback address unless AllowRemote.
	Listen string `yaml:"listen"`
	// AllowRemote lets Listen be any address. The profiles need no token,
	// show the hub's command line and what its memory holds, and a CPU
	// profile or trace costs the hub while it runs: open them beyond the
	// host only on a trusted network.
	AllowRemote bool `yaml:"allow_remote"`
	// MutexProfileFraction turns on the mutex profile (/debug/pprof/mutex:
	// where goroutines waited for a lock another held, and for how long),
	// sampling one contention event in this many; 0 = off. The runtime
	// records a stack at each sampled contended unlock: the smaller the
	// number, the more a contended hub pays for it. It needs Listen.
	MutexProfileFraction int `yaml:"mutex_profile_fraction"`
}

// check wants Listen to be host:port, its host a loopback address (an
// IP or localhost) unless AllowRemote.
func (d DebugConfig) check() error {
	if d.MutexProfileFraction < 0 {
		return fmt.Errorf("debug.mutex_profile_fraction %d: want 0 (off) or more (one contention sampled in that many)", d.MutexProfileFraction)
	}
	if d.Listen == "" {
		if d.MutexProfileFraction > 0 {
			return fmt.Errorf("debug.mutex_profile_fraction is set but debug.listen is not: the profile is served there")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(d.Listen)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return fmt.Errorf("debug.listen %q: want host:port, e.g. 127.0.0.1:6060", d.Listen)
	}
	if d.AllowRemote {
		return nil
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("debug.listen %q: the profiles need no token, so they listen on loopback only (127.0.0.1, [::1] or localhost); "+
		"set debug.allow_remote: true to serve them on another address", d.Listen)
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
	// MaxPollWait caps the wait of an agent's long poll (default 30s,
	// between 1s and 10m). Agents ask for their poll_wait; an idle fleet
	// of n agents polls about n / wait times a second, so a large fleet
	// does better with longer waits (e.g. 2m for 100,000 agents, with
	// poll_wait: 2m on the agents). A dispatch ends a waiting poll at
	// once whatever its wait.
	MaxPollWait Duration `yaml:"max_poll_wait"`
}

// MaxPollWaitLimit bounds agents.max_poll_wait: proxies and load
// balancers commonly cut a request silent for longer.
const MaxPollWaitLimit = 10 * time.Minute

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
	c, err := decodeConfig(data)
	if err != nil {
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
	if c.Agents.MaxPollWait == 0 {
		c.Agents.MaxPollWait = Duration(api.DefaultMaxPollWait)
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
	if d := c.Agents.MaxPollWait.D(); d < time.Second || d > MaxPollWaitLimit {
		errs = append(errs, fmt.Errorf("agents.max_poll_wait %s: want between 1s and %s", d, MaxPollWaitLimit))
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
	errs = append(errs, checkRedis(c.Redis)...)
	if err := c.AgentArtifacts.check(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Debug.check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkRedis checks the redis setting: a known mode, a URL, or a Sentinel
// or Cluster URL form whose fields are complete and whose password files
// are readable. Messages never hold a password.
func checkRedis(mode string) []error {
	switch {
	case mode == "managed" || mode == "embedded":
		return nil
	case strings.HasPrefix(mode, sentinelScheme):
		s, err := ParseRedisSentinel(mode)
		if err != nil {
			return []error{err}
		}
		return s.check()
	case strings.HasPrefix(mode, clusterScheme):
		c, err := ParseRedisCluster(mode)
		if err != nil {
			return []error{err}
		}
		return c.check()
	case strings.Contains(mode, "://"):
		return nil // opened by redis.ParseURL, whose errors name no password
	}
	return []error{fmt.Errorf("redis %q: want managed, embedded, a redis:// URL, or a mapping with sentinel or cluster", mode)}
}

// The URL forms of Sentinel and Cluster deployments.
const (
	sentinelScheme = "redis-sentinel://"
	clusterScheme  = "redis-cluster://"
)

// RedisSentinel is a Redis primary found through Sentinel: hub.yaml's
// "redis: {sentinel: {...}}". The hub asks the Sentinels for the primary
// of Master and follows it when they fail over.
type RedisSentinel struct {
	// Master is the name the Sentinels monitor the primary under.
	Master string `yaml:"master"`
	// Addrs are the Sentinels' host:port addresses (26379 by convention).
	Addrs []string `yaml:"addrs"`
	// PasswordFile holds the password of the Redis servers (requirepass);
	// unset = none.
	PasswordFile string `yaml:"password_file"`
	// SentinelPasswordFile holds the Sentinels' own password (their
	// requirepass); unset = none.
	SentinelPasswordFile string `yaml:"sentinel_password_file"`
	// DB is the database number (default 0).
	DB int `yaml:"db"`
}

// RedisCluster is a Redis Cluster: hub.yaml's "redis: {cluster: {...}}".
// Every key of the engine shares one hash slot, so the hub's state lives
// on one primary (and its replicas) of the cluster.
type RedisCluster struct {
	// Addrs are some of the cluster's nodes (host:port): the client learns
	// the others from them.
	Addrs []string `yaml:"addrs"`
	// PasswordFile holds the nodes' password (requirepass); unset = none.
	PasswordFile string `yaml:"password_file"`
}

// URL is the Config.Redis form of s:
// redis-sentinel://HOST:PORT,HOST:PORT/MASTER?db=N&password_file=PATH&sentinel_password_file=PATH
// (the query parameters only when set). It names password files, never a
// password.
func (s RedisSentinel) URL() string {
	q := url.Values{}
	if s.DB != 0 {
		q.Set("db", strconv.Itoa(s.DB))
	}
	if s.PasswordFile != "" {
		q.Set("password_file", s.PasswordFile)
	}
	if s.SentinelPasswordFile != "" {
		q.Set("sentinel_password_file", s.SentinelPasswordFile)
	}
	return topologyURL(sentinelScheme, s.Addrs, "/"+url.PathEscape(s.Master), q)
}

// URL is the Config.Redis form of c:
// redis-cluster://HOST:PORT,HOST:PORT?password_file=PATH (the query only
// when set).
func (c RedisCluster) URL() string {
	q := url.Values{}
	if c.PasswordFile != "" {
		q.Set("password_file", c.PasswordFile)
	}
	return topologyURL(clusterScheme, c.Addrs, "", q)
}

func topologyURL(scheme string, addrs []string, path string, q url.Values) string {
	u := scheme + strings.Join(addrs, ",") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// splitTopologyURL splits a Sentinel or Cluster URL form into its
// addresses, its path (without the leading slash, unescaped) and its query,
// refusing query parameters other than allowed and credentials in the URL.
func splitTopologyURL(field, scheme, s string, allowed ...string) ([]string, string, url.Values, error) {
	rest := strings.TrimPrefix(s, scheme)
	rest, rawQuery, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if strings.Contains(hosts, "@") {
		return nil, "", nil, fmt.Errorf("%s: no credentials in the URL; give password_file", field)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: query: %w", field, err)
	}
	for k := range q {
		if !slices.Contains(allowed, k) {
			return nil, "", nil, fmt.Errorf("%s: unknown parameter %q; want %s", field, k, strings.Join(allowed, ", "))
		}
	}
	if path, err = url.PathUnescape(path); err != nil {
		return nil, "", nil, fmt.Errorf("%s: %w", field, err)
	}
	var addrs []string
	if hosts != "" {
		addrs = strings.Split(hosts, ",")
	}
	return addrs, path, q, nil
}

// ParseRedisSentinel reads the URL form of a Sentinel deployment (see
// RedisSentinel.URL); Validate checks the fields.
func ParseRedisSentinel(s string) (RedisSentinel, error) {
	addrs, master, q, err := splitTopologyURL("redis.sentinel", sentinelScheme, s, "db", "password_file", "sentinel_password_file")
	if err != nil {
		return RedisSentinel{}, err
	}
	out := RedisSentinel{Master: master, Addrs: addrs, PasswordFile: q.Get("password_file"), SentinelPasswordFile: q.Get("sentinel_password_file")}
	if v := q.Get("db"); v != "" {
		if out.DB, err = strconv.Atoi(v); err != nil {
			return RedisSentinel{}, fmt.Errorf("redis.sentinel.db %q: want a database number", v)
		}
	}
	return out, nil
}

// ParseRedisCluster reads the URL form of a Cluster deployment (see
// RedisCluster.URL); Validate checks the fields.
func ParseRedisCluster(s string) (RedisCluster, error) {
	addrs, path, q, err := splitTopologyURL("redis.cluster", clusterScheme, s, "password_file")
	if err != nil {
		return RedisCluster{}, err
	}
	if path != "" {
		return RedisCluster{}, fmt.Errorf("redis.cluster: unexpected path %q: a cluster has no master name nor database number", path)
	}
	return RedisCluster{Addrs: addrs, PasswordFile: q.Get("password_file")}, nil
}

func (s RedisSentinel) check() []error {
	var errs []error
	if s.Master == "" || strings.ContainsFunc(s.Master, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("redis.sentinel.master %q: the name the Sentinels monitor the primary under is required (no spaces)", s.Master))
	}
	errs = append(errs, checkAddrs("redis.sentinel.addrs", s.Addrs)...)
	if s.DB < 0 {
		errs = append(errs, fmt.Errorf("redis.sentinel.db %d: want 0 or more", s.DB))
	}
	if _, err := readPasswordFile("redis.sentinel.password_file", s.PasswordFile); err != nil {
		errs = append(errs, err)
	}
	if _, err := readPasswordFile("redis.sentinel.sentinel_password_file", s.SentinelPasswordFile); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (c RedisCluster) check() []error {
	errs := checkAddrs("redis.cluster.addrs", c.Addrs)
	if _, err := readPasswordFile("redis.cluster.password_file", c.PasswordFile); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkAddrs wants at least one address, each host:port.
func checkAddrs(field string, addrs []string) []error {
	if len(addrs) == 0 {
		return []error{fmt.Errorf("%s: at least one host:port is required", field)}
	}
	var errs []error
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s[%d] %q: want host:port", field, i, a))
		}
	}
	return errs
}

// readPasswordFile reads a password file: its content without the final
// line break. "" (no file) is no password. An unreadable or empty file is
// an error naming field and path, never the content.
func readPasswordFile(field, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	pw := strings.TrimRight(string(data), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("%s: %s is empty", field, path)
	}
	return pw, nil
}

// redisField is what hub.yaml's redis: holds: a string (a mode or a URL)
// or a mapping with sentinel or cluster, kept as its URL form.
type redisField struct{ value string }

// UnmarshalYAML reads the string form, or a Sentinel or Cluster mapping
// (strictly: unknown fields are errors, as in the rest of hub.yaml).
func (r *redisField) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Decode(&r.value)
	case yaml.MappingNode:
	default:
		return fmt.Errorf("line %d: redis: want managed, embedded, a URL, or a mapping with sentinel or cluster", n.Line)
	}
	if err := knownKeys(n, "redis", "sentinel", "cluster"); err != nil {
		return err
	}
	var sentinel, cluster *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "sentinel":
			sentinel = n.Content[i+1]
		case "cluster":
			cluster = n.Content[i+1]
		}
	}
	switch {
	case sentinel != nil && cluster != nil:
		return fmt.Errorf("line %d: redis: sentinel and cluster both given; give one", n.Line)
	case sentinel != nil:
		if sentinel.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: redis.sentinel: want a mapping (master, addrs, password_file, sentinel_password_file, db)", sentinel.Line)
		}
		if err := knownKeys(sentinel, "redis.sentinel", "master", "addrs", "password_file", "sentinel_password_file", "db"); err != nil {
			return err
		}
		var s RedisSentinel
		if err := sentinel.Decode(&s); err != nil {
			return fmt.Errorf("redis.sentinel: %w", err)
		}
		r.value = s.URL()
	case cluster != nil:
		if cluster.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: redis.cluster: want a mapping (addrs, password_file)", cluster.Line)
		}
		if err := knownKeys(cluster, "redis.cluster", "addrs", "password_file"); err != nil {
			return err
		}
		var c RedisCluster
		if err := cluster.Decode(&c); err != nil {
			return fmt.Errorf("redis.cluster: %w", err)
		}
		r.value = c.URL()
	default:
		return fmt.Errorf("line %d: redis: a mapping needs sentinel or cluster", n.Line)
	}
	return nil
}

// knownKeys refuses the keys of mapping n not in keys (and repeated ones),
// naming field.
func knownKeys(n *yaml.Node, field string, keys ...string) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(keys, k.Value) {
			return fmt.Errorf("line %d: %s: unknown field %q; want %s", k.Line, field, k.Value, strings.Join(keys, ", "))
		}
		if seen[k.Value] {
			return fmt.Errorf("line %d: %s: field %q given twice", k.Line, field, k.Value)
		}
		seen[k.Value] = true
	}
	return nil
}

// fileConfig is the type hub.yaml is decoded into: Config's fields, the
// same names and tags, except that redis is a redisField (a string or a
// mapping). Config keeps Redis a plain string, which the rest of the code
// and its callers set; decoding into this mirror keeps the decoder's
// strictness (unknown fields are errors) for every field, which a
// hand-written UnmarshalYAML of Config would lose.
var fileConfig = func() reflect.Type {
	t := reflect.TypeFor[Config]()
	var fields []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Name == "Redis" {
			f.Type = reflect.TypeFor[redisField]()
		}
		fields = append(fields, f)
	}
	return reflect.StructOf(fields)
}()

// decodeConfig decodes a hub.yaml strictly.
func decodeConfig(data []byte) (Config, error) {
	v := reflect.New(fileConfig)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v.Interface()); err != nil {
		return Config{}, err
	}
	var c Config
	cv := reflect.ValueOf(&c).Elem()
	for i := range fileConfig.NumField() {
		name, fv := fileConfig.Field(i).Name, v.Elem().Field(i)
		if name == "Redis" {
			c.Redis = fv.Interface().(redisField).value
			continue
		}
		cv.FieldByName(name).Set(fv)
	}
	return c, nil
}

// HashToken returns the hex sha256 of an agent token, the form hub.yaml holds.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return hex.EncodeToString(sum[:])
}
