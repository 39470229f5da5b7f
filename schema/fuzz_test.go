package schema_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/schema"
)

// The fuzz targets of this file treat the package as a black box: they
// build repositories from the fuzzer's input, load them with one Validator
// per target (schema.New runs once) and check what the package documents
// for any input. FuzzLoad and FuzzFastPathMatchesCUE (package schema) are
// the internal ones: a base tree with one file replaced, and the fast path
// against CUE.

// fzPathKind says what the layout makes of a path.
type fzPathKind int

const (
	fzObject  fzPathKind = iota // an object file (ObjectKeyForPath says ok)
	fzOutside                   // an object extension outside the layout: always an error
	fzIgnored                   // not read, never reported
)

// fzPaths are the paths FuzzLoadTree picks from, with what they are.
var fzPaths = []struct {
	p    string
	kind fzPathKind
}{
	{"fleetwave.yaml", fzObject},
	{"fleetwave.json", fzObject},
	{"fleetwave.cue", fzObject},
	{"nodes/n1.yaml", fzObject},
	{"nodes/n1.cue", fzObject},
	{"nodes/n2.json", fzObject},
	{"brc/web.yaml", fzObject},
	{"brc/web.json", fzObject},
	{"blocks/web.yaml", fzObject},
	{"blocks/web.cue", fzObject},
	{"workspaces/ws.yml", fzObject},
	{"organizations/acme.json", fzObject},
	{"rollouts/r1.yaml", fzObject},
	{"approvals/a1.cue", fzObject},
	{"nodes/Bad_Name.yaml", fzObject}, // an object file whose name is invalid
	{"nodes/eu/n3.yaml", fzOutside},
	{"node/n1.json", fzOutside},
	{"config.cue", fzOutside},
	{"status/n1.yaml", fzIgnored},
	{".github/ci.yml", fzIgnored},
	{"cue.mod/module.cue", fzIgnored},
	{"README.md", fzIgnored},
}

// fzTree builds the repository of FuzzLoadTree: 1 + n%3 files.
func fzTree(n, p1 uint8, d1 []byte, p2 uint8, d2 []byte, p3 uint8, d3 []byte) map[string][]byte {
	files := map[string][]byte{}
	picks := []struct {
		p uint8
		d []byte
	}{{p1, d1}, {p2, d2}, {p3, d3}}
	for _, pk := range picks[:1+int(n)%3] {
		files[fzPaths[int(pk.p)%len(fzPaths)].p] = pk.d
	}
	return files
}

func fzKindOf(p string) fzPathKind {
	for _, x := range fzPaths {
		if x.p == p {
			return x.kind
		}
	}
	if _, ok := schema.ObjectKeyForPath(p); ok {
		return fzObject
	}
	panic("fzKindOf: a path of no known kind: " + p)
}

// fzCheckPosition fails unless fe lies inside files[fe.Path]: lines count
// from 1 at '\n', columns count bytes from 1, and an error at the end of
// the file is at most one past its last byte.
func fzCheckPosition(t *testing.T, fe fleetwave.FileError, data []byte) {
	t.Helper()
	if fe.Line < 0 || fe.Col < 0 {
		t.Fatalf("negative position: %#v", fe)
	}
	if fe.Line == 0 {
		if fe.Col != 0 {
			t.Fatalf("a column without a line: %#v", fe)
		}
		return
	}
	lines := bytes.Split(data, []byte{'\n'})
	if fe.Line > len(lines) {
		t.Fatalf("line %d of a file of %d lines: %#v\nfile: %q", fe.Line, len(lines), fe, data)
	}
	if fe.Col == 0 {
		return // a line without a column is allowed (Error prints path:line)
	}
	l := lines[fe.Line-1]
	if fe.Col > len(l)+1 {
		t.Fatalf("column %d of line %d, which has %d bytes: %#v\nline: %q", fe.Col, fe.Line, len(l), fe, l)
	}
}

