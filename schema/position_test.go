package schema

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// TestYAMLSyntaxErrorPositions pins the position of YAML syntax errors:
// the offending token, line and byte column from 1. The expected positions
// are computed by hand (the caret line of each case marks the column).
// goyaml is what go-yaml (go.yaml.in/yaml/v3, the parser under CUE's
// decoder) says on its own, kept to show why its line cannot be used: for
// parser errors it is the 0-based line of the error's context (one early),
// it is missing when that line is the first, and there is never a column.
func TestYAMLSyntaxErrorPositions(t *testing.T) {
	tests := []struct {
		name, src string
		want      string // line:col: message
		goyaml    string
	}{
		{"unclosed flow sequence: at the end of the stream", "kind: node\nname: n1\nlabels: [a\n",
			//                                                   line 3: ^ col 9 opens it; line 4 col 1 is the end
			"4:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at 3:9)",
			"yaml: line 2: did not find expected ',' or ']'"},
		{"the same with CRLF line ends", "kind: node\r\nname: n1\r\nlabels: [a\r\n",
			"4:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at 3:9)",
			"yaml: line 2: did not find expected ',' or ']'"},
		{"a tab as indentation", "kind: node\nname: n1\nlabels:\n\tenv: prod\n",
			"4:1: invalid YAML: found character that cannot start any token",
			"yaml: line 4: found character that cannot start any token"},
		{"a key indented less than its siblings", "kind: node\nname: n1\nlabels:\n  env: prod\n region: eu\n",
			//                                    line 5: " region" -> col 2
			"5:2: invalid YAML: did not find expected key (while parsing a block mapping at 1:1)",
			"yaml: line 4: did not find expected key"},
		{"an unterminated quoted string", "kind: node\nname: n1\nlabels:\n  env: \"prod\n",
			"5:1: invalid YAML: found unexpected end of stream (while scanning a quoted scalar at 4:8)",
			"yaml: line 4: found unexpected end of stream"},
		{"an unclosed flow mapping", "kind: node\nname: n1\nlabels: {env: prod\ncapabilities: [gpu]\n",
			//                                                      line 4: "capabilities:" -> ':' at col 13
			"4:13: invalid YAML: did not find expected ',' or '}' (while parsing a flow mapping at 3:9)",
			"yaml: line 2: did not find expected ',' or '}'"},
		{"an unknown anchor", "kind: node\nname: n1\nlabels: *common\n",
			"3:9: invalid YAML: unknown anchor 'common' referenced",
			"yaml: unknown anchor 'common' referenced"},
		{"an unquoted cron expression", "kind: trigger\nname: web\ncron_expression: */5 * * * *\n",
			//                           line 3: '*' at col 18 starts an alias, '/' at col 19 cannot be in its name
			"3:19: invalid YAML: did not find expected alphabetic or numeric character (while scanning an alias at 3:18; quote a value that starts with '*')",
			"yaml: line 3: did not find expected alphabetic or numeric character"},
		{"a second mapping value on line 1", "a: b: c\n",
			"1:5: invalid YAML: mapping values are not allowed in this context",
			"yaml: mapping values are not allowed in this context"},
		{"a control character", "kind: node\nname: n1\nlabels:\n  env: a\x01b\n",
			"4:9: invalid YAML: control character U+0001 is not allowed (only tab, line feed and carriage return are)",
			"yaml: control characters are not allowed"},
		{"columns count bytes", "kind: node\nname: n1\nlabels:\n  city: Z\u00fcrich\x7f\n",
			//                   "  city: Z" is 9 bytes, ü 2, "rich" 4: DEL is byte 16
			"4:16: invalid YAML: control character U+007F is not allowed (only tab, line feed and carriage return are)",
			"yaml: control characters are not allowed"},
		{"after a byte order mark", "\ufeffkind: node\nname: [\u00e9, x\n",
			//                                             line 2: '[' at col 7
			"3:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at 2:7)",
			"yaml: line 1: did not find expected ',' or ']'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := parseFile("nodes/n1.yaml", []byte(tt.src), DefaultMaxFileSize)
			if len(errs) != 1 {
				t.Fatalf("errors = %v, want one", errs)
			}
			if got := strings.TrimPrefix(errs[0].Error(), "nodes/n1.yaml:"); got != tt.want {
				t.Errorf("error\n  %s\nwant\n  %s", got, tt.want)
			}
			var n yaml.Node
			dec := yaml.NewDecoder(bytes.NewReader([]byte(tt.src)))
			err := dec.Decode(&n)
			for err == nil {
				err = dec.Decode(&n)
			}
			if err.Error() != tt.goyaml {
				t.Errorf("go-yaml says %q, the test expects %q: did go-yaml change its positions?", err, tt.goyaml)
			}
		})
	}
}

