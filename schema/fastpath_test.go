package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cuelang.org/go/cue/ast"

	"github.com/fleetwave/fleetwave"
)

// A generated value: rendered in YAML, JSON or CUE in many literal forms,
// valid or not. The rendering need not be faithful (a YAML plain scalar
// "true" is a bool): both paths read the same bytes.
type gv struct {
	kind   byte // 's'tring, 'i'nt, 'f'loat, 'b'ool, 'n'ull, '{' struct, '[' list
	s      string
	i      int64
	b      bool
	fields []gf
	elems  []*gv
}

type gf struct {
	key string
	val *gv
}

func gstr(s string) *gv { return &gv{kind: 's', s: s} }
func gint(i int64) *gv  { return &gv{kind: 'i', i: i} }

// fileGen generates object files of the kinds with a fast path.
type fileGen struct{ r *rand.Rand }

func (g *fileGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *fileGen) chance(p float64) bool    { return g.r.Float64() < p }

var (
	genNames = []string{"a", "n1", "node-000042", "web-1", "x0", strings.Repeat("a", 63),
		"A", "-a", "a-", "", "a_b", strings.Repeat("b", 64), "ü", "a.b", "1", "a b"}
	genStrings = []string{"", "x", "1.0", "héllo", `a"b`, `a\b`, "line1\nline2\n", "tab\there", "\u2028", "<&>",
		"a fairly long string value", "\x7f", "\x01", "trailing ", " leading", "#comment", "a: b", "- x", "null", "true",
		"0755", "1e3", "~", "'q'", "${x}", "\\(x)", "\U0001F600", "\xff", "two  spaces", "CRON_TZ=UTC 0 * * * *"}
	genLabelKeys = []string{"env", "app.kubernetes.io/name", "a", "A-b_c.d", "rack", "a b", "", "-a", "x/", "é",
		strings.Repeat("k", 64), "123", "true", "null", "kind", "example.com/", "a/b/c", "_x", "#x", "Ab",
		"if", "for", "let", "in", "import", "package", "_", "__x", "$x", "a$b", "x\u00e9", "K\u212a"}
	genLabelValues = []string{"prod", "eu-west", "r001", "", "a b", "x.y_z-1", strings.Repeat("v", 64), "-x", "é"}
	genInts        = []int64{0, 1, -1, 2, 5, 100, 101, 1000000, 1 << 40, -1 << 40}
)

func (g *fileGen) name() *gv {
	if g.chance(0.85) {
		return gstr(fmt.Sprintf("n%d", g.r.IntN(50)))
	}
	return gstr(g.pick(genNames...))
}

func (g *fileGen) junk(depth int) *gv {
	switch g.r.IntN(10) {
	case 0:
		return gstr(g.pick(genStrings...))
	case 1:
		return gint(genInts[g.r.IntN(len(genInts))])
	case 2:
		return &gv{kind: 'f', s: g.pick("1.0", "0.5", "1e3", "-2.5")}
	case 3:
		return &gv{kind: 'b', b: g.chance(0.5)}
	case 4:
		return &gv{kind: 'n'}
	case 5:
		if depth < 3 {
			return &gv{kind: '{', fields: []gf{{g.pick(genLabelKeys...), g.junk(depth + 1)}}}
		}
		return &gv{kind: '{'}
	case 6:
		if depth < 3 {
			return &gv{kind: '[', elems: []*gv{g.junk(depth + 1), gstr("x")}}
		}
		return &gv{kind: '['}
	case 7:
		return gstr(g.pick(genNames...))
	default:
		return gstr("")
	}
}

func (g *fileGen) strMap(keys, values []string, n int) *gv {
	m := &gv{kind: '{'}
	for range n {
		k := fmt.Sprintf("k%d", g.r.IntN(20))
		if g.chance(0.2) {
			k = g.pick(keys...)
		}
		v := gstr(fmt.Sprintf("v%d", g.r.IntN(9)))
		if g.chance(0.2) {
			v = gstr(g.pick(values...))
		}
		m.fields = append(m.fields, gf{k, v})
	}
	return m
}

func (g *fileGen) list(n int, elem func() *gv) *gv {
	l := &gv{kind: '['}
	for range n {
		l.elems = append(l.elems, elem())
	}
	return l
}