// fzValidationError fails unless err is a *fleetwave.ValidationError
// whose errors are well-formed (a message, no recovered panic, sorted,
// unique) and positioned inside the files they name.
func fzValidationError(t *testing.T, err error, files map[string][]byte) *fleetwave.ValidationError {
	t.Helper()
	verr, ok := err.(*fleetwave.ValidationError)
	if !ok {
		t.Fatalf("Load returned %T, want *fleetwave.ValidationError: %v", err, err)
	}
	if len(verr.Errors) == 0 {
		t.Fatal("a ValidationError without errors")
	}
	configGiven := false
	for p := range files {
		if k, ok := schema.ObjectKeyForPath(p); ok && k.Kind() == fleetwave.KindConfig {
			configGiven = true
		}
	}
	seen := map[fleetwave.FileError]bool{}
	for _, fe := range verr.Errors {
		if strings.TrimSpace(fe.Msg) == "" {
			t.Fatalf("an error without a message: %#v", fe)
		}
		if strings.Contains(fe.Msg, "internal error") {
			t.Fatalf("a panic while checking a file (recovered): %#v", fe)
		}
		if seen[fe] {
			t.Fatalf("duplicate error %#v", fe)
		}
		seen[fe] = true
		data, given := files[fe.Path]
		switch {
		case !given:
			// the one error about a file that is not there
			if fe.Path != "fleetwave.cue" || fe.Line != 0 || configGiven || !strings.Contains(fe.Msg, "missing the kind:config object") {
				t.Fatalf("an error in a file that is not part of the input: %#v", fe)
			}
		case fzKindOf(fe.Path) == fzIgnored:
			t.Fatalf("an error in a file the layout does not read: %#v", fe)
		}
		fzCheckPosition(t, fe, data)
	}
	if !slices.IsSortedFunc(verr.Errors, func(a, b fleetwave.FileError) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	}) {
		t.Fatalf("errors not sorted by path, line, column:\n%v", verr)
	}
	return verr
}

// FuzzLoadTree loads a repository of one to three files, each at a path
// from a fixed set of layout, outside-layout and ignored paths, with
// arbitrary content. Properties: a snapshot or a *ValidationError, never
// both, never another error (the input is in memory) and never a recovered
// panic; every error names an input file (or the missing config), has a
// message and lies inside its file; outside-layout files are always
// reported, ignored ones never; errors are sorted and unique; a second Load
// of the same tree (served by the cache) gives the same result; the hash
// of every object of a snapshot is the sha256 of Normalize of its file.
func FuzzLoadTree(f *testing.F) {
	v, err := schema.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(1), uint8(0), []byte("kind: config\nname: fleetwave\n"), uint8(3), []byte("kind: node\nname: n1\nlabels: {env: prod}\n"), uint8(0), []byte(nil))
	f.Add(uint8(2), uint8(2), []byte("kind: \"config\"\nname: \"fleetwave\"\n"), uint8(8),
		[]byte("kind: block\nname: web\nactions: {install: {command: \"x\"}}\n"), uint8(6), []byte("kind: trigger\nname: web\nblock_name: web\n"))
	f.Add(uint8(0), uint8(5), []byte(`{"kind":"node","name":"n2","labels":{"a b":"c"}}`), uint8(0), []byte(nil), uint8(0), []byte(nil))
	f.Fuzz(func(t *testing.T, n uint8, p1 uint8, d1 []byte, p2 uint8, d2 []byte, p3 uint8, d3 []byte) {
		files := fzTree(n, p1, d1, p2, d2, p3, d3)
		snap, err := v.Load(files)
		if (snap == nil) == (err == nil) {
			t.Fatalf("Load returned a snapshot (%v) and an error (%v)", snap != nil, err)
		}
		outside := map[string]bool{}
		for p := range files {
			if fzKindOf(p) == fzOutside {
				outside[p] = true
			}
		}
		var verr *fleetwave.ValidationError
		if err != nil {
			verr = fzValidationError(t, err, files)
			for _, fe := range verr.Errors {
				delete(outside, fe.Path)
			}
		}
		if len(outside) > 0 {
			t.Fatalf("object files outside the layout not reported: %v", outside)
		}
		// again: every file is now served by the cache
		snap2, err2 := v.Load(files)
		if !reflect.DeepEqual(err, err2) || !reflect.DeepEqual(snap, snap2) {
			t.Fatalf("two loads of the same tree differ:\n%v\n---\n%v", err, err2)
		}
		if snap == nil {
			return
		}
		for key, o := range snap.Objects {
			data, ok := files[o.Path]
			if !ok || fzKindOf(o.Path) != fzObject {
				t.Fatalf("object %s from %q, which is not an object file of the input", key, o.Path)
			}
			if k, _ := schema.ObjectKeyForPath(o.Path); k != key || o.Key != key {
				t.Fatalf("object %s (key %s) from %q, which holds %s", key, o.Key, o.Path, k)
			}
			norm, err := schema.Normalize(o.Path, data)
			if err != nil {
				t.Fatalf("Normalize(%s) of a valid file: %v", o.Path, err)
			}
			if sum := sha256.Sum256(norm); hex.EncodeToString(sum[:]) != o.Hash {
				t.Fatalf("object %s: hash %s is not the sha256 of Normalize (%s)", key, o.Hash, norm)
			}
		}
	})
}

