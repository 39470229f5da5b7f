package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPlainScannersMatchCUE decodes files of each format with the byte
// scanners and with CUE's parser or YAML decoder: a file a scanner takes
// must have the same data as CUE gives it, and each case says whether the
// scanner takes it, so a scanner that refuses everything fails too.
func TestPlainScannersMatchCUE(t *testing.T) {
	cases := []struct {
		path, data string
		plain      bool
	}{
		// YAML
		{"n.yaml", "kind: node\nname: a\n", true},
		{"n.yaml", "\"kind\": \"node\"\nlabels:\n  env: prod\n  rack: r-01/a.b\nmaintenance_windows: [\"nightly\"]\n", true},
		{"n.yaml", "# top\nkind: node # trailing\n\nlabels:   # a comment\n    a: '1'\n    b: -5\n    c: 0\n    d: true\n", true},
		{"n.yaml", "list:\n- a\n- \"b\"\n- 3\nafter: x\n", true},            // a sequence at its key's indent
		{"n.yaml", "list:\n  - a\n  - b\nm:\n  k: {\"x\": [1, 2]}\n", true}, // nested one-line flow
		{"n.yaml", "a: _x\nb: v1.2-rc/3\n", true},
		{"n.yaml", "a: yes\n", false}, // YAML 1.1 boolean
		{"n.yaml", "a: On\n", false},
		{"n.yaml", "a: ~\n", false},
		{"n.yaml", "a: Null\n", false},
		{"n.yaml", "a: True\n", false},
		{"n.yaml", "a: .inf\n", false},
		{"n.yaml", "a: 0x1F\n", false},
		{"n.yaml", "a: 010\n", false},
		{"n.yaml", "a: 1_000\n", false},
		{"n.yaml", "a: 1e3\n", false},
		{"n.yaml", "a: -0\n", false},
		{"n.yaml", "a: 2001-12-14\n", false},
		{"n.yaml", "a: 12:30\n", false},
		{"n.yaml", "a: b c\n", false},        // a plain scalar with a space
		{"n.yaml", "a: foo\n  bar\n", false}, // a continuation line
		{"n.yaml", "a:b\n", false},
		{"n.yaml", "a:\n", false},         // null
		{"n.yaml", "a:\nb: 1\n", false},   // null
		{"n.yaml", "a: 1\na: 1\n", false}, // duplicate key
		{"n.yaml", "a:\n  - x\n   - y\n", false},
		{"n.yaml", "a:\n  b: 1\n c: 2\n", false}, // a misaligned key
		{"n.yaml", "a:\n- b: 1\n", false},        // a mapping in a sequence
		{"n.yaml", "a:\n- - 1\n", false},
		{"n.yaml", "a:\n-\n", false},
		{"n.yaml", "a: 'it''s'\n", false},
		{"n.yaml", "a: \"x\\ty\"\n", false},
		{"n.yaml", "a: \"x\"#c\n", false},
		{"n.yaml", "a: &x 1\nb: *x\n", false},
		{"n.yaml", "a: !!str 1\n", false},
		{"n.yaml", "a: |\n  x\n", false},
		{"n.yaml", "---\na: 1\n", false},
		{"n.yaml", "a: 1\r\n", false},
		{"n.yaml", "a:\t1\n", false},
		{"n.yaml", "a: \"héllo\"\n", false},
		{"n.yaml", "  a: 1\n", false},
		{"n.yaml", "- a\n", false},
		{"n.yaml", "# only a comment\n", false},
		{"n.yaml", "a: [1,\n  2]\n", false},
		{"n.yaml", "yes: 1\n", false},
		{"n.yaml", "<<: {\"a\": 1}\n", false},
		// CUE
		{"n.cue", "kind: \"node\"\nname: \"a\"\n", true},
		{"n.cue", "\"kind\": \"node\",\nlabels: {\n\tenv: \"prod\", rack: \"r1\"\n}\nlist: [\n\t\"a\"\n\t\"b\",\n]\n", true},
		{"n.cue", "// c\na: 1 // c\nb: -2, c: true\nd: false\ne: {}\nf: []\ng: \"héllo\"\n", true},
		{"n.cue", "a: [1, 2,]\n", true},
		{"n.cue", "package x\na: 1\n", false},
		{"n.cue", "{a: 1}\n", false},
		{"n.cue", "a: 1 b: 2\n", false},
		{"n.cue", "a: 1,,\n", false},
		{"n.cue", "a: [1 2]\n", false},
		{"n.cue", "a: b: 1\n", false},
		{"n.cue", "a?: 1\n", false},
		{"n.cue", "a!: 1\n", false},
		{"n.cue", "#a: 1\n", false},
		{"n.cue", "_a: 1\n", false},
		{"n.cue", "true: 1\n", false},
		{"n.cue", "a: null\n", false},
		{"n.cue", "a: 1K\n", false},
		{"n.cue", "a: 1_000\n", false},
		{"n.cue", "a: 0x10\n", false},
		{"n.cue", "a: 1.5\n", false},
		{"n.cue", "a: -0\n", false},
		{"n.cue", "a: \"a\" + \"b\"\n", false},
		{"n.cue", "a: \"\\(b)\"\n", false},
		{"n.cue", "a: #\"x\"#\n", false},
		{"n.cue", "a: \"\"\"\n\tx\n\t\"\"\"\n", false},
		{"n.cue", "a: 1\na: 1\n", false},
		{"n.cue", "a: [...]\n", false},
		{"n.cue", "a: 1 @x()\n", false},
		{"n.cue", "a: truex\n", false},
		{"n.cue", "a:\n1\n", false},
		{"n.cue", "a: 1 /x\n", false},
		{"n.cue", "a: 1 // \x00\n", false},
		{"n.cue", "a: 1 // \xff\n", false},
		{"n.cue", "\ufeffa: 1\n", false},
		{"n.cue", "", false},
	}
	for _, c := range cases {
		got, ok := plainData(c.path, []byte(c.data))
		if ok != c.plain {
			t.Errorf("%s %q: decoded without a parser %v, want %v", c.path, c.data, ok, c.plain)
			continue
		}
		if !ok {
			continue
		}
		f, errs := parseFile(c.path, []byte(c.data), DefaultMaxFileSize)
		if len(errs) > 0 {
			t.Errorf("%s %q: taken without a parser, but CUE finds %v", c.path, c.data, errs)
			continue
		}
		ctx, _ := newContext()
		v := ctx.BuildFile(f)
		raw, err := v.MarshalJSON()
		if err != nil {
			t.Errorf("%s %q: taken without a parser, but CUE's value fails: %v", c.path, c.data, err)
			continue
		}
		want, err := canonicalJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(jsonValue(got))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s %q: decoded as %s, CUE reads %s", c.path, c.data, b, want)
		}
	}
}