func (g *fileGen) selector() *gv {
	s := &gv{kind: '{'}
	if g.chance(0.6) {
		s.fields = append(s.fields, gf{"match_labels", g.strMap(genLabelKeys, genLabelValues, g.r.IntN(4))})
	}
	if g.chance(0.6) {
		s.fields = append(s.fields, gf{"match_expressions", g.list(g.r.IntN(3), func() *gv {
			t := &gv{kind: '{', fields: []gf{{"key", gstr(g.pick("tier", "env", "", "a b", "x.io/y"))}}}
			op := g.pick("in", "notin", "exists", "doesnotexist", "In", "")
			if g.chance(0.9) {
				t.fields = append(t.fields, gf{"operator", gstr(op)})
			}
			if g.chance(0.6) {
				t.fields = append(t.fields, gf{"values", g.list(g.r.IntN(3), func() *gv { return gstr(g.pick("a", "b", "")) })})
			}
			return t
		})})
	}
	return s
}

// fields returns the fields of an object of kind, mostly valid.
func (g *fileGen) fields(kind fleetwave.Kind) []gf {
	names := func() *gv { return g.list(g.r.IntN(3), g.name) }
	crit := func() *gv { return gstr(g.pick("high", "medium", "low", "high", "medium", "urgent", "")) }
	batch := func() *gv { return gint(g.pick64(1, 5, 100, 0, -1)) }
	var opt map[string]func() *gv
	switch kind {
	case fleetwave.KindNode:
		opt = map[string]func() *gv{
			"organization": g.name, "workspace": g.name, "criticality": crit,
			"labels":              func() *gv { return g.strMap(genLabelKeys, genLabelValues, g.r.IntN(6)+g.r.IntN(2)*12) },
			"maintenance_windows": names,
			"capabilities":        func() *gv { return g.list(g.r.IntN(3), func() *gv { return gstr(g.pick(genStrings...)) }) },
			"data_addresses":      func() *gv { return g.strMap(genStrings, genStrings, g.r.IntN(3)) },
			"drain":               func() *gv { return &gv{kind: 'b', b: g.chance(0.5)} },
		}
	case fleetwave.KindOrganization:
		opt = map[string]func() *gv{"criticality": crit, "maintenance_windows": names}
	case fleetwave.KindWorkspace:
		opt = map[string]func() *gv{"organization": g.name, "criticality": crit, "maintenance_windows": names}
	case fleetwave.KindRollout:
		opt = map[string]func() *gv{
			"brc": g.name, "action_name": g.name, "target_version": func() *gv { return gstr(g.pick(genStrings...)) },
			"nodes": names, "selector": g.selector, "batch_size": batch,
		}
	case fleetwave.KindApproval:
		opt = map[string]func() *gv{
			"brc": g.name, "target_version": func() *gv { return gstr(g.pick("1.0", "2", "", "v1.2.3")) },
			"nodes": names, "batch_size": batch, "requested_by": func() *gv { return gstr(g.pick(genStrings...)) },
			"decision":   func() *gv { return gstr(g.pick("approved", "rejected", "maybe")) },
			"decided_by": func() *gv { return gstr(g.pick(genStrings...)) },
		}
	}
	var fs []gf
	for _, k := range slices.Sorted(maps.Keys(opt)) {
		required := (kind == fleetwave.KindRollout || kind == fleetwave.KindApproval) && k == "brc" ||
			kind == fleetwave.KindApproval && k == "target_version"
		if (required && g.chance(0.97)) || g.chance(0.5) {
			v := opt[k]()
			if g.chance(0.04) {
				v = g.junk(0)
			}
			fs = append(fs, gf{k, v})
		}
	}
	if g.chance(0.05) {
		fs = append(fs, gf{g.pick("extra", "Name", "kind ", "_hidden", "#def", "labels", "name"), g.junk(0)})
	}
	if g.chance(0.05) && len(fs) > 0 {
		f := fs[g.r.IntN(len(fs))]
		if g.chance(0.5) {
			f.val = g.junk(0)
		}
		fs = append(fs, f) // a duplicate field: CUE unifies
	}
	g.r.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	return fs
}

func (g *fileGen) pick64(xs ...int64) int64 { return xs[g.r.IntN(len(xs))] }

// fastKinds are the kinds with a fast path.
var fastKinds = []fleetwave.Kind{fleetwave.KindNode, fleetwave.KindOrganization, fleetwave.KindWorkspace, fleetwave.KindRollout, fleetwave.KindApproval}