// fzNormalizePaths are the formats FuzzNormalize reads a file as.
var fzNormalizePaths = []string{"nodes/n1.json", "nodes/n1.yaml", "nodes/n1.yml", "nodes/n1.cue"}

// FuzzNormalize checks Normalize on arbitrary content in each format:
// deterministic; its output is a JSON object whose keys are sorted and
// which normalizes to itself (as JSON, as YAML, which reads JSON, and as
// CUE fields: the object without its braces), so a file converted to its canonical form keeps its
// hash; a JSON file reformatted (indented or compacted) keeps its
// normalized form; errors never come from a recovered panic, and parse
// errors lie inside the file.
func FuzzNormalize(f *testing.F) {
	f.Add(uint8(0), []byte(`{"kind":"node","name":"n1","labels":{"b":"2","a":"1"}}`))
	f.Add(uint8(1), []byte("kind: node\nname: n1\nlabels:\n  b: \"2\"\n  a: \"1\"\n"))
	f.Add(uint8(3), []byte("kind: \"node\"\nname: \"n1\"\nlabels: {b: \"2\", a: \"1\"}\n"))
	f.Add(uint8(0), []byte(`{"n": 1.50, "m": 10000000000000000000000000, "e": 1e400, "s": "\u00e9\u0301"}`))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		p := fzNormalizePaths[int(which)%len(fzNormalizePaths)]
		out, err := schema.Normalize(p, data)
		out2, err2 := schema.Normalize(p, data)
		if !bytes.Equal(out, out2) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("Normalize is not deterministic: %q (%v) then %q (%v)", out, err, out2, err2)
		}
		if viaCUE, cerr := schema.NormalizeCUE(p, data); !bytes.Equal(out, viaCUE) || (err == nil) != (cerr == nil) {
			// the plain forms are written without CUE, and as CUE would
			t.Fatalf("Normalize %q (%v), through CUE %q (%v)", out, err, viaCUE, cerr)
		}
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatalf("a panic while normalizing (recovered): %v", err)
			}
			var verr *fleetwave.ValidationError
			if errors.As(err, &verr) {
				for _, fe := range verr.Errors {
					if fe.Path != p {
						t.Fatalf("an error of another file: %#v", fe)
					}
					fzCheckPosition(t, fe, data)
				}
			}
			return
		}
		if !json.Valid(out) || !bytes.HasPrefix(out, []byte("{")) {
			t.Fatalf("normalized form is not a JSON object: %q", out)
		}
		fzCheckSortedKeys(t, out)
		for _, q := range fzNormalizePaths {
			in := out
			if path.Ext(q) != ".json" && !fzFloat64Numbers(out) {
				// go-yaml reads a number beyond float64 (1e400) as a
				// string, CUE as a number: the twins differ (no field of
				// the schema takes such a number, so no valid file does)
				continue
			}
			if (path.Ext(q) == ".yaml" || path.Ext(q) == ".yml") && strings.ContainsFunc(string(out), fzNotYAML) {
				// JSON does not escape every character YAML refuses
				// (U+0080, U+FEFF, ...): such a document is not YAML
				continue
			}
			if path.Ext(q) == ".cue" {
				// a .cue object file is plain fields, not an embedded struct
				in = out[1 : len(out)-1]
			}
			again, err := schema.Normalize(q, in)
			if err != nil {
				t.Fatalf("the normalized form %q does not normalize as %s: %v", out, path.Ext(q), err)
			}
			if !bytes.Equal(again, out) {
				t.Fatalf("normalizing the normalized form as %s changes it:\n%s\n%s", path.Ext(q), out, again)
			}
		}
		if p == "nodes/n1.json" {
			var indented, compact bytes.Buffer
			if json.Indent(&indented, data, "", "\t") == nil {
				if again, err := schema.Normalize(p, indented.Bytes()); err != nil || !bytes.Equal(again, out) {
					t.Fatalf("the indented file normalizes to %q (%v), the file to %q", again, err, out)
				}
			}
			if json.Compact(&compact, data) == nil {
				if again, err := schema.Normalize(p, compact.Bytes()); err != nil || !bytes.Equal(again, out) {
					t.Fatalf("the compacted file normalizes to %q (%v), the file to %q", again, err, out)
				}
			}
		}
	})
}

