package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// encodeReference is the encoder status documents were first written
// with: the whole JSON form as one generic value through one yaml.v3
// encoder. encode must give the same bytes.
func encodeReference(doc any) ([]byte, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var generic map[string]any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	delete(generic, "format")
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("format: " + strconv.Itoa(Version) + "\n")
	if len(generic) == 0 {
		return b.Bytes(), nil
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(referenceNumbers(generic)); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// referenceNumbers (what the renderer used before decodeJSON) turns the
// JSON numbers of v into int64 (or float64 when not an integer), so that
// YAML writes 1000000, not 1e+06: the reference decodeJSON is held to.
func referenceNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = referenceNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = referenceNumbers(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	}
	return v
}

// anyDoc is a document of every shape a field can take: lists of
// anything, of maps, of lists, keys yaml.v3 quotes or sorts by number.
type anyDoc struct {
	Any     []any              `json:"any"`
	Maps    []map[string]any   `json:"maps,omitempty"`
	Nested  [][]string         `json:"nested"`
	Floats  []float64          `json:"floats,omitzero"`
	Scalar  any                `json:"scalar"`
	Obj     map[string]any     `json:"obj,omitempty"`
	Items   []*fleetwave.Item  `json:"items"`
	Key10   []string           `json:"key10"`
	Key9    []string           `json:"key9"`
	Key9a   string             `json:"key9_a"`
	True    []int              `json:"true"`
	Null    []bool             `json:"null,omitempty"`
	Dash    []string           `json:"-a"`
	Bytes   []byte             `json:"bytes"`
	Skipped []string           `json:"-"`
	GoName  []string           // written as GoName
	Times   []time.Time        `json:"times"`
	Waves   []Wave             `json:"waves"`
	Counts  map[string]float64 `json:"counts"`
}

// TestEncodeMatchesReference renders random documents of every kind with
// encode and with the reference encoder: the bytes must be the same, with
// list chunks of one element and of the default size.
func TestEncodeMatchesReference(t *testing.T) {
	kinds := []struct {
		name string
		new  func() any
	}{
		{"rollout", func() any { return new(Rollout) }},
		{"summary", func() any { return new(Summary) }},
		{"node", func() any { return new(Node) }},
		{"approval", func() any { return new(Approval) }},
		{"every shape", func() any { return new(anyDoc) }},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			for seed := range uint64(40) {
				g := gen{r: rand.New(rand.NewPCG(seed, 7))}
				p := reflect.ValueOf(kind.new())
				g.fill(p.Elem(), 0)
				doc := p.Elem().Interface()
				want, err := encodeReference(doc)
				if err != nil {
					t.Fatalf("seed %d: reference: %v", seed, err)
				}
				for _, chunk := range []int{1, 300} {
					got, err := encodeChunked(doc, chunk)
					if err != nil {
						t.Fatalf("seed %d, chunk %d: %v", seed, chunk, err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("seed %d, chunk %d: bytes differ at %d:\n--- got\n%s\n--- want\n%s", seed, chunk, firstDiff(got, want), got, want)
					}
				}
			}
		})
	}
}

// TestEncodeSplitsLongLists: the lists of a rollout and of a summary are
// the ones rendered in chunks (the property test above would otherwise
// only compare the reference with itself), a node (JSON methods) and an
// approval (embedded fields) are rendered whole.
func TestEncodeSplitsLongLists(t *testing.T) {
	names := func(doc any) []string {
		_, lists := splitLists(doc)
		var out []string
		for _, l := range lists {
			out = append(out, l.name)
		}
		return out
	}
	d := NewRollout(fleetwave.Rollout{ID: "r"}, []fleetwave.Item{{ID: "i1", Node: "n1", Wave: 1}})
	if got := names(d); !slices.Equal(got, []string{"items", "targets", "waves"}) {
		t.Fatalf("rollout lists %v", got)
	}
	if got := names(Summary{Rollouts: []RolloutLine{{ID: "r"}}, Sync: Sync{Errors: []string{"e"}}}); !slices.Equal(got, []string{"rollouts"}) {
		t.Fatalf("summary lists %v", got)
	}
	if got := names(anyDoc{Bytes: []byte("x"), Skipped: []string{"s"}, GoName: []string{"g"}}); !slices.Equal(got, []string{"GoName"}) {
		t.Fatalf("every-shape lists %v", got)
	}
	if got := names(Node{Node: "n", Waiting: []WaitingItem{{Item: "i"}}}); got != nil {
		t.Fatalf("node lists %v", got)
	}
}