// file returns a path and the content of one generated object file.
func (g *fileGen) file() (string, []byte) {
	kind := fastKinds[max(0, g.r.IntN(len(fastKinds)+2)-2)] // nodes 3 times out of 7
	return g.fileOf(kind, fmt.Sprintf("n%d", g.r.IntN(50)), g.r.IntN(3))
}

// fileOf returns a path and the content of one generated object file of
// kind, named name (most of the time), in format 0 (JSON), 1 (YAML) or 2 (CUE).
func (g *fileGen) fileOf(kind fleetwave.Kind, name string, format int) (string, []byte) {
	obj := &gv{kind: '{'}
	if g.chance(0.98) {
		k := gstr(string(kind))
		if g.chance(0.02) {
			k = gstr(g.pick("Node", "trigger", ""))
		}
		obj.fields = append(obj.fields, gf{"kind", k})
	}
	if g.chance(0.98) {
		n := gstr(name)
		if g.chance(0.03) {
			n = g.name()
		}
		obj.fields = append(obj.fields, gf{"name", n})
	}
	obj.fields = append(obj.fields, g.fields(kind)...)
	folder := folderOf(kind)
	switch format {
	case 0:
		return folder + name + ".json", []byte(g.json(obj, 0))
	case 1:
		var b strings.Builder
		g.yamlStruct(&b, obj, 0)
		return folder + name + g.pick(".yaml", ".yml"), []byte(b.String())
	default:
		var b strings.Builder
		if g.chance(0.1) {
			b.WriteString(g.pick("package x\n\n", "// a comment\n", "@attr()\n"))
		}
		for _, f := range obj.fields {
			b.WriteString(g.cueLabel(f.key) + ": " + g.cue(f.val) + g.pick("\n", "\n", ",\n", " @x()\n") + g.pick("", "", "// c\n"))
		}
		return folder + name + ".cue", []byte(b.String())
	}
}

func (g *fileGen) jsonString(s string) string {
	b, _ := json.Marshal(s) // escapes <, >, & as \u003c...
	q := string(b)
	switch g.r.IntN(6) {
	case 0:
		q = strings.ReplaceAll(q, "/", `\/`)
	case 1:
		q = `"` + strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(q[1:len(q)-1]) + `"`
	case 2:
		if s != "" && s[0] < 0x80 {
			q = fmt.Sprintf(`"\u%04x%s`, s[0], q[2:]) // first character escaped
		}
	}
	return q
}

func (g *fileGen) json(v *gv, depth int) string {
	ws := g.pick("", " ", "\n", "\r\n", "\t")
	switch v.kind {
	case 's':
		return g.jsonString(v.s)
	case 'i':
		if v.i == 0 && g.chance(0.1) {
			return g.pick("-0", "0.0", "00")
		}
		return strconv.FormatInt(v.i, 10)
	case 'f':
		return v.s
	case 'b':
		return strconv.FormatBool(v.b)
	case 'n':
		return "null"
	case '[':
		var parts []string
		for _, e := range v.elems {
			parts = append(parts, g.json(e, depth+1))
		}
		return "[" + ws + strings.Join(parts, g.pick("", "\n")+","+ws) + ws + "]"
	}
	var parts []string
	for _, f := range v.fields {
		parts = append(parts, g.jsonString(f.key)+g.pick("", "", "\n", " ")+":"+g.pick("", " ", "\n")+g.json(f.val, depth+1))
	}
	s := "{" + ws + strings.Join(parts, g.pick("", "", "\n", "\r\n ")+","+ws) + ws + "}"
	if depth == 0 && g.chance(0.03) {
		s = g.pick("\ufeff", " ", "") + s + g.pick("\n", " {}", " x", "")
	}
	return s
}

func (g *fileGen) yamlScalar(v *gv) string {
	switch v.kind {
	case 's':
		switch g.r.IntN(4) {
		case 0:
			return g.jsonString(v.s) // a double-quoted YAML scalar
		case 1:
			return "'" + strings.ReplaceAll(v.s, "'", "''") + "'"
		default:
			return v.s // plain: may be a number, a bool, or invalid
		}
	case 'i':
		if g.chance(0.15) {
			return g.pick("0o17", "0x1F", "010", "+5", "1_000", "!!int 3", "!!str 7", "!!float 1")
		}
		return strconv.FormatInt(v.i, 10)
	case 'f':
		return g.pick(v.s, ".inf", ".nan", "1.")
	case 'b':
		return g.pick(strconv.FormatBool(v.b), "True", "FALSE", "yes", "on")
	case 'n':
		return g.pick("null", "~", "", "Null")
	}
	return g.json(v, 1) // flow style
}

