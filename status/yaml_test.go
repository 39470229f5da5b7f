package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// yamlV3 is v as yaml.v3 writes it (indent 2).
func yamlV3(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := encodeYAMLv3(&b, v); err != nil {
		t.Fatalf("yaml.v3: %v", err)
	}
	return b.Bytes()
}

// emitted is v as emitYAML writes it; false when it left v to yaml.v3.
func emitted(v any) ([]byte, bool) {
	var b bytes.Buffer
	b.WriteString("kept\n")
	ok := emitYAML(&b, v)
	if !ok {
		if b.String() != "kept\n" {
			return b.Bytes(), false // wrote something and gave up: caught by the callers
		}
		return nil, false
	}
	return bytes.TrimPrefix(b.Bytes(), []byte("kept\n")), ok
}

// randomString is a string of characters YAML treats specially, letters
// and digits, with a letter or a digit first half the time.
func randomString(r *rand.Rand) string {
	const alphabet = "aAyYnNoOtTfFeE019_.-/@+:#'\"!&*|>%,?[]{}~ \t\n\r\\`"
	var b strings.Builder
	n := 1 + r.IntN(12)
	for i := range n {
		switch {
		case i == 0 && r.IntN(2) == 0:
			b.WriteByte("aZq7"[r.IntN(4)])
		case r.IntN(20) == 0:
			b.WriteString([]string{"é", "\u2028", "\u0085", "日", "\ufeff"}[r.IntN(5)])
		default:
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
	}
	return b.String()
}

// TestEmitYAMLWritesWhatYAMLv3Writes: every string of the property test's
// pool and thousands of random ones, as a value and as a key at several
// depths (lines of a literal block shift with them), and random generic
// documents, are written byte for byte as yaml.v3 writes them. emitYAML
// leaves to yaml.v3, with nothing written, only complex keys (longer than
// 128 bytes, or on more than one line) and strings yaml.v3 writes with a
// line break other than LF.
func TestEmitYAMLWritesWhatYAMLv3Writes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := append([]string{}, genStrings...)
	for range 3000 {
		strs = append(strs, randomString(r))
	}
	for _, a := range genStrings {
		strs = append(strs, a+genStrings[r.IntN(len(genStrings))])
	}
	fast := 0
	for _, s := range strs {
		shapes := []any{
			[]any{s},
			map[string]any{"k": s},
			map[string]any{"a": []any{map[string]any{"b": s, "c": []any{s, []any{s}}}}, "z": s},
			[]any{[]any{map[string]any{"b": []any{s}}}},
			map[string]any{s: 1, "k": map[string]any{s: []any{}}},
			[]any{map[string]any{s: map[string]any{}}},
		}
		for i, v := range shapes {
			want := yamlV3(t, v)
			got, ok := emitted(v)
			if !ok {
				if got != nil {
					t.Fatalf("%q, shape %d: gave up after writing %q", s, i, got)
				}
				complexKey := i >= 4 && (strings.HasPrefix(string(want), "? ") || strings.Contains(string(want), "\n? ") || strings.Contains(string(want), "- ? "))
				if !complexKey && !hasLineBreak(string(want)) {
					t.Fatalf("%q, shape %d: left to yaml.v3, which writes\n%s", s, i, want)
				}
				continue
			}
			fast++
			if !bytes.Equal(got, want) {
				t.Fatalf("%q, shape %d: bytes differ at %d:\n--- got\n%s--- want\n%s", s, i, firstDiff(got, want), got, want)
			}
		}
		if plainSafe(s) {
			if want := yamlV3(t, []any{s}); string(want) != "- "+s+"\n" {
				t.Fatalf("%q is plainSafe, yaml.v3 writes %q", s, want)
			}
		}
	}
	if fast < len(strs)*4 {
		t.Fatalf("emitYAML wrote only %d of %d shapes", fast, len(strs)*6)
	}
	for seed := range uint64(300) {
		g := gen{r: rand.New(rand.NewPCG(seed, 9))}
		v := g.anyValue(0)
		if _, ok := v.(map[string]any); !ok {
			v = []any{v}
		}
		want := yamlV3(t, v)
		got, ok := emitted(v)
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("seed %d: bytes differ at %d:\n--- got\n%s--- want\n%s", seed, firstDiff(got, want), got, want)
		}
		if !ok && got != nil {
			t.Fatalf("seed %d: gave up after writing %q", seed, got)
		}
	}
}

// TestEmitYAMLWritesRolloutsItself: the items of a rollout as the hub
// writes them are rendered without yaml.v3.
func TestEmitYAMLWritesRolloutsItself(t *testing.T) {
	d := benchRollout(50)
	_, lists := splitLists(d)
	for _, l := range lists {
		var elems []any
		for i := range l.elems.Len() {
			elems = append(elems, toGeneric(t, l.elems.Index(i).Interface()))
		}
		got, ok := emitted(elems)
		if !ok {
			t.Fatalf("%s: left to yaml.v3", l.name)
		}
		if want := yamlV3(t, elems); !bytes.Equal(got, want) {
			t.Fatalf("%s: bytes differ at %d", l.name, firstDiff(got, want))
		}
	}
}

// toGeneric is v's JSON form as a generic value, numbers as encode makes
// them.
func toGeneric(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		t.Fatal(err)
	}
	return referenceNumbers(g)
}

// TestRenderJSONIsEncode: a node and a rollout part rendered from their
// JSON form (as the hub renders its generation marks, and RenderNode and
// RenderRolloutPart a string encoding/json rewrites) are the bytes
// EncodeNode and EncodeRolloutPart write.
func TestRenderJSONIsEncode(t *testing.T) {
	same := func(what string, encode, form func() ([]byte, error)) {
		t.Helper()
		sameBytes(t, what, encode, func() ([]byte, error) {
			j, err := form()
			if err != nil {
				return nil, err
			}
			return RenderJSON(j)
		})
	}
	for seed := range uint64(40) {
		g := gen{r: rand.New(rand.NewPCG(seed, 11))}
		var n Node
		g.fill(reflect.ValueOf(&n).Elem(), 0)
		same(fmt.Sprintf("node of seed %d", seed), func() ([]byte, error) { return EncodeNode(n) }, func() ([]byte, error) { return NodeJSON(n) })
	}
	_, parts := benchRollout(2500).Split()
	for _, p := range parts {
		same(fmt.Sprintf("part %d", p.Part), func() ([]byte, error) { return EncodeRolloutPart(p) }, func() ([]byte, error) { return json.Marshal(p) })
	}
}
