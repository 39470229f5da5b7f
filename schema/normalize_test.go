package schema

import (
	"bytes"
	"testing"

	"github.com/fleetwave/fleetwave/internal/fleetgen"
)

// TestNormalizeOfPlainFilesIsCUEs: Normalize writes the canonical form of
// a file in the plainest form of its format without CUE; it is the form
// CUE gives, byte for byte, for a generated tree (every kind, the three
// formats) and for the plain forms that need care (escapes, non-ASCII
// text, U+2028, negative and large integers, empty and nested structs and
// lists, quoted labels). A file not in such a form goes to CUE.
func TestNormalizeOfPlainFilesIsCUEs(t *testing.T) {
	dir := t.TempDir()
	if err := fleetgen.Generate(dir, 300, 6, 6, 7); err != nil {
		t.Fatal(err)
	}
	files := readTree(t, dir)
	for p, data := range map[string]string{
		"nodes/a.json": `{"kind":"node","name":"a","labels":{},"capabilities":[],"x":{"y":[1,-2,9007199254740993,[true,false]],"z":{}}}`,
		"nodes/b.json": `{"s":"tab\there \"quoted\" back\\slash \u00e9 \u2028 <&> /"}`,
		"nodes/c.yaml": "kind: node\nname: c\nlabels:\n  \"a b\": x\n  z: \"\"\nlist:\n  - 1\n  - -3\n  - true\n",
		"nodes/d.cue":  "kind: \"node\"\nname: \"d\"\n\"quoted-label\": [1, 2, {a: \"ü\"}]\n// a comment\nempty: {}\n",
		"nodes/e.yml":  "kind: node\nname: e\nn: 0\nbig: 123456789012345678\n",
		"nodes/f.json": `{"kind":"node","name":"f","n":1.5}`, // not plain: CUE's path
	} {
		files[p] = []byte(data)
	}
	taken := 0
	for p, data := range files {
		got, err := Normalize(p, data)
		want, werr := normalizeCUE(p, data)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%s: Normalize %q (%v), through CUE %q (%v)", p, got, err, want, werr)
		}
		if _, ok := plainData(p, data); ok {
			taken++
		}
	}
	if taken < len(files)*9/10 {
		t.Fatalf("%d of %d files in a plain form, expected nearly all", taken, len(files))
	}
	if _, ok := plainData("nodes/f.json", files["nodes/f.json"]); ok {
		t.Fatal("a decimal number taken as plain")
	}
}