func (g *fileGen) yamlStruct(b *strings.Builder, v *gv, indent int) {
	pad := strings.Repeat(g.pick("  ", "  ", "    "), indent)
	for _, f := range v.fields {
		key := f.key
		if g.chance(0.3) || key == "" || strings.ContainsAny(key, " :#") {
			key = g.jsonString(key)
		}
		switch {
		case f.val.kind == '{' && len(f.val.fields) > 0 && g.chance(0.7):
			fmt.Fprintf(b, "%s%s:\n", pad, key)
			g.yamlStruct(b, f.val, indent+1)
		case f.val.kind == '[' && len(f.val.elems) > 0 && g.chance(0.5):
			fmt.Fprintf(b, "%s%s:\n", pad, key)
			for _, e := range f.val.elems {
				fmt.Fprintf(b, "%s- %s\n", pad, g.yamlScalar(e))
			}
		case f.val.kind == 's' && strings.Contains(f.val.s, "\n") && g.chance(0.5):
			fmt.Fprintf(b, "%s%s: %s\n", pad, key, g.pick("|", "|-", ">"))
			for _, l := range strings.Split(strings.TrimSuffix(f.val.s, "\n"), "\n") {
				fmt.Fprintf(b, "%s  %s\n", pad, l)
			}
		default:
			fmt.Fprintf(b, "%s%s: %s\n", pad, key, g.yamlScalar(f.val))
		}
	}
	if indent == 0 && g.chance(0.03) {
		b.WriteString(g.pick("---\nkind: node\n", "x: &a [1]\ny: *a\n", "<<: {drain: true}\n"))
	}
}

func (g *fileGen) cueLabel(k string) string {
	if ast.IsValidIdent(k) && g.chance(0.7) {
		return k
	}
	return strconv.Quote(k)
}