// TestYAMLMarksAreReadable guards yamlFailureOf: it reads go-yaml's
// unexported parser state, which a go-yaml upgrade could rename (the
// positions above would then fall back to CUE's line-only messages).
func TestYAMLMarksAreReadable(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader("a: [b\n"))
	var n yaml.Node
	if err := dec.Decode(&n); err == nil {
		t.Fatal("no error")
	}
	f, ok := yamlFailureOf(dec)
	if !ok || f.kind != yamlParserError || f.problem != (yamlMark{index: 6, line: 1, column: 0}) ||
		f.context != "while parsing a flow sequence" || f.ctxMark != (yamlMark{index: 3, line: 0, column: 3}) {
		t.Fatalf("yamlFailureOf = %+v, %v", f, ok)
	}
}

// TestInvalidUTF8Position: the first invalid byte, in every format.
func TestInvalidUTF8Position(t *testing.T) {
	for _, p := range []string{"nodes/n1.yaml", "nodes/n1.json", "nodes/n1.cue"} {
		_, errs := parseFile(p, []byte("{\"kind\": \"node\",\n \"labels\": {\"a\": \"\u00e9\xc3\"}}\n"), DefaultMaxFileSize)
		// line 2: ` "labels": {"a": "` is 18 bytes, é 2: the cut sequence starts at byte 21
		want := p + ":2:21: invalid UTF-8: found byte 0xc3, expected UTF-8 text"
		if len(errs) != 1 || errs[0].Error() != want {
			t.Errorf("%s: errors = %v, want %s", p, errs, want)
		}
	}
}