// TestAppendCanonicalMatchesEncodingJSON compares the fast path's JSON
// writer with encoding/json (what canonicalJSON writes) on generated
// plain values, strings with every kind of character included.
func TestAppendCanonicalMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"a", "Z", "<", "&", "\"", "\\", "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f",
		"é", "\u2028", "\u2029", "\ufeff", "😀", "\xff", "\xe2\x80", " ", "/"}
	str := func() string {
		var sb strings.Builder
		for range r.IntN(6) {
			sb.WriteString(pieces[r.IntN(len(pieces))])
		}
		return sb.String()
	}
	var value func(depth int) any
	value = func(depth int) any {
		switch k := r.IntN(6); {
		case k == 0 && depth < 4:
			m := map[string]any{}
			for range r.IntN(4) {
				m[str()] = value(depth + 1)
			}
			return m
		case k == 1 && depth < 4:
			l := []any{}
			for range r.IntN(4) {
				l = append(l, value(depth+1))
			}
			return l
		case k == 2:
			return r.Int64() - r.Int64()
		case k == 3:
			return r.IntN(2) == 0
		}
		return str()
	}
	for range 5000 {
		v := map[string]any{str(): value(0), str(): value(0)}
		got, ok := appendCanonical(nil, v)
		if !ok {
			t.Fatalf("%#v: not plain", v)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(jsonValue(v)); err != nil {
			t.Fatal(err)
		}
		if want := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\nwrote    %s\nexpected %s", v, got, want)
		}
	}
	if _, ok := appendCanonical(nil, map[string]any{"a": 1.5}); ok {
		t.Fatal("a float taken as plain")
	}
}

// jsonValue converts plain values to the values encoding/json produces
// when it decodes JSON with UseNumber, which is what canonicalJSON encodes.
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = jsonValue(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = jsonValue(x)
		}
		return l
	case int64:
		return json.Number(strconv.FormatInt(v, 10))
	}
	return v
}

// TestReadLimited reads files around the sizes where readLimited changes
// buffers, and around the limit.
func TestReadLimited(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 4097, 8192, 8193, 20000} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte('a' + i%26)
		}
		p := filepath.Join(dir, strconv.Itoa(size))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int64{int64(size) - 1, int64(size), int64(size) + 1, 1 << 20} {
			if limit < 0 {
				continue
			}
			got, tooBig, err := readLimited(p, limit)
			switch {
			case err != nil:
				t.Fatalf("size %d, limit %d: %v", size, limit, err)
			case int64(size) > limit && (tooBig != int64(size) || got != nil):
				t.Fatalf("size %d, limit %d: tooBig %d, %d bytes", size, limit, tooBig, len(got))
			case int64(size) <= limit && (tooBig != 0 || !bytes.Equal(got, data) || got == nil):
				t.Fatalf("size %d, limit %d: tooBig %d, %d bytes (nil %v)", size, limit, tooBig, len(got), got == nil)
			}
		}
	}
	if _, _, err := readLimited(filepath.Join(dir, "missing"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