// fzNotYAML reports whether YAML 1.2 (§5.1) refuses character r in a
// stream: only tab, line feed, carriage return, printable ASCII, NEL and
// the non-control, non-surrogate rest of Unicode but U+FFFE and U+FFFF are
// allowed.
func fzNotYAML(r rune) bool {
	return !(r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
		(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || (r >= 0x10000 && r <= 0x10ffff))
}

// fzFloat64Numbers reports whether every number of the JSON document data
// is within the range of a float64.
func fzFloat64Numbers(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		if n, ok := tok.(json.Number); ok {
			if _, err := strconv.ParseFloat(string(n), 64); err != nil {
				return false
			}
		}
	}
}

// fzCheckSortedKeys fails unless data is its own canonical encoding: the
// keys of every object sorted, no white space, numbers as written.
func fzCheckSortedKeys(t *testing.T, data []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		t.Fatalf("normalized form %q: %v", data, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		t.Fatal(err)
	}
	if got := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, data) {
		t.Fatalf("normalized form is not canonical (sorted keys, compact):\n%s\n%s", data, got)
	}
}

// The label rules of schema/cue/fleetwave.cue (#Labels) and package doc:
// keys and values are 1-63 chars of [A-Za-z0-9._-], alphanumeric at both
// ends; a key may have a DNS subdomain prefix ("example.com/", at most
// 253 chars, at least two parts) before its name; a node has at most 16
// labels. fzLabelPart, fzLabelKey and fzLabelValue are the reference.
var (
	fzLabelPart   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	fzLabelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

const fzMaxLabels = 16

func fzLabelKey(k string) bool {
	if prefix, name, ok := strings.Cut(k, "/"); ok {
		return len(prefix) <= 253 && fzLabelPrefix.MatchString(prefix) && fzLabelPart.MatchString(name)
	}
	return fzLabelPart.MatchString(k)
}

func fzLabelValue(v string) bool { return fzLabelPart.MatchString(v) }

// fzLabels reads a label map from the fuzzer's text: one "key=value" per
// line (a line without '=' is a key with an empty value); the first of
// keys given twice wins, so the file never holds one key twice.
func fzLabels(raw string) (map[string]string, []string) {
	labels := map[string]string{}
	var order []string
	if raw == "" {
		return labels, nil
	}
	for _, line := range strings.Split(raw, "\n") {
		k, v, _ := strings.Cut(line, "=")
		if _, dup := labels[k]; dup {
			continue
		}
		labels[k] = v
		order = append(order, k)
	}
	return labels, order
}

// fzQuote is a double-quoted string literal that JSON, YAML and CUE read
// the same way (JSON's escapes; invalid UTF-8 becomes U+FFFD, as it does
// for every reader of a JSON file).
func fzQuote(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

// fzFormats are the object file formats of the generated files.
var fzFormats = []string{".json", ".yaml", ".cue"}

// fzObjectFile writes an object as a file of format ext: fields is a list
// of name and literal pairs whose values are already literals (fzQuote or
// fzStruct).
func fzObjectFile(ext string, fields ...string) []byte {
	var b strings.Builder
	switch ext {
	case ".json":
		b.WriteString(fzStruct(fields...))
	default: // YAML block mapping / CUE fields, one per line, flow values
		for i := 0; i < len(fields); i += 2 {
			b.WriteString(fzQuote(fields[i]) + ": " + fields[i+1] + "\n")
		}
	}
	return []byte(b.String())
}

// fzStruct is a flow struct literal {"k": v, ...}, valid JSON, YAML and CUE.
func fzStruct(fields ...string) string {
	parts := make([]string, 0, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		parts = append(parts, fzQuote(fields[i])+": "+fields[i+1])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// fzPositionedIn fails unless every error of verr is in file p, at a line
// and a column inside it.
func fzPositionedIn(t *testing.T, verr *fleetwave.ValidationError, p string) {
	t.Helper()
	for _, fe := range verr.Errors {
		if fe.Path != p || fe.Line <= 0 || fe.Col <= 0 {
			t.Fatalf("error %#v, want one at %s:line:col\nall:\n%v", fe, p, verr)
		}
	}
}

var fzConfigFile = []byte("kind: config\nname: fleetwave\n")

// FuzzLabels writes a node file (JSON, YAML or CUE) with the fuzzer's
// labels into an otherwise valid repository. The tree loads iff the
// labels follow the documented rules (the reference above): at most 16,
// each key and value valid. A rejection is positioned (file:line:col) in
// the node's file; an accepted node has exactly the labels written.
func FuzzLabels(f *testing.F) {
	v, err := schema.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), "env=prod\nexample.com/tier=web-1")
	f.Add(uint8(1), "a b=c")
	f.Add(uint8(2), "-a=b.")
	f.Fuzz(func(t *testing.T, format uint8, raw string) {
		labels, order := fzLabels(raw)
		ext := fzFormats[int(format)%len(fzFormats)]
		p := "nodes/n1" + ext
		lits := make([]string, 0, 2*len(order))
		for _, k := range order {
			lits = append(lits, k, fzQuote(labels[k]))
		}
		node := fzObjectFile(ext, "kind", `"node"`, "name", `"n1"`, "labels", fzStruct(lits...))
		snap, err := v.Load(map[string][]byte{"fleetwave.yaml": fzConfigFile, p: node})
		valid := len(labels) <= fzMaxLabels
		for k, val := range labels {
			valid = valid && fzLabelKey(k) && fzLabelValue(val)
		}
		switch {
		case valid && err != nil:
			t.Fatalf("valid labels %q refused:\n%v\nfile:\n%s", labels, err, node)
		case !valid && err == nil:
			t.Fatalf("invalid labels %q accepted\nfile:\n%s", labels, node)
		case err != nil:
			verr := fzValidationError(t, err, map[string][]byte{"fleetwave.yaml": fzConfigFile, p: node})
			fzPositionedIn(t, verr, p)
		default:
			got := snap.Nodes["n1"].Labels
			if len(got) != len(labels) || (len(got) > 0 && !reflect.DeepEqual(got, labels)) {
				t.Fatalf("labels %q loaded as %q", labels, got)
			}
		}
	})
}

// fzSelector reads a selector from the fuzzer's text, one term per line,
// fields separated by tabs: "L<TAB>key<TAB>value" is a match_labels entry
// (the first of a key given twice wins); any other line is a
// match_expressions term "key[<TAB>operator[<TAB>value...]]": one field
// means no operator field, two mean no values field, a third field that is
// the only one and empty means values: [].
func fzSelector(raw string) (fleetwave.Selector, []string, []fzTermPresence) {
	var s fleetwave.Selector
	var order []string
	var presence []fzTermPresence
	if raw == "" {
		return s, nil, nil
	}
	for _, line := range strings.Split(raw, "\n") {
		fields := strings.Split(line, "\t")
		if fields[0] == "L" && len(fields) == 3 {
			if s.MatchLabels == nil {
				s.MatchLabels = map[string]string{}
			}
			if _, dup := s.MatchLabels[fields[1]]; !dup {
				s.MatchLabels[fields[1]] = fields[2]
				order = append(order, fields[1])
			}
			continue
		}
		term := fleetwave.SelectorTerm{Key: fields[0]}
		pr := fzTermPresence{op: len(fields) >= 2, values: len(fields) >= 3}
		if pr.op {
			term.Operator = fields[1]
		}
		if pr.values && !(len(fields) == 3 && fields[2] == "") {
			term.Values = fields[2:]
		}
		s.MatchExpressions = append(s.MatchExpressions, term)
		presence = append(presence, pr)
	}
	return s, order, presence
}

// fzTermPresence says which fields of a term the file writes.
type fzTermPresence struct{ op, values bool }

// fzOperators are the operators the schema documents.
var fzOperators = []string{"in", "notin", "exists", "doesnotexist"}

// fzSelectorValid is the reference validation of a selector: match_labels
// keys and values are labels (no count limit), a term's key is a label key,
// its operator one of fzOperators, in and notin have at least one value,
// exists and doesnotexist none; values themselves are any strings.
func fzSelectorValid(s fleetwave.Selector, presence []fzTermPresence) bool {
	for k, v := range s.MatchLabels {
		if !fzLabelKey(k) || !fzLabelValue(v) {
			return false
		}
	}
	for i, term := range s.MatchExpressions {
		if !fzLabelKey(term.Key) || !presence[i].op || !slices.Contains(fzOperators, term.Operator) {
			return false
		}
		if (term.Operator == "in" || term.Operator == "notin") == (len(term.Values) == 0) {
			return false
		}
	}
	return true
}

// fzSelectorFile writes a trigger with selector s as a file of format ext.
func fzSelectorFile(ext string, s fleetwave.Selector, order []string, presence []fzTermPresence) []byte {
	var sel []string
	if s.MatchLabels != nil {
		var ml []string
		for _, k := range order {
			ml = append(ml, k, fzQuote(s.MatchLabels[k]))
		}
		sel = append(sel, "match_labels", fzStruct(ml...))
	}
	if s.MatchExpressions != nil {
		terms := make([]string, len(s.MatchExpressions))
		for i, term := range s.MatchExpressions {
			fields := []string{"key", fzQuote(term.Key)}
			if presence[i].op {
				fields = append(fields, "operator", fzQuote(term.Operator))
			}
			if presence[i].values {
				vals := make([]string, len(term.Values))
				for j, v := range term.Values {
					vals[j] = fzQuote(v)
				}
				fields = append(fields, "values", "["+strings.Join(vals, ", ")+"]")
			}
			terms[i] = fzStruct(fields...)
		}
		sel = append(sel, "match_expressions", "["+strings.Join(terms, ", ")+"]")
	}
	return fzObjectFile(ext, "kind", `"trigger"`, "name", `"web"`, "block_name", `"web"`, "selector", fzStruct(sel...))
}

// fzJSONRoundTrip is what a reader of the JSON encoding of x gets: strings
// with invalid UTF-8 get U+FFFD, as in the generated files.
func fzJSONRoundTrip[T any](x T) T {
	b, err := json.Marshal(x)
	if err != nil {
		panic(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

var fzBlockFile = []byte("kind: block\nname: web\nactions:\n  install: {command: \"echo install\"}\n  upgrade: {command: \"echo upgrade\"}\n")

// FuzzSelectorSchema writes a trigger with the fuzzer's selector (JSON,
// YAML or CUE) into an otherwise valid repository. The tree loads iff the
// selector follows the documented rules (fzSelectorValid): in particular
// an operator outside in/notin/exists/doesnotexist is never accepted. A
// rejection is positioned in the trigger's file; an accepted trigger has
// exactly the selector written.
func FuzzSelectorSchema(f *testing.F) {
	v, err := schema.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), "L\tenv\tprod\nzone\tin\teu-1\teu-2\ngpu\texists")
	f.Add(uint8(1), "zone\tIN\teu")
	f.Add(uint8(2), "zone\tnotin\t")
	f.Fuzz(func(t *testing.T, format uint8, raw string) {
		s, order, presence := fzSelector(raw)
		ext := fzFormats[int(format)%len(fzFormats)]
		p := "brc/web" + ext
		trigger := fzSelectorFile(ext, s, order, presence)
		files := map[string][]byte{"fleetwave.yaml": fzConfigFile, "blocks/web.yaml": fzBlockFile, p: trigger}
		snap, err := v.Load(files)
		valid := fzSelectorValid(s, presence)
		switch {
		case valid && err != nil:
			t.Fatalf("valid selector %#v refused:\n%v\nfile:\n%s", s, err, trigger)
		case !valid && err == nil:
			t.Fatalf("invalid selector %#v accepted\nfile:\n%s", s, trigger)
		case err != nil:
			fzPositionedIn(t, fzValidationError(t, err, files), p)
			return
		}
		got := snap.Triggers["web"].Selector
		for _, term := range got.MatchExpressions {
			if !slices.Contains(fzOperators, term.Operator) {
				t.Fatalf("operator %q accepted", term.Operator)
			}
		}
		want := fzJSONRoundTrip(s)
		if got == nil {
			got = &fleetwave.Selector{}
		}
		norm := func(s fleetwave.Selector) fleetwave.Selector {
			if len(s.MatchLabels) == 0 {
				s.MatchLabels = nil
			}
			if len(s.MatchExpressions) == 0 {
				s.MatchExpressions = nil
			}
			for i := range s.MatchExpressions {
				if len(s.MatchExpressions[i].Values) == 0 {
					s.MatchExpressions[i].Values = nil
				}
			}
			return s
		}
		if !reflect.DeepEqual(norm(*got), norm(want)) {
			t.Fatalf("selector %#v loaded as %#v\nfile:\n%s", want, *got, trigger)
		}
	})
}