func TestOutsideLayout(t *testing.T) {
	for p, want := range map[string]bool{
		"node/x.cue":                   true, // a typo of nodes/
		"nodes/eu/x.cue":               true, // object folders are flat
		"brc/old/web.json":             true,
		"Nodes/x.yaml":                 true,
		"fleet.yml":                    true, // only fleetwave.* at the root
		"docs/api.json":                true,
		"nodes/x.cue":                  false, // an object file
		"fleetwave.json":               false,
		"README.md":                    false, // not an object file
		"nodes/notes.txt":              false,
		"scripts/deploy.sh":            false,
		"nodes/x.YAML":                 false, // extensions are case-sensitive
		"status/nodes/n.yaml":          false, // the hub's
		"cue.mod/module.cue":           false, // CUE's
		"cue.mod/fleetwave/schema.cue": false,
		".github/workflows/ci.yaml":    false, // dot-folders
		"nodes/.draft.yaml":            false, // dotfiles
		"nodes/.old/x.yaml":            false,
	} {
		if got := outsideLayout(p); got != want {
			t.Errorf("outsideLayout(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestLoadReportsFilesOutsideTheLayout: Load (the hub's path, all files of
// a commit) reports them without reading them, like LoadDir.
func TestLoadReportsFilesOutsideTheLayout(t *testing.T) {
	tree := with(map[string]string{"node/n3.yaml": "not even: [yaml", ".github/ci.yaml": "x", "status/x.json": "{"})
	tree["nodes/eu/n4.cue"] = nil
	_, err := newValidator(t).Load(tree)
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	want := []string{"node/n3.yaml: " + layoutMessage, "nodes/eu/n4.cue: " + layoutMessage}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOwnerConflictsOnePerPair: three reconciliation triggers on one block
// and the same nodes give one error per pair, each in the later file;
// schedule triggers and other blocks give none.
func TestOwnerConflictsOnePerPair(t *testing.T) {
	changes := map[string]string{
		"blocks/web.yaml": "kind: block\nname: web\nactions:\n  install: {command: i}\n  upgrade: {command: u}\n  uninstall: {command: x}\n  backup: {command: b}\n",
		"brc/web.yaml":    "kind: trigger\nname: web\nblock_name: web\n",
		"brc/b.yaml":      "kind: trigger\nname: b\nblock_name: web\nnodes: [n1, n2]\n",
		"brc/c.yaml":      "kind: trigger\nname: c\nblock_name: web\ndesired_state: absent\nselector: {match_labels: {env: prod}}\n",
		"brc/s.yaml":      "kind: trigger\nname: s\nblock_name: web\ntrigger_type: schedule\naction_name: backup\ncron_expression: \"0 3 * * *\"\n",
	}
	_, err := newValidator(t).Load(with(changes))
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	const why = "(two reconciliation BRCs cannot own one block instance)"
	want := []string{
		// n1 has env: prod
		"brc/c.yaml:3:13: block_name: block web on node n1 is also managed by brc/b.yaml " + why,
		"brc/web.yaml:3:13: block_name: block web on 2 nodes, e.g. n1, is also managed by brc/b.yaml " + why,
		"brc/web.yaml:3:13: block_name: block web on node n1 is also managed by brc/c.yaml " + why,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOwnerConflictsStayLinear: many triggers sharing every node are each
// reported, with work bounded by maxOwnersPaired per node.
func TestOwnerConflictsStayLinear(t *testing.T) {
	changes := map[string]string{}
	const triggers = 3 * maxOwnersPaired
	for i := range triggers {
		changes[fmt.Sprintf("brc/t%02d.yaml", i)] = fmt.Sprintf("kind: trigger\nname: t%02d\nblock_name: web\n", i)
	}
	changes["brc/web.yaml"] = ""
	_, err := newValidator(t).Load(with(changes))
	got, lerr := errorLines(err)
	if lerr != nil {
		t.Fatal(lerr)
	}
	reported := map[string]bool{}
	for _, l := range got {
		reported[strings.SplitN(l, ":", 2)[0]] = true
	}
	// every trigger but the first owns instances another one owns too
	if len(reported) != triggers-1 || reported["brc/t00.yaml"] {
		t.Errorf("reported in %d files (%v), want every trigger but t00", len(reported), reported)
	}
	// pairs with the first maxOwnersPaired owners of each node only
	if want := maxOwnersPaired*(maxOwnersPaired-1)/2 + (triggers-maxOwnersPaired)*maxOwnersPaired; len(got) != want {
		t.Errorf("%d errors, want %d", len(got), want)
	}
}

// TestWorkspaceAndOrganizationRecords: a node may name neither; what it
// names must exist, and so must a workspace's organization.
func TestWorkspaceAndOrganizationRecords(t *testing.T) {
	v := newValidator(t)
	if _, err := v.Load(with(map[string]string{"nodes/n2.cue": "kind: \"node\"\nname: \"n2\"\n", "workspaces/ws.yaml": ""})); err != nil {
		t.Fatalf("a fleet without organizations and workspaces: %v", err)
	}
	ok := with(map[string]string{
		"nodes/n2.cue":           "kind: \"node\"\nname: \"n2\"\nworkspace: \"ws\"\norganization: \"acme\"\n",
		"workspaces/ws.yaml":     "kind: workspace\nname: ws\norganization: acme\n",
		"organizations/acme.cue": "kind: \"organization\"\nname: \"acme\"\n",
	})
	snap, err := v.Load(ok)
	if err != nil {
		t.Fatalf("records present: %v", err)
	}
	if got := snap.Scope(&fleetwave.Trigger{TargetOrganizations: []string{"acme"}}); len(got) != 1 || got[0] != "n2" {
		t.Errorf("scope of acme = %v, want [n2]", got)
	}
	delete(ok, "organizations/acme.cue")
	_, err = v.Load(ok)
	got, _ := errorLines(err)
	want := []string{
		`nodes/n2.cue:4:15: organization: organization "acme" is not defined (no organizations/acme.*)`,
		`workspaces/ws.yaml:3:15: organization: organization "acme" is not defined (no organizations/acme.*)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestYAMLKeysThatAreNotStrings: a plain YAML mapping key that YAML reads
// as a number, a boolean or null is refused at its position, in every
// object field, with the text CUE would have made of it; the same keys
// quoted (or yes/no/on/off and 01289, which go-yaml and CUE read as
// strings) load as written, and so do the same labels in JSON and CUE.
func TestYAMLKeysThatAreNotStrings(t *testing.T) {
	v := newValidator(t)
	refused := []struct{ key, want string }{
		{"0123", `key 0123 reads as a number in YAML (0o123): quote it ("0123")`},
		{"00", `key 00 reads as a number in YAML (0o0): quote it ("00")`},
		{"~", `key ~ reads as null in YAML: quote it ("~")`},
		{"null", `key null reads as null in YAML: quote it ("null")`},
		{"NULL", `key NULL reads as null in YAML: quote it ("NULL")`},
		{".inf", `key .inf reads as a number in YAML (+Inf): quote it (".inf")`},
		{"-.Inf", `key -.Inf reads as a number in YAML (-Inf): quote it ("-.Inf")`},
		{".nan", `key .nan reads as a number in YAML (NaN): quote it (".nan")`},
		{"True", `key True reads as a boolean in YAML (true): quote it ("True")`},
		{"false", `key false reads as a boolean in YAML: quote it ("false")`},
		{"8080", `key 8080 reads as a number in YAML: quote it ("8080")`},
		{"0x1F", `key 0x1F reads as a number in YAML: quote it ("0x1F")`},
		{"1e3", `key 1e3 reads as a number in YAML: quote it ("1e3")`},
		{"-1", `key -1 reads as a number in YAML: quote it ("-1")`},
	}
	for _, tt := range refused {
		for _, form := range []struct{ name, file, line string }{
			{"block", "kind: node\nname: n1\nlabels:\n  env: prod\n  %s: v\n", "5:3"},
			{"flow", "kind: node\nname: n1\nlabels: {env: prod, %s: v}\n", "3:21"},
			{"data_addresses", "kind: node\nname: n1\ndata_addresses:\n  %s: 10.0.0.1\n", "4:3"},
		} {
			_, err := v.Load(map[string][]byte{"fleetwave.yaml": []byte("kind: config\nname: fleetwave\n"),
				"nodes/n1.yaml": fmt.Appendf(nil, form.file, tt.key)})
			lines, lerr := errorLines(err)
			if lerr != nil {
				t.Fatalf("%s (%s): %v", tt.key, form.name, lerr)
			}
			if want := "nodes/n1.yaml:" + form.line + ": " + tt.want; len(lines) != 1 || lines[0] != want {
				t.Errorf("%s (%s): errors %q, want [%q]", tt.key, form.name, lines, want)
			}
		}
	}
	for _, key := range []string{`"0123"`, `'00'`, `"null"`, `"True"`, `"8080"`, "yes", "no", "on", "off", "01289", "env", "!!str 0123"} {
		snap, err := v.Load(map[string][]byte{"fleetwave.yaml": []byte("kind: config\nname: fleetwave\n"),
			"nodes/n1.yaml": fmt.Appendf(nil, "kind: node\nname: n1\nlabels:\n  %s: v\n", key)})
		if err != nil {
			t.Errorf("key %s refused: %v", key, err)
			continue
		}
		want := strings.Trim(strings.TrimPrefix(key, "!!str "), `"'`)
		if got := snap.Nodes["n1"].Labels; len(got) != 1 || got[want] != "v" {
			t.Errorf("key %s loaded as labels %q, want %q", key, got, want)
		}
	}
	// a key as an alias of a number, an explicitly tagged number
	for _, tt := range []struct{ file, want string }{
		{"kind: node\nname: n1\nx: &a 0123\nlabels: {*a : v}\n", "nodes/n1.yaml:4:10: key *a is an alias of 0123, which YAML reads as a number: write the key as a quoted string (\"0123\")"},
		{"kind: node\nname: n1\nlabels: {!!int \"12\": v}\n", "nodes/n1.yaml:3:10: key 12 is tagged !!int in YAML, which makes it a number: remove the tag and quote it (\"12\")"},
	} {
		_, err := v.Load(map[string][]byte{"fleetwave.yaml": []byte("kind: config\nname: fleetwave\n"), "nodes/n1.yaml": []byte(tt.file)})
		if lines, _ := errorLines(err); !slices.Contains(lines, tt.want) {
			t.Errorf("%q: errors %q, want one %q", tt.file, lines, tt.want)
		}
	}
}

// TestCUESyntaxErrorAtTheEndOfTheFile: an error at the end of a .cue file
// is at the end of the file, which after a final newline is the start of
// the next line (CUE's scanner says one column past that newline).
func TestCUESyntaxErrorAtTheEndOfTheFile(t *testing.T) {
	tests := []struct{ src, want string }{
		{"!\n", "nodes/n1.cue:2:1: invalid CUE: expected operand, found 'EOF'"},
		{"!", "nodes/n1.cue:1:2: invalid CUE: expected operand, found 'EOF'"},
		{"x: [\n", "nodes/n1.cue:2:1: invalid CUE: expected ']', found 'EOF'"},
		{"x: [\n\n\n", "nodes/n1.cue:4:1: invalid CUE: expected ']', found 'EOF'"},
		{"x: [\r\n", "nodes/n1.cue:2:1: invalid CUE: expected ']', found 'EOF'"},
		{"0A00000000000@\n", "nodes/n1.cue:2:1: invalid CUE: invalid attribute: expected '('"},
		{"0A00000000000@", "nodes/n1.cue:1:15: invalid CUE: invalid attribute: expected '('"},
		{"a: 1 @x\nb: 2\n", "nodes/n1.cue:2:1: invalid CUE: invalid attribute: expected '('"},
	}
	for _, tt := range tests {
		_, errs := parseFile("nodes/n1.cue", []byte(tt.src), DefaultMaxFileSize)
		var got []string
		for _, fe := range errs {
			got = append(got, fe.Error())
		}
		if !slices.Contains(got, tt.want) {
			t.Errorf("%q: errors %q, want one %q", tt.src, got, tt.want)
		}
	}
}

// TestYAMLCarriageReturnWithoutLineFeed: YAML reads a carriage return
// outside a CRLF as a line break, which no other position of a file
// counts (CUE's decoder failed on the lines it did not have: an internal
// error, or a position past the end of its line): such a file is refused
// at that character. CRLF line ends are fine.
func TestYAMLCarriageReturnWithoutLineFeed(t *testing.T) {
	const msg = `invalid YAML: carriage return without a line feed (a line break in YAML), expected lines ending in \n or \r\n`
	tests := []struct{ src, want string }{
		{"\r 0", "nodes/n1.yaml:1:1: " + msg},
		{"kind: node\rname: n1\rfoo: 1\r", "nodes/n1.yaml:1:11: " + msg},
		{"kind: node\r\nname: n1\r\r\n", "nodes/n1.yaml:2:9: " + msg},
		{"kind: node\r\nname: n1\r\nlabels: {a: b}\r\n", ""},
	}
	for _, tt := range tests {
		_, errs := parseFile("nodes/n1.yaml", []byte(tt.src), DefaultMaxFileSize)
		var got []string
		for _, fe := range errs {
			got = append(got, fe.Error())
		}
		if want := []string{tt.want}; (tt.want == "" && len(got) != 0) || (tt.want != "" && !slices.Equal(got, want)) {
			t.Errorf("%q: errors %q, want %q", tt.src, got, tt.want)
		}
	}
}
