package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/internal/testutil/redistest"
	"github.com/fleetwave/fleetwave/reconciler"
)

func testSealer(t *testing.T, fill byte) *sealer {
	t.Helper()
	s, err := newSealer(bytes.Repeat([]byte{fill}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fp names a secret in a failure message without showing it.
func fp(v string) string {
	return fmt.Sprintf("%d bytes, sha256 %x", len(v), sha256.Sum256([]byte(v)))
}

// noValue fails when err's message holds value.
func noValue(t *testing.T, err error, value string) {
	t.Helper()
	if err != nil && value != "" && strings.Contains(err.Error(), value) {
		t.Errorf("the error holds the credential (%s)", fp(value))
	}
}

// odd values: every kind of byte a value could hold, also the marker's own
// words and separators.
var oddValues = []string{
	"Abc123xyz",
	`quote " and 'single' and \backslash`,
	"new\nline\r\nand\ttab",
	"unicode: é ß 日本語 🚀",
	"\x00\x01\xff invalid utf-8 \xc3",
	"fwsealed.v1.looks.like.a.marker.",
	": - ? [ ] { } # & * ! | > % @ `",
	"",
	strings.Repeat("x", 256),
}

// TestSealRoundTrip: a marker opens to its scope and value, whatever bytes
// the value holds, and is the marker's alphabet only.
func TestSealRoundTrip(t *testing.T) {
	s := testSealer(t, 1)
	for i, v := range oddValues {
		for _, scope := range []string{"workspace/prod", "node/n1"} {
			m := s.seal(scope, "db-admin", v)
			if !strings.HasPrefix(m, markerPrefix) || !strings.HasSuffix(m, markerEnd) {
				t.Errorf("value %d: marker lacks its prefix or end", i)
			}
			if strings.Trim(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
				t.Errorf("value %d: marker holds characters outside its alphabet", i)
			}
			gotScope, got, err := s.open(m)
			noValue(t, err, v)
			if err != nil || gotScope != scope || got != v {
				t.Errorf("value %d (%s) in %s: opened to scope %q and %s, err %v", i, fp(v), scope, gotScope, fp(got), err)
			}
		}
	}
}

// TestSealDeterministic: the same credential always seals to the same
// marker (configs and their hashes are stable across reconciles and across
// replicas sharing the key); any other scope, name, value or key does not.
func TestSealDeterministic(t *testing.T) {
	s := testSealer(t, 1)
	m := s.seal("workspace/prod", "db-admin", "Abc123xyz")
	if again := testSealer(t, 1).seal("workspace/prod", "db-admin", "Abc123xyz"); again != m {
		t.Fatal("the same credential sealed to two markers (another sealer of the same key)")
	}
	if again := s.seal("workspace/prod", "db-admin", "Abc123xyz"); again != m {
		t.Fatal("the same credential sealed to two markers")
	}
	others := map[string]string{
		"scope": s.seal("workspace/dev", "db-admin", "Abc123xyz"),
		"name":  s.seal("workspace/prod", "db-other", "Abc123xyz"),
		"value": s.seal("workspace/prod", "db-admin", "Abc123xyZ"),
		"key":   testSealer(t, 2).seal("workspace/prod", "db-admin", "Abc123xyz"),
		// a field boundary moved: "workspace/prod"+"db-admin" vs "workspace/pro"+"ddb-admin"
		"boundary": s.seal("workspace/pro", "ddb-admin", "Abc123xyz"),
	}
	for what, o := range others {
		if o == m {
			t.Errorf("another %s sealed to the same marker", what)
		}
	}
}

// TestSealOtherScopeRefused: a marker copied into the config of a node of
// another scope does not unseal there.
func TestSealOtherScopeRefused(t *testing.T) {
	s := testSealer(t, 1)
	const value = "Zq9vL2mK8pX4"
	config := "password: " + s.seal("workspace/prod", "db-admin", value) + "\n"
	only := func(want string) func(string) bool { return func(scope string) bool { return scope == want } }
	if out, _, err := s.unseal(config, only("workspace/prod")); err != nil || out != "password: "+value+"\n" {
		t.Fatalf("own scope: %s, err %v", fp(out), err)
	}
	for _, other := range []string{"workspace/dev", "node/n1", "workspace/prod2", ""} {
		out, values, err := s.unseal(config, only(other))
		if err == nil || out != "" || values != nil {
			t.Errorf("scope %q: unsealed (%s), want an error", other, fp(out))
		}
		noValue(t, err, value)
	}
}

// TestSealTamperedRefused: a marker altered anywhere, truncated, broken by
// a template filter, or sealed under another key does not open, and the
// config holding it fails whole.
func TestSealTamperedRefused(t *testing.T) {
	// three lengths: the encoded text ends on a whole byte, or with 2 or 4
	// spare bits (which a lenient decoder would ignore)
	for _, value := range []string{"Zq9vL2mK8pX4", "Zq9vL2mK8pX4a", "Zq9vL2mK8pX4ab"} {
		testTampered(t, value)
	}
}

func testTampered(t *testing.T, value string) {
	t.Helper()
	s := testSealer(t, 1)
	m := s.seal("node/n1", "db-admin", value)
	body := m[len(markerPrefix) : len(m)-len(markerEnd)]
	var bad []string
	for i := range body {
		for _, c := range []byte{'A', 'z', '-'} {
			if body[i] != c {
				bad = append(bad, markerPrefix+body[:i]+string(c)+body[i+1:]+markerEnd)
				break
			}
		}
	}
	// the last character with its lowest bit flipped: a spare bit when
	// the text does not end on a whole byte
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := alphabet[strings.IndexByte(alphabet, body[len(body)-1])^1]
	bad = append(bad, markerPrefix+body[:len(body)-1]+string(last)+markerEnd)
	raw, _ := base64.RawURLEncoding.DecodeString(body)
	bad = append(bad,
		markerPrefix+body[:len(body)-4]+markerEnd,                             // truncated
		markerPrefix+body+"AAAA"+markerEnd,                                    // extended
		markerPrefix+base64.RawURLEncoding.EncodeToString(raw[:27])+markerEnd, // shorter than nonce and tag
		markerPrefix+markerEnd+"x",                                            // empty
		strings.ToUpper(m),                                                    // {{ ... | upper }}
		strings.Replace(m, "v1", "v2", 1),                                     // unknown version
		markerPrefix+body,                                                     // end lost
		testSealer(t, 2).seal("node/n1", "db-admin", value),                   // another key
	)
	for i, b := range bad {
		if _, _, err := s.open(b); err == nil && b != m {
			t.Errorf("altered marker %d opened", i)
		}
		out, _, err := s.unseal("a: 1\npassword: \""+b+"\"\nb: "+m+"\n", nil)
		if err == nil {
			t.Errorf("a config with altered marker %d unsealed", i)
		}
		if out != "" {
			t.Errorf("altered marker %d: a failed unseal returned text", i)
		}
		noValue(t, err, value)
	}
}

// TestSealMarkerIsYAMLScalar: markers of any value parse as the same string
// in YAML wherever a template puts them (plain, double or single quoted,
// in flow collections, inside a longer string), and unsealing the rendered
// config gives what rendering the value itself gives.
func TestSealMarkerIsYAMLScalar(t *testing.T) {
	s := testSealer(t, 1)
	const tpl = "plain: %[1]s\n" +
		"double: \"%[1]s\"\n" +
		"single: '%[1]s'\n" +
		"flow: [%[1]s, \"%[1]s\"]\n" +
		"map: {k: %[1]s}\n" +
		"url: \"postgres://admin:%[1]s@db:5432/app\"\n" +
		"suffix: %[1]s_old\n" +
		"twice: %[1]s%[1]s\n"
	for i, v := range oddValues {
		m := s.seal("workspace/prod", "db-admin", v)
		rendered := fmt.Sprintf(tpl, m)
		var doc struct {
			Plain, Double, Single, URL, Suffix, Twice string
			Flow                                      []string
			Map                                       map[string]string
		}
		if err := yaml.Unmarshal([]byte(rendered), &doc); err != nil {
			t.Fatalf("value %d: rendered config is not YAML: %v", i, err)
		}
		for what, got := range map[string]string{"plain": doc.Plain, "double": doc.Double, "single": doc.Single,
			"flow[0]": doc.Flow[0], "flow[1]": doc.Flow[1], "map": doc.Map["k"]} {
			if got != m {
				t.Errorf("value %d: %s parses as something else than the marker", i, what)
			}
		}
		if doc.URL != "postgres://admin:"+m+"@db:5432/app" || doc.Suffix != m+"_old" || doc.Twice != m+m {
			t.Errorf("value %d: a marker inside a longer string parses as something else", i)
		}
		out, values, err := s.unseal(rendered, func(scope string) bool { return scope == "workspace/prod" })
		noValue(t, err, v)
		if err != nil || out != fmt.Sprintf(tpl, v) || len(values) != 10 {
			t.Errorf("value %d (%s): unsealed config differs from the config rendered with the value (%d values, err %v)", i, fp(v), len(values), err)
		}
	}
}

// TestSealConfigWithoutMarkers: a config without markers is returned as it
// is; one that mentions the marker word outside a marker is refused (a
// broken marker must not reach an agent as if it were the value).
func TestSealConfigWithoutMarkers(t *testing.T) {
	s := testSealer(t, 1)
	for _, c := range []string{"", "a: 1\n", "fw: sealed\nv1: x.y\n"} {
		if out, values, err := s.unseal(c, nil); err != nil || out != c || values != nil {
			t.Errorf("%q: %q, %d values, %v", c, out, len(values), err)
		}
	}
	for _, c := range []string{"note: fwsealed\n", "p: FWSEALED.V1.abc.\n", "p: fwsealed.v1.\n"} {
		if _, _, err := s.unseal(c, nil); err == nil {
			t.Errorf("%q unsealed", c)
		}
	}
}

// TestSealCredentialAndSchema: the wrapped credential function renders
// markers and keeps the store's errors; the config_schema check sees the
// values and its error never holds one.
func TestSealCredentialAndSchema(t *testing.T) {
	s := testSealer(t, 1)
	const value = "Zq9vL2mK8pX4Zq9vL2mK8pX4"
	get := s.credential(func(scope, name string, length int) (string, error) {
		if name == "missing" {
			return "", fmt.Errorf("credstore: no %s/%s", scope, name)
		}
		return value, nil
	})
	m, err := get("workspace/prod", "db-admin", 24)
	if err != nil || m != s.seal("workspace/prod", "db-admin", value) {
		t.Fatalf("credential: %v, or not the marker of the value", err)
	}
	if _, err := get("workspace/prod", "missing", 24); err == nil || !strings.Contains(err.Error(), "no workspace/prod/missing") {
		t.Fatalf("store error lost: %v", err)
	}
	var seen string
	validate := s.validateConfig(func(_, rendered string) error {
		seen = rendered
		if !strings.Contains(rendered, "password: "+value) {
			return nil
		}
		return fmt.Errorf("password %s: too guessable", value) // a check that quotes values
	})
	err = validate("{password: string}", "password: "+m+"\n")
	if seen != "password: "+value+"\n" {
		t.Errorf("the schema check saw %s, not the value", fp(seen))
	}
	if err == nil || !strings.Contains(err.Error(), "(credential)") {
		t.Errorf("schema error not masked: %v", err != nil)
	}
	noValue(t, err, value)
	if err := validate("{password: string}", "password: fwsealed.v1.AAAA.\n"); err == nil {
		t.Error("a marker that does not open passed the schema check")
	}
}

// TestSealDeliveryScope: the scopes a node may receive come from its record
// in the snapshot; without one, only its own node scope is sure, and a
// replica without any snapshot cannot check a workspace.
func TestSealDeliveryScope(t *testing.T) {
	h := &Hub{snapshot: &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{
		"n1": {ID: "n1", Workspace: "prod"},
		"n2": {ID: "n2"},
	}}}
	cases := []struct {
		node, scope string
		want        bool
	}{
		{"n1", "workspace/prod", true},
		{"n1", "workspace/dev", false},
		{"n1", "node/n1", false}, // n1's credentials are its workspace's
		{"n2", "node/n2", true},
		{"n2", "node/n1", false},
		{"n2", "workspace/prod", false},
		{"gone", "node/gone", true},
		{"gone", "workspace/prod", false},
	}
	for _, c := range cases {
		if got := h.deliveryScope(c.node)(c.scope); got != c.want {
			t.Errorf("node %s, scope %s: %v, want %v", c.node, c.scope, got, c.want)
		}
	}
	replica := &Hub{}
	for scope, want := range map[string]bool{"node/n1": true, "node/n2": false, "workspace/prod": true} {
		if got := replica.deliveryScope("n1")(scope); got != want {
			t.Errorf("replica, scope %s: %v, want %v", scope, got, want)
		}
	}
}

// TestSealPollAttempts: with a real engine on a real redis-server, Redis
// holds markers only; PollAttempts hands a node its config with the values,
// and refuses (fails as permanent, with a warning that holds no value) an
// attempt whose marker belongs to another workspace, was altered, or is
// delivered by a hub without a credentials key.
func TestSealPollAttempts(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	eng := engine.New(rdb, engine.WithLogger(log))
	if err := eng.Load(ctx); err != nil {
		t.Fatal(err)
	}
	fence, err := eng.Campaign(ctx, "hub-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := testSealer(t, 1)
	snap := &fleetwave.Snapshot{Nodes: map[string]*fleetwave.Node{
		"n1": {ID: "n1", Workspace: "prod"}, "n2": {ID: "n2", Workspace: "dev"}, "n3": {ID: "n3", Workspace: "prod"},
	}}
	h := &Hub{eng: eng, sealer: s, log: log, snapshot: snap, statusNow: make(chan struct{}, 1)}
	const prodValue = "ProdSecret0123456789abcd"
	prod := s.seal(reconciler.CredentialScope(snap.Nodes["n1"]), "db-admin", prodValue)
	altered := prod[:20] + string(prod[20]^1) + prod[21:]
	configs := map[string]string{
		"n1": "password: \"" + prod + "\"\ndev: 1\n", // its own workspace's credential
		"n2": "password: " + prod + "\n",             // prod's marker copied into dev
		"n3": "password: " + altered + "\n",
	}
	spec := fleetwave.RolloutSpec{BaseID: "db-g1", MaxConcurrent: 3,
		Source: fleetwave.RolloutSource{Object: fleetwave.Key(fleetwave.KindTrigger, "db"), Generation: 1, Kind: fleetwave.SourceScheduler}}
	for _, n := range []string{"n1", "n2", "n3"} {
		spec.Items = append(spec.Items, fleetwave.ItemSpec{Node: n, Block: "db", Action: fleetwave.ActionInstall, Generation: 1,
			TargetVersion: "1", ConfigHash: reconciler.ConfigHash(configs[n]),
			Payload: fleetwave.AttemptPayload{Command: "true", TimeoutSeconds: 60, Config: configs[n]}})
	}
	id, _, err := eng.CreateRollout(ctx, fence, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Step(ctx, fence); err != nil {
		t.Fatal(err)
	}
	text, err := RedisText(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, markerPrefix) || strings.Contains(text, prodValue) {
		t.Fatal("Redis should hold the queued configs with markers, and no value")
	}

	atts, err := h.PollAttempts(ctx, "n1", 0, fleetwave.Receipt{})
	if err != nil || len(atts) != 1 || atts[0].Payload.Config != "password: \""+prodValue+"\"\ndev: 1\n" {
		t.Fatalf("n1: %d attempts, err %v; want its config with the value", len(atts), err)
	}
	for _, n := range []string{"n2", "n3"} {
		if atts, err := h.PollAttempts(ctx, n, 0, fleetwave.Receipt{}); err != nil || len(atts) != 0 {
			t.Errorf("%s: %d attempts handed out (err %v), want none", n, len(atts), err)
		}
	}
	// a hub without the key cannot open markers: refused likewise
	noKey := &Hub{eng: eng, log: log, snapshot: snap, statusNow: make(chan struct{}, 1)}
	spec2 := spec
	spec2.BaseID, spec2.Source.Generation = "db-g2", 2
	spec2.Source.Object = fleetwave.Key(fleetwave.KindTrigger, "db2")
	spec2.Items = []fleetwave.ItemSpec{spec.Items[0]}
	spec2.Items[0].Block, spec2.Items[0].Generation = "db2", 2
	id2, _, err := eng.CreateRollout(ctx, fence, spec2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Step(ctx, fence); err != nil {
		t.Fatal(err)
	}
	if atts, err := noKey.PollAttempts(ctx, "n1", 0, fleetwave.Receipt{}); err != nil || len(atts) != 0 {
		t.Errorf("a hub without a key handed out %d attempts (err %v)", len(atts), err)
	}

	status := map[string]fleetwave.ItemStatus{}
	for _, rid := range []string{id, id2} {
		_, items, err := eng.Rollout(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			status[rid+"/"+it.Node] = it.Status
		}
	}
	want := map[string]fleetwave.ItemStatus{id + "/n1": fleetwave.ItemInProgress, id + "/n2": fleetwave.ItemBlocked,
		id + "/n3": fleetwave.ItemBlocked, id2 + "/n1": fleetwave.ItemBlocked}
	for k, w := range want {
		if status[k] != w {
			t.Errorf("item %s: %s, want %s", k, status[k], w)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "attempt not delivered"); n != 3 {
		t.Errorf("%d refusal warnings, want 3", n)
	}
	for _, want := range []string{"scope workspace/prod, which this node is not in", "does not open", "no credentials key"} {
		if !strings.Contains(out, want) {
			t.Errorf("no warning says %q", want)
		}
	}
	if strings.Contains(out, prodValue) || strings.Contains(out, markerPrefix) {
		t.Error("the logs hold a credential or a marker")
	}
}

// RedisText returns every key of rdb and everything each holds, read by its
// type (so that nothing is compressed, as DUMP may), as one text to search.
// Exported for the end-to-end tests.
var RedisText = redisText

func redisText(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	var b strings.Builder
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return "", err
		}
		for _, k := range keys {
			typ, err := rdb.Type(ctx, k).Result()
			if err != nil {
				return "", err
			}
			var v any
			switch typ {
			case "none": // deleted since the scan
				continue
			case "string":
				v, err = rdb.Get(ctx, k).Result()
			case "hash":
				v, err = rdb.HGetAll(ctx, k).Result()
			case "list":
				v, err = rdb.LRange(ctx, k, 0, -1).Result()
			case "set":
				v, err = rdb.SMembers(ctx, k).Result()
			case "zset":
				v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			case "stream":
				v, err = rdb.XRange(ctx, k, "-", "+").Result()
			default:
				v, err = rdb.Dump(ctx, k).Result()
			}
			if err != nil && !errors.Is(err, redis.Nil) {
				return "", fmt.Errorf("read %s (%s): %w", k, typ, err)
			}
			fmt.Fprintf(&b, "%s %s %v\n", k, typ, v)
		}
		if cursor = next; cursor == 0 {
			return b.String(), nil
		}
	}
}