// TestEncodeLargeRollout: a rollout of thousands of items, many chunks,
// gives the reference bytes.
func TestEncodeLargeRollout(t *testing.T) {
	d := benchRollout(600)
	want, err := encodeReference(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeRollout(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 4*chunkBytes {
		t.Fatalf("document of %d bytes spans too few chunks", len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("bytes differ at %d", firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// gen fills values at random from pools of what YAML treats specially.
type gen struct{ r *rand.Rand }

var genStrings = []string{
	"", "plain", "web-g1.1", "true", "True", "yes", "no", "on", "off", "y", "n", "null", "Null", "~",
	"1", "1.0", "0.9", "1000000", "1e6", "1e+06", "0x1F", "0o17", "012", "-1", ".5", ".inf", "-.Inf", ".nan",
	"1:20", "190:20:30", "2026-12-01", "2026-12-01T14:41:05.832Z",
	"- item", "-", "--", "---", "...", "a: b", "a:b", ":", "?", "? a", "#", "x #y", "x# y", "'single'", "\"double\"",
	"{a: 1}", "[a]", "&anchor", "*alias", "!tag", "!!str", "%percent", "@at", "`tick", "|", "|-", ">", ",",
	"multi\nline", "multi\nline\n", "trail\n\n", "trail\n\n\n", "\nleading", "\n", "\n\n", " lead", "trail ", " ", "a \nb",
	"a\n b", "a\n\n  b\n", "line1\n  indented\n    more\nend", "tab\there", "\ttab", "cr\r\nlf", "a\rb",
	"ünïcødé", "日本語のテキスト", "emoji 🚀 rocket", "\u00a0nbsp", "\u2028ls", "\u0085nel", "\ufeffbom", "{quoted\u2028", "x\u2029", "x\r",
	"nul\x00", "bell\a", "esc\x1b[0m", "invalid \xff utf8", "back\\slash", "<html>&amp;",
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	strings.Repeat("a long line with spaces ", 12), strings.Repeat("k", 130), strings.Repeat("x ", 70) + "\nsecond",
}

var genInts = []int64{0, 1, -1, 2, 10, 999999, 1000000, 1234567, -1000000, 1 << 31, 1 << 53, 1<<53 + 1, 1 << 60, math.MaxInt64, math.MinInt64}

var genFloats = []float64{0, 0.5, -0.25, 1.5e-7, 123456.789, 1e6, 1e21, 1e22, 3.14159, math.MaxFloat64, math.SmallestNonzeroFloat64, 100, 99.5}

func (g gen) str() string {
	switch g.r.IntN(5) {
	case 0:
		return genStrings[g.r.IntN(len(genStrings))] + genStrings[g.r.IntN(len(genStrings))]
	case 1:
		return "s" + strconv.Itoa(g.r.IntN(1000))
	default:
		return genStrings[g.r.IntN(len(genStrings))]
	}
}

// length is a list or map size: sometimes long at the top of a document
// (many chunks), short below.
func (g gen) length(depth int) int {
	switch g.r.IntN(8) {
	case 0:
		return 0
	case 1:
		if depth > 1 {
			return 5
		}
		return 20 + g.r.IntN(20)
	default:
		return 1 + g.r.IntN(4)
	}
}

var timeType = reflect.TypeFor[time.Time]()

func (g gen) fill(v reflect.Value, depth int) {
	if v.Type() == timeType {
		times := []time.Time{{}, time.Date(2026, 12, 1, 14, 41, 5, 832_000_000, time.UTC),
			time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))}
		v.Set(reflect.ValueOf(times[g.r.IntN(len(times))]))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(g.str())
	case reflect.Bool:
		v.SetBool(g.r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := genInts[g.r.IntN(len(genInts))]
		if v.OverflowInt(n) {
			n = int64(g.r.IntN(100))
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(g.r.IntN(200)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(genFloats[g.r.IntN(len(genFloats))])
	case reflect.Pointer:
		if g.r.IntN(4) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		g.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if g.r.IntN(6) == 0 {
			return // nil: written as null
		}
		n := g.length(depth)
		if depth > 2 {
			n = min(n, 2)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			g.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if g.r.IntN(6) == 0 {
			return
		}
		n := g.length(depth)
		if depth > 2 {
			n = min(n, 2)
		}
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			g.fill(k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			g.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		if x := g.anyValue(depth); x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		panic(fmt.Sprintf("gen: no values of %s", v.Type()))
	}
}

// anyValue is a JSON-able value of a random shape.
func (g gen) anyValue(depth int) any {
	k := g.r.IntN(9)
	if depth > 3 && k >= 6 {
		k = 0
	}
	switch k {
	case 0, 1:
		return g.str()
	case 2:
		return genInts[g.r.IntN(len(genInts))]
	case 3:
		return genFloats[g.r.IntN(len(genFloats))]
	case 4:
		return g.r.IntN(2) == 0
	case 5:
		return nil
	case 6:
		var s []any
		g.fill(reflect.ValueOf(&s).Elem(), depth+1)
		return s
	default:
		var m map[string]any
		g.fill(reflect.ValueOf(&m).Elem(), depth+1)
		return m
	}
}

// benchRollout is a finished rollout of n items shaped like the hub's.
func benchRollout(n int) Rollout {
	at := time.Date(2026, 12, 1, 14, 41, 5, 832_000_000, time.UTC)
	items := make([]fleetwave.Item, n)
	for i := range items {
		node := fmt.Sprintf("node-%06d", i)
		items[i] = fleetwave.Item{ID: fmt.Sprintf("web-g1.%d", i+1), Rollout: "web-g1", Node: node, Block: "web", Action: "upgrade",
			Generation: 1, TargetVersion: "1.0", ConfigHash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			ManagedBy: "web", Criticality: "medium", Status: "completed", Source: "scheduler", SourceUser: "alice@example.com",
			Wave: 1 + i/1000, DispatchedAt: at, CompletedAt: at.Add(time.Duration(i) * time.Millisecond), Attempts: 1,
			LastAttempt: fmt.Sprintf("web-g1.%d.1", i+1), DesiredState: "installed"}
	}
	return NewRollout(fleetwave.Rollout{ID: "web-g1", Status: "completed", MaxConcurrent: 500, FailureThresholdPercent: 5,
		Counters: fleetwave.Counters{Total: int64(n), Done: int64(n)}, CreatedAt: at, UpdatedAt: at}, items)
}

// BenchmarkEncodeRollout compares encode with the reference encoder on
// the one document that grows with the fleet.
func BenchmarkEncodeRollout(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		d := benchRollout(n)
		for _, enc := range []struct {
			name string
			fn   func(any) ([]byte, error)
		}{{"reference", encodeReference}, {"chunked", encode}} {
			b.Run(fmt.Sprintf("items=%d/%s", n, enc.name), func(b *testing.B) {
				var size int
				for b.Loop() {
					out, err := enc.fn(d)
					if err != nil {
						b.Fatal(err)
					}
					size = len(out)
				}
				b.ReportMetric(float64(size), "doc-bytes")
			})
		}
	}
}
