package status

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// referenceDecode is what decodeJSON replaced: encoding/json with
// UseNumber, then numbers; ok is false where encoding/json refuses data
// as one JSON value.
func referenceDecode(data []byte) (v any, ok bool) {
	if !json.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return referenceNumbers(v), true
}

func checkDecodeJSON(t *testing.T, data []byte) {
	t.Helper()
	want, ok := referenceDecode(data)
	got, err := decodeJSON(data)
	switch {
	case !ok && err == nil:
		t.Fatalf("%q: decoded as %#v, encoding/json refuses it", data, got)
	case ok && err != nil:
		t.Fatalf("%q: %v; encoding/json reads %#v", data, err, want)
	case ok && !reflect.DeepEqual(got, want):
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
}

// randomJSONValue is a random value of the kinds status documents hold,
// with the strings and numbers that differ between decoders: escapes,
// control characters, invalid UTF-8, large and fractional numbers.
func randomJSONValue(rng *rand.Rand, depth int) any {
	strs := []string{"", "web", "a\"b", "back\\slash", "tab\there", "line\nbreak", "\u00e9t\u00e9", "\u2028",
		"\U0001F680", "bad \xff utf8", "<html>&", "\x01ctl", "web-g1.10.1", "2026-12-02T13:40:00Z"}
	switch k := rng.IntN(10); {
	case depth > 3 || k < 3:
		return strs[rng.IntN(len(strs))]
	case k < 5:
		nums := []any{0, -1, 42, int64(1) << 62, uint64(1) << 63, 1.5, -0.25, 1e21, 1e-7, 3.0}
		return nums[rng.IntN(len(nums))]
	case k == 5:
		return []any{nil, true, false}[rng.IntN(3)]
	case k < 8:
		m := map[string]any{}
		for range rng.IntN(6) {
			m[strs[rng.IntN(len(strs))]] = randomJSONValue(rng, depth+1)
		}
		return m
	default:
		a := make([]any, rng.IntN(5))
		for i := range a {
			a[i] = randomJSONValue(rng, depth+1)
		}
		return a
	}
}

// TestDecodeJSONIsEncodingJSON: decodeJSON reads what the status documents
// are rendered from exactly as encoding/json (with numbers) did, and
// refuses what it refuses. It fails when a number is read as the wrong
// kind, an escape or an invalid byte is decoded otherwise, or malformed
// JSON is accepted.
func TestDecodeJSONIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 3000 {
		data, err := json.Marshal(randomJSONValue(rng, 0))
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeJSON(t, data)
		// the same with room between the tokens
		spaced := strings.NewReplacer(",", " ,\n", ":", "\t: ", "[", "[ ", "{", "{\r\n").Replace(string(data))
		checkDecodeJSON(t, []byte(spaced))
	}
	// a status document in its JSON form
	d := benchRollout(50)
	_, parts := d.Split()
	for _, doc := range []any{d, parts} {
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeJSON(t, data)
	}
	for _, s := range []string{
		`-0`, `0.0`, `1E+2`, `1e-2`, `12345678901234567890`, `-9223372036854775808`, `9223372036854775808`,
		`1e400`, `-1e400`, `"\u00e9\ud83d\ude80"`, `"\ud800"`, `"a\/b"`, `{"a":1,"a":2}`, `[]`, `{}`, ` null `,
		`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `[1 2]`, `"abc`, `"a` + "\n" + `b"`,
		`"\x"`, `"\u12"`, `tru`, `nul`, `true false`, `{"a":1}x`, ``, ` `, `[`, `{`, `{"a":`, "\"\xff\"", `[[[]]]`,
	} {
		checkDecodeJSON(t, []byte(s))
	}
	deep := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	if _, err := decodeJSON([]byte(deep)); err == nil {
		t.Fatal("decodeJSON accepted nesting past encoding/json's limit")
	}
}

// FuzzDecodeJSON holds decodeJSON to encoding/json on any input.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x\n",null,true]}`, `"\u00e9"`, `-0.0e-0`, `[{"":{}}]`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeJSON(t, data)
	})
}

// BenchmarkRenderJSON renders a rollout part of PartItems items from its
// JSON form, as a status write does for each part that changed.
func BenchmarkRenderJSON(b *testing.B) {
	_, parts := benchRollout(2 * PartItems).Split()
	data, err := json.Marshal(parts[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, dec := range []struct {
		name string
		fn   func([]byte) (any, bool)
	}{{"encoding-json", func(d []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(d))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return referenceNumbers(v), err == nil
	}}, {"decodeJSON", func(d []byte) (any, bool) { v, err := decodeJSON(d); return v, err == nil }}} {
		b.Run("decode/"+dec.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := dec.fn(data); !ok {
					b.Fatal("not decoded")
				}
			}
		})
	}
	b.Run("render", func(b *testing.B) {
		for b.Loop() {
			if _, err := RenderJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