func (g *fileGen) cue(v *gv) string {
	switch v.kind {
	case 's':
		switch g.r.IntN(8) {
		case 0:
			return `#"` + v.s + `"#`
		case 1:
			return "'" + v.s + "'"
		case 2:
			if !strings.Contains(v.s, `"""`) && !strings.Contains(v.s, `\`) {
				return "\"\"\"\n\t" + strings.ReplaceAll(v.s, "\n", "\n\t") + "\n\t\"\"\""
			}
		}
		return strconv.Quote(v.s)
	case 'i':
		if g.chance(0.15) {
			return g.pick("1_000", "0x10", "0o7", "1K", "+5", "-0", "(3)", "1 + 1")
		}
		return strconv.FormatInt(v.i, 10)
	case 'f':
		return v.s
	case 'b':
		return strconv.FormatBool(v.b)
	case 'n':
		return "null"
	case '[':
		var parts []string
		for _, e := range v.elems {
			parts = append(parts, g.cue(e))
		}
		return "[" + strings.Join(parts, ", ") + g.pick("", ", ...", ",") + "]"
	}
	var parts []string
	for _, f := range v.fields {
		parts = append(parts, g.cueLabel(f.key)+g.pick(": ", ": ", "?: ", "!: ")+g.cue(f.val))
	}
	return "{" + strings.Join(parts, g.pick(", ", "\n")) + "}"
}

// checkBothPaths checks one file with and without the fast path and fails
// unless both give the same errors, or the same object and hash. It
// reports whether the fast path took the file.
func checkBothPaths(t *testing.T, fast, slow *Validator, p string, data []byte) (tookFast, valid bool) {
	t.Helper()
	key, ok := ObjectKeyForPath(p)
	if !ok {
		return false, false
	}
	ctx, _ := newContext()
	fo, ferrs := fast.checkFile(ctx, p, key, data)
	so, serrs := slow.checkFile(ctx, p, key, data)
	if !reflect.DeepEqual(ferrs, serrs) {
		t.Fatalf("%s: errors differ\n%s\nfast path: %v\nCUE path:  %v", p, data, ferrs, serrs)
	}
	if (fo == nil) != (so == nil) {
		t.Fatalf("%s: fast path object %v, CUE path object %v\n%s", p, fo != nil, so != nil, data)
	}
	if fo == nil {
		return false, false
	}
	if !reflect.DeepEqual(fo.obj, so.obj) || fo.hash != so.hash || fo.key != so.key || fo.path != so.path {
		t.Fatalf("%s: fast path gives\n%#v %s\nCUE path\n%#v %s\n%s", p, fo.obj, fo.hash, so.obj, so.hash, data)
	}
	return fast.tookFastPath(p, key, data), true
}

// tookFastPath reports whether checkFile accepts the file on the fast path.
func (v *Validator) tookFastPath(p string, key fleetwave.ObjectKey, data []byte) bool {
	if plain, ok := plainData(p, data); ok {
		if _, ok := v.fastCheck(p, key, plain); ok {
			return true
		}
	}
	f, errs := parseFile(p, data, v.opts.maxFileSize)
	if len(errs) > 0 {
		return false
	}
	plain, ok := plainFile(f)
	if !ok {
		return false
	}
	_, ok = v.fastCheck(p, key, plain)
	return ok
}

func mustKey(t testing.TB, p string) fleetwave.ObjectKey {
	t.Helper()
	key, ok := ObjectKeyForPath(p)
	if !ok {
		t.Fatalf("%s: not an object file", p)
	}
	return key
}

func cueOnlyValidator(t testing.TB) *Validator {
	t.Helper()
	v, err := New(func(o *options) { o.cueOnly = true })
	if err != nil {
		t.Fatal(err)
	}
	if v.shapes != nil {
		t.Fatal("cueOnly validator has a fast path")
	}
	return v
}

// TestFastPathMatchesCUE runs generated object files of every kind with a
// fast path, valid and broken in many ways and written in many literal
// forms, through the per-file checks with and without the fast path: both
// must give the same errors, or the same object and hash.
func TestFastPathMatchesCUE(t *testing.T) {
	fast, slow := newValidator(t), cueOnlyValidator(t)
	for _, k := range fastKinds {
		if fast.shapes[k] == nil {
			t.Errorf("kind %s has no fast path", k)
		}
	}
	n := 3000
	if testing.Short() {
		n = 500
	}
	g := &fileGen{r: rand.New(rand.NewPCG(1, 2))}
	var tookFast, valid int
	fastByExt := map[string]int{} // files that skipped CUE's parser too
	for range n {
		p, data := g.file()
		f, v := checkBothPaths(t, fast, slow, p, data)
		if f {
			tookFast++
		}
		if v {
			valid++
		}
		if plain, ok := plainData(p, data); ok {
			if _, ok := fast.fastCheck(p, mustKey(t, p), plain); ok {
				fastByExt[strings.Replace(path.Ext(p), ".yml", ".yaml", 1)]++
			}
		}
	}
	t.Logf("%d files: %d valid, %d of them by the fast path, %v without a parser", n, valid, tookFast, fastByExt)
	for _, ext := range []string{".json", ".yaml", ".cue"} {
		if fastByExt[ext] < n/200 {
			t.Errorf("%d %s files decoded without a parser: the generator does not cover plain%s", fastByExt[ext], ext, ext)
		}
	}
	// The generator must exercise both answers of both paths.
	if tookFast < n/5 || valid-tookFast < n/50 || n-valid < n/5 {
		t.Errorf("%d files: %d valid, %d by the fast path: the generator does not cover both paths", n, valid, tookFast)
	}
}

// FuzzFastPathMatchesCUE is TestFastPathMatchesCUE on arbitrary content:
// file picks the kind (folder) and the format (extension) of the file
// <folder>/n1.<ext>; the seeds are generated files.
func FuzzFastPathMatchesCUE(f *testing.F) {
	exts := []string{".json", ".yaml", ".cue", ".yml"}
	pathOf := func(file uint8) string {
		return folderOf(fastKinds[int(file)%len(fastKinds)]) + "n1" + exts[int(file)/len(fastKinds)%len(exts)]
	}
	g := &fileGen{r: rand.New(rand.NewPCG(3, 4))}
	for i := range 60 {
		file := uint8(i % (len(fastKinds) * 3))
		p, data := g.fileOf(fastKinds[int(file)%len(fastKinds)], "n1", int(file)/len(fastKinds))
		if p != pathOf(file) && !strings.HasSuffix(p, ".yml") {
			f.Fatalf("seed %d: path %s, want %s", i, p, pathOf(file))
		}
		f.Add(file, data)
	}
	fast, slow := newValidator(f), cueOnlyValidator(f)
	f.Fuzz(func(t *testing.T, file uint8, data []byte) {
		checkBothPaths(t, fast, slow, pathOf(file), data)
	})
}

// TestShapeCompilerRefusesWhatItDoesNotModel checks that a definition with
// a construct the shape compiler does not model exactly gets no fast path
// (its files are then all evaluated by CUE), and that the constructs it
// models compile.
func TestShapeCompilerRefusesWhatItDoesNotModel(t *testing.T) {
	for _, tc := range []struct {
		node string
		fast bool
	}{
		{`{kind!: "node", name!: #Name, n?: int & >=1 & <=9, s?: string & !="", e?: "a" | "b", l?: [...#Name], m?: [string]: bool}`, true},
		{`{kind!: "node", name!: #Name, x?: =~"^a" & !~"b$", p?: {q!: number & >0 & <10}}`, true},
		{`{kind!: "node", name!: #Name, n?: int | *1}`, false},                        // a default
		{`{kind!: "node", name!: #Name, n: int}`, false},                              // a regular field
		{`{kind!: "node", name!: #Name, ...}`, false},                                 // open
		{`{kind!: "node", name!: #Name, #Other}`, false},                              // an embedding
		{`{kind!: "node", name!: #Name, n?: strings.MaxRunes(3)}`, false},             // a builtin call
		{`{kind!: "node", name!: #Name, n?: {a?: int} | {b?: int}}`, false},           // a disjunction of structs
		{`{kind!: "node", name!: #Name, n?: #A & #B}`, false},                         // a conjunction of structs
		{`{kind!: "node", name!: #Name, n?: [string]: int, [=~"^x"]: string}`, false}, // another pattern
		{`{kind!: "node", name!: #Name, n?: >=1.5}`, false},                           // a float bound
		{`{kind!: "node", name!: #Name, n?: [int, ...int]}`, false},                   // a list with a prefix
		{`{kind!: "node", name!: #Node}`, false},                                      // a cycle
		{`{kind!: "node", name!: #Name, n?: _}`, false},                               // top
		{`{kind!: "node", name!: #Name, n?: int @go(N)}`, false},                      // an attribute
		{`{kind!: "node", name!: #Name, n?: int, int?: string}`, false},               // int shadowed
	} {
		src := "package schema\n#Name: =~\"^[a-z]+$\"\n#A: {a?: int}\n#B: {b?: int}\n#Other: {o?: int}\n#Node: " + tc.node + "\n"
		shapes, err := compileShapes([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tc.node, err)
		}
		if got := shapes[fleetwave.KindNode] != nil; got != tc.fast {
			t.Errorf("%s: fast path %v, want %v", tc.node, got, tc.fast)
		}
	}
}

// TestIsLabelPartMatchesTheRegexp compares isLabelPart with the regexp it
// replaces, on every string of up to 4 characters of a small alphabet and
// on random strings.
func TestIsLabelPartMatchesTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	alphabet := []string{"a", "Z", "0", "9", ".", "_", "-", "/", " ", "\n", "é", "\xff", "\x00", "~"}
	var all func(prefix string, n int)
	all = func(prefix string, n int) {
		if got, want := isLabelPart(prefix), re.MatchString(prefix); got != want {
			t.Fatalf("isLabelPart(%q) = %v, the regexp says %v", prefix, got, want)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			all(prefix+c, n-1)
		}
	}
	all("", 4)
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(4) > 0 {
				b[i] = "aZ09._-"[r.IntN(7)]
			}
		}
		if got, want := isLabelPart(string(b)), re.MatchString(string(b)); got != want {
			t.Fatalf("isLabelPart(%q) = %v, the regexp says %v", b, got, want)
		}
	}
}

// TestFastPathLoadMatchesCUE compares whole Loads with and without the
// fast path: a valid generated fleet must give the same snapshot, and the
// fleet with generated files added (most of them broken) the same errors.
func TestFastPathLoadMatchesCUE(t *testing.T) {
	tree := smallFleet(t)
	g := &fileGen{r: rand.New(rand.NewPCG(7, 8))}
	for step := range 2 {
		got, want := load(newValidator(t), tree), load(cueOnlyValidator(t), tree)
		if got.errs != want.errs {
			t.Fatalf("step %d: errors with the fast path:\n%s\nwithout:\n%s", step, got.errs, want.errs)
		}
		if !reflect.DeepEqual(got.snap, want.snap) {
			t.Fatalf("step %d: the snapshot with the fast path differs from the one without", step)
		}
		if step == 0 && got.snap == nil {
			t.Fatalf("the generated fleet does not load: %s", got.errs)
		}
		for range 300 {
			p, data := g.file()
			tree[p] = data
		}
	}
}
