package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	"go.yaml.in/yaml/v3"
)

// Editing node files: the hub's API writes change a node's labels or drain
// by rewriting its file, in its own format, and committing it.
//
// EditNodeFile changes only the edited fields and keeps every other byte
// of the file as written: the edit is a splice of the field's text, found
// from the parser's positions (CUE's AST, go-yaml's node tree, the JSON
// decoder's offsets). Comments, field order, blank lines, alignment and
// the other fields stay as they are. New values are written in the file's
// style where it has one: a label set that was written on one line stays
// on one line, a block stays a block with the indentation of the old one.
// Labels that stay keep their place; new ones follow, sorted.
//
// Every result is checked before it is returned: its canonical form
// (Normalize) must be the original object with exactly the edited fields
// changed. A YAML file whose layout the splice cannot handle (a flow
// mapping at the top, a multi-line scalar where text is inserted) is
// rewritten instead from go-yaml's node tree, which keeps its comments but
// not its exact spacing; a CUE file the splice cannot handle is rewritten
// through its AST and cue/format. Anything else that does not check out is
// an error, and nothing is written.

// Label limits (the schema's #Labels rules).
const (
	// MaxLabels is the most labels a node may have.
	MaxLabels = maxLabels
	// MaxLabelLen is the longest label value, and name part of a key.
	MaxLabelLen = maxLabelLen
)

// LabelProblem is one reason a label set is refused: the label (its key;
// empty for a problem of the whole set) and why.
type LabelProblem struct {
	Key     string `json:"key,omitempty"`
	Problem string `json:"problem"`
}

// maxLabelProblems bounds the problems CheckLabels lists.
const maxLabelProblems = 32

// CheckLabels checks a whole label set with the schema's rules: at most
// MaxLabels labels; keys of 1-63 characters of [A-Za-z0-9._-] starting and
// ending with a letter or digit, optionally prefixed by a DNS subdomain and
// '/' ("example.com/role"); values of 1-63 such characters. It returns the
// problems sorted by key (at most 32, the last one counting the rest), nil
// when the set is valid.
func CheckLabels(labels map[string]string) []LabelProblem {
	var out []LabelProblem
	if len(labels) > maxLabels {
		out = append(out, LabelProblem{Problem: fmt.Sprintf("found %d labels, expected at most %d", len(labels), maxLabels)})
	}
	more := 0
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		for _, p := range []string{labelKeyProblem(k), labelValueProblem(labels[k])} {
			if p == "" {
				continue
			}
			if len(out) >= maxLabelProblems-1 {
				more++
				continue
			}
			out = append(out, LabelProblem{Key: shortText(k, 320), Problem: p})
		}
	}
	if more > 0 {
		out = append(out, LabelProblem{Problem: fmt.Sprintf("and %d more problems", more)})
	}
	return out
}

// labelKeyProblem says what is wrong with a label key, "" when nothing.
// The rules and messages are fileChecker.labelKey's.
func labelKeyProblem(k string) string {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !dnsPrefixRE.MatchString(prefix) {
			return fmt.Sprintf("invalid label key %s: the prefix before '/' must be a DNS subdomain such as \"example.com\"", quoteShort(k))
		}
		name = rest
	}
	if len(name) == 0 || len(name) > maxLabelLen || !isLabelPart(name) {
		return fmt.Sprintf("invalid label key %s, expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit (optionally prefixed by \"example.com/\")", quoteShort(k))
	}
	return ""
}

// labelValueProblem says what is wrong with a label value, "" when nothing.
func labelValueProblem(v string) string {
	if len(v) == 0 || len(v) > maxLabelLen || !isLabelPart(v) {
		return fmt.Sprintf("invalid label value %s, expected 1-63 chars of [A-Za-z0-9._-] starting and ending with a letter or digit", quoteShort(v))
	}
	return ""
}

// quoteShort quotes s for a message, cut to a short prefix.
func quoteShort(s string) string {
	const keep = 80
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	return strconv.Quote(shortText(s, keep))
}

// shortText cuts s to at most n bytes (on a rune boundary), marking the cut.
func shortText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// LabelsError refuses a label set (EditNodeFile): every problem found.
type LabelsError struct {
	Problems []LabelProblem
}

func (e *LabelsError) Error() string {
	var b strings.Builder
	b.WriteString("invalid labels")
	for i, p := range e.Problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-3)
			break
		}
		b.WriteString("; ")
		if p.Key != "" {
			b.WriteString(quoteShort(p.Key) + ": ")
		}
		b.WriteString(p.Problem)
	}
	return b.String()
}

// ErrNotEditable is wrapped by EditNodeFile's errors for a file it cannot
// edit: not a node, not plain data, or an edit that would not check out.
var ErrNotEditable = errors.New("node file cannot be edited")

// EditNodeFile returns the node file data (at path file, whose extension
// says its format: .cue, .yaml, .yml or .json) with its labels and drain
// changed, and everything else kept as written (see the comment above):
//
//   - labels nil keeps the labels field as it is; a non-empty map replaces
//     the whole set (the field is added when absent); an empty map removes
//     the field;
//   - drain nil keeps the drain field; true sets `drain: true` (added when
//     absent); false removes the field (a node is not draining when drain
//     is absent).
//
// An unchanged object returns data itself. Invalid labels are refused
// with a *LabelsError before anything else; a file that does not parse,
// is not a node, or cannot be edited safely with an error wrapping
// ErrNotEditable.
func EditNodeFile(file string, data []byte, labels map[string]string, drain *bool) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: %s: internal error: %v", ErrNotEditable, file, r)
		}
	}()
	if labels != nil {
		if probs := CheckLabels(labels); len(probs) > 0 {
			return nil, &LabelsError{Problems: probs}
		}
	}
	before, err := Normalize(file, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEditable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(before))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: %s does not hold an object", ErrNotEditable, file)
	}
	if obj["kind"] != "node" {
		return nil, fmt.Errorf("%w: %s is not a node (kind %v)", ErrNotEditable, file, obj["kind"])
	}
	if labels != nil {
		if len(labels) == 0 {
			delete(obj, "labels")
		} else {
			m := make(map[string]any, len(labels))
			for k, v := range labels {
				m[k] = v
			}
			obj["labels"] = m
		}
	}
	if drain != nil {
		if *drain {
			obj["drain"] = true
		} else {
			delete(obj, "drain")
		}
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEditable, err)
	}
	want, err := canonicalJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEditable, err)
	}
	if bytes.Equal(want, before) {
		return data, nil
	}
	check := func(out []byte, err error) ([]byte, error) {
		if err != nil {
			return nil, err
		}
		got, err := Normalize(file, out)
		if err != nil {
			return nil, fmt.Errorf("the edited file does not parse: %v", err)
		}
		if !bytes.Equal(got, want) {
			return nil, errors.New("the edited file does not hold the edited object")
		}
		return out, nil
	}
	switch path.Ext(file) {
	case ".cue":
		if out, err = check(spliceCUE(file, data, labels, drain)); err != nil {
			out, err = check(formatCUE(file, data, labels, drain))
		}
	case ".yaml", ".yml":
		if out, err = check(spliceYAML(data, labels, drain)); err != nil {
			out, err = check(encodeYAML(data, labels, drain))
		}
	case ".json":
		out, err = check(spliceJSON(data, labels, drain))
	default:
		return nil, fmt.Errorf("%w: unsupported file extension of %s", ErrNotEditable, file)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotEditable, file, err)
	}
	return out, nil
}

// labelOrder is the order new labels are written in: the keys of old that
// stay, in their order, then the new ones, sorted.
func labelOrder(old []string, labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	seen := map[string]bool{}
	for _, k := range old {
		if _, ok := labels[k]; ok && !seen[k] {
			out = append(out, k)
			seen[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !seen[k] {
			out = append(out, k)
		}
	}
	return out
}

// splice is one text edit: data[start:end] becomes text. Edits of one
// file never overlap; inserts at one offset apply in the order made.
type splice struct {
	start, end int
	text       string
	seq        int
}

type splicer struct {
	edits []splice
}

func (s *splicer) replace(start, end int, text string) {
	s.edits = append(s.edits, splice{start, end, text, len(s.edits)})
}

func (s *splicer) apply(data []byte) ([]byte, error) {
	edits := slices.Clone(s.edits)
	sort.SliceStable(edits, func(i, j int) bool {
		if edits[i].start != edits[j].start {
			return edits[i].start > edits[j].start
		}
		return edits[i].seq > edits[j].seq
	})
	out := bytes.Clone(data)
	limit := len(data)
	for _, e := range edits {
		if e.start < 0 || e.end < e.start || e.end > limit {
			return nil, errors.New("overlapping edits")
		}
		out = slices.Concat(out[:e.start], []byte(e.text), out[e.end:])
		limit = e.start
	}
	return out, nil
}

// lines indexes the line starts of data (0-based lines).
type lines struct {
	data  []byte
	start []int
}

func newLines(data []byte) *lines {
	l := &lines{data: data, start: []int{0}}
	for i, c := range data {
		if c == '\n' {
			l.start = append(l.start, i+1)
		}
	}
	return l
}

func (l *lines) count() int { return len(l.start) }

// begin is the offset of line i's first byte.
func (l *lines) begin(i int) int {
	if i >= len(l.start) {
		return len(l.data)
	}
	return l.start[i]
}

// end is the offset after line i's terminator (or the end of data).
func (l *lines) end(i int) int { return l.begin(i + 1) }

// line returns the 0-based line of offset off.
func (l *lines) line(off int) int {
	return sort.Search(len(l.start), func(i int) bool { return l.start[i] > off }) - 1
}

// indent returns the leading blanks of line i.
func (l *lines) indent(i int) string {
	b := l.data[l.begin(i):l.end(i)]
	n := 0
	for n < len(b) && (b[n] == ' ' || b[n] == '\t') {
		n++
	}
	return string(b[:n])
}

// text returns line i without its terminator.
func (l *lines) text(i int) string {
	return strings.TrimRight(string(l.data[l.begin(i):l.end(i)]), "\r\n")
}

// newline is the line terminator of data: CRLF when it uses it.
func newline(data []byte) string {
	if bytes.Contains(data, []byte("\r\n")) {
		return "\r\n"
	}
	return "\n"
}

// ---- YAML ----

// yamlPlain matches a label key or value written as a plain YAML scalar;
// the others (and words YAML reads as booleans or null) are quoted.
var (
	yamlPlain    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._/-]*$`)
	yamlReserved = map[string]bool{"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true,
		"y": true, "n": true, "null": true}
)

func yamlScalar(s string) string {
	if yamlPlain.MatchString(s) && !yamlReserved[strings.ToLower(s)] {
		var v map[string]any
		if yaml.Unmarshal([]byte("k: "+s), &v) == nil && v["k"] == s {
			return s
		}
	}
	return strconv.Quote(s) // label text is printable ASCII: a valid double-quoted YAML scalar
}

// yamlEntry is one top-level field of a YAML mapping and the lines it
// spans (0-based, inclusive).
type yamlEntry struct {
	k, v        *yaml.Node
	first, last int
}

// yamlOffset is the byte offset of go-yaml's 1-based line and (character)
// column.
func yamlOffset(l *lines, line, col int) int {
	off := l.begin(line - 1)
	for c := 1; c < col && off < len(l.data); c++ {
		_, size := utf8.DecodeRune(l.data[off:])
		off += size
	}
	return off
}

// flowEnd returns the offset of the bracket closing the flow collection
// opening at off, skipping quoted scalars and comments; -1 when not found.
func flowEnd(data []byte, off int) int {
	depth := 0
	for i := off; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i
			}
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '\'':
			for i++; i < len(data); i++ {
				if data[i] == '\'' {
					if i+1 < len(data) && data[i+1] == '\'' {
						i++
						continue
					}
					break
				}
			}
		case '#':
			if i == 0 || data[i-1] == ' ' || data[i-1] == '\t' || data[i-1] == '\n' {
				for i < len(data) && data[i] != '\n' {
					i++
				}
			}
		}
	}
	return -1
}

// yamlLastLine returns the last line (0-based) node n spans.
func yamlLastLine(l *lines, n *yaml.Node) int {
	last := n.Line - 1
	if (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && n.Style&yaml.FlowStyle != 0 {
		if end := flowEnd(l.data, yamlOffset(l, n.Line, n.Column)); end >= 0 {
			return l.line(end)
		}
	}
	for _, c := range n.Content {
		last = max(last, yamlLastLine(l, c))
	}
	return last
}

// spliceYAML edits a block-style YAML node file in place (see EditNodeFile).
func spliceYAML(data []byte, labels map[string]string, drain *bool) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("not one YAML document")
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode || top.Style&yaml.FlowStyle != 0 || len(top.Content) < 2 {
		return nil, errors.New("not a block mapping")
	}
	l := newLines(data)
	nl := newline(data)
	var entries []yamlEntry
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		entries = append(entries, yamlEntry{k: k, v: v, first: k.Line - 1, last: yamlLastLine(l, v)})
	}
	topIndent := strings.Repeat(" ", top.Content[0].Column-1)
	unit := "  "
	for _, e := range entries {
		if (e.v.Kind == yaml.MappingNode || e.v.Kind == yaml.SequenceNode) && e.v.Style&yaml.FlowStyle == 0 && len(e.v.Content) > 0 {
			if in := l.indent(e.v.Content[0].Line - 1); len(in) > len(topIndent) {
				unit = in[len(topIndent):]
				break
			}
		}
	}
	var sp splicer
	// removeEntry deletes an entry's lines and the comment lines right
	// above it that go-yaml gave it as its head comment.
	removeEntry := func(e yamlEntry) {
		first := e.first
		if e.k.HeadComment != "" {
			for n := strings.Count(e.k.HeadComment, "\n") + 1; n > 0 && first > 0 && strings.HasPrefix(strings.TrimSpace(l.text(first-1)), "#"); n-- {
				first--
			}
		}
		sp.replace(l.begin(first), l.end(e.last), "")
	}
	insertAt := l.end(entries[len(entries)-1].last)
	prefix := ""
	if insertAt == len(data) && len(data) > 0 && data[len(data)-1] != '\n' {
		prefix = nl
	}
	find := func(name string) []yamlEntry {
		var out []yamlEntry
		for _, e := range entries {
			if e.k.Kind == yaml.ScalarNode && e.k.Value == name {
				out = append(out, e)
			}
		}
		return out
	}
	if labels != nil {
		found := find("labels")
		switch {
		case len(labels) == 0:
			for _, e := range found {
				removeEntry(e)
			}
		case len(found) == 0:
			var b strings.Builder
			b.WriteString(prefix + topIndent + "labels:" + nl)
			for _, k := range labelOrder(nil, labels) {
				b.WriteString(topIndent + unit + yamlScalar(k) + ": " + yamlScalar(labels[k]) + nl)
			}
			sp.replace(insertAt, insertAt, b.String())
			prefix = ""
		default:
			e := found[0]
			var old []string
			if e.v.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(e.v.Content); i += 2 {
					old = append(old, e.v.Content[i].Value)
				}
			}
			order := labelOrder(old, labels)
			if e.v.Kind == yaml.MappingNode && e.v.Style&yaml.FlowStyle == 0 && len(e.v.Content) > 0 {
				in := l.indent(e.v.Content[0].Line - 1)
				var b strings.Builder
				for _, k := range order {
					b.WriteString(in + yamlScalar(k) + ": " + yamlScalar(labels[k]) + nl)
				}
				sp.replace(l.end(e.first), l.end(e.last), b.String())
			} else {
				start := yamlOffset(l, e.v.Line, e.v.Column)
				end := start
				if e.v.Kind == yaml.MappingNode {
					if end = flowEnd(data, start); end < 0 {
						return nil, errors.New("unterminated flow mapping")
					}
					end++
				} else {
					end = l.end(e.last) - len(nl)
				}
				parts := make([]string, len(order))
				for i, k := range order {
					parts[i] = yamlScalar(k) + ": " + yamlScalar(labels[k])
				}
				sp.replace(start, end, "{"+strings.Join(parts, ", ")+"}")
			}
			for _, dup := range found[1:] {
				removeEntry(dup)
			}
		}
	}
	if drain != nil {
		found := find("drain")
		switch {
		case !*drain:
			for _, e := range found {
				removeEntry(e)
			}
		case len(found) == 0:
			sp.replace(insertAt, insertAt, prefix+topIndent+"drain: true"+nl)
		default:
			e := found[0]
			if e.v.Kind != yaml.ScalarNode {
				return nil, errors.New("drain is not a scalar")
			}
			start := yamlOffset(l, e.v.Line, e.v.Column)
			end := start
			for end < len(data) && !strings.ContainsRune(" \t\r\n#", rune(data[end])) {
				end++
			}
			sp.replace(start, end, "true")
			for _, dup := range found[1:] {
				removeEntry(dup)
			}
		}
	}
	return sp.apply(data)
}

// encodeYAML edits a YAML node file through go-yaml's node tree and
// encodes it again: comments stay, spacing is go-yaml's.
func encodeYAML(data []byte, labels map[string]string, drain *bool) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a YAML mapping")
	}
	top := doc.Content[0]
	str := func(s string) *yaml.Node {
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
		if yamlScalar(s) != s {
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	}
	// set replaces the value of the first field named key (dropping the
	// others), adds the field when absent, or removes it when v is nil.
	set := func(key string, v func(old *yaml.Node) *yaml.Node) {
		var content []*yaml.Node
		done := false
		for i := 0; i+1 < len(top.Content); i += 2 {
			k, old := top.Content[i], top.Content[i+1]
			if k.Value != key {
				content = append(content, k, old)
				continue
			}
			if done {
				continue
			}
			done = true
			if nv := v(old); nv != nil {
				content = append(content, k, nv)
			}
		}
		if !done {
			if nv := v(nil); nv != nil {
				content = append(content, str(key), nv)
			}
		}
		top.Content = content
	}
	if labels != nil {
		set("labels", func(old *yaml.Node) *yaml.Node {
			if len(labels) == 0 {
				return nil
			}
			m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			var keys []string
			if old != nil {
				m.Style, m.HeadComment, m.LineComment, m.FootComment = old.Style&yaml.FlowStyle, old.HeadComment, old.LineComment, old.FootComment
				for i := 0; i+1 < len(old.Content); i += 2 {
					keys = append(keys, old.Content[i].Value)
				}
			}
			for _, k := range labelOrder(keys, labels) {
				m.Content = append(m.Content, str(k), str(labels[k]))
			}
			return m
		})
	}
	if drain != nil {
		set("drain", func(old *yaml.Node) *yaml.Node {
			if !*drain {
				return nil
			}
			n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
			if old != nil {
				n.LineComment = old.LineComment
			}
			return n
		})
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ---- JSON ----

// jsonMember is one member of the top-level JSON object, by offsets:
// after the previous value (or '{'), the key's quote, the value.
type jsonMember struct {
	key                               string
	after, keyStart, valStart, valEnd int
	raw                               json.RawMessage
}

func skipJSON(data []byte, off int, also string) int {
	for off < len(data) && strings.IndexByte(" \t\r\n"+also, data[off]) >= 0 {
		off++
	}
	return off
}

// jsonKeys returns the keys of a JSON object in their order.
func jsonKeys(raw []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		k, _ := t.(string)
		out = append(out, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return out
		}
	}
	return out
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimRight(b.String(), "\n")
}

// spliceJSON edits a JSON node file in place (see EditNodeFile).
func spliceJSON(data []byte, labels map[string]string, drain *bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var members []jsonMember
	for dec.More() {
		m := jsonMember{after: int(dec.InputOffset())}
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		m.key, _ = t.(string)
		keyEnd := int(dec.InputOffset())
		if err := dec.Decode(&m.raw); err != nil {
			return nil, err
		}
		m.valEnd = int(dec.InputOffset())
		m.keyStart = skipJSON(data, m.after, ",")
		m.valStart = skipJSON(data, skipJSON(data, keyEnd, "")+1, "")
		members = append(members, m)
	}
	if len(members) == 0 {
		return nil, errors.New("empty JSON object")
	}
	nl := newline(data)
	// the members' indentation, when the object spans lines
	indent, multi := "", false
	last := members[len(members)-1]
	if i := bytes.LastIndexByte(data[:last.keyStart], '\n'); i >= last.after {
		multi = true
		indent = string(data[i+1 : last.keyStart])
	}
	unit := indent
	if unit == "" {
		unit = "  "
	}
	labelsJSON := func(old []string, multiLine bool) string {
		order := labelOrder(old, labels)
		parts := make([]string, len(order))
		for i, k := range order {
			parts[i] = jsonString(k) + ": " + jsonString(labels[k])
		}
		if !multiLine {
			return "{" + strings.Join(parts, ", ") + "}"
		}
		return "{" + nl + indent + unit + strings.Join(parts, ","+nl+indent+unit) + nl + indent + "}"
	}
	var sp splicer
	var deleted [][2]int
	remove := func(i int) {
		if i > 0 {
			deleted = append(deleted, [2]int{members[i].after, members[i].valEnd})
		} else if len(members) > 1 {
			deleted = append(deleted, [2]int{members[0].keyStart, members[1].keyStart})
		}
	}
	find := func(name string) []int {
		var out []int
		for i, m := range members {
			if m.key == name {
				out = append(out, i)
			}
		}
		return out
	}
	add := func(member string) {
		sep := " "
		if multi {
			sep = nl + indent
		}
		sp.replace(last.valEnd, last.valEnd, ","+sep+member)
	}
	if labels != nil {
		found := find("labels")
		switch {
		case len(labels) == 0:
			for _, i := range found {
				remove(i)
			}
		case len(found) == 0:
			add(`"labels": ` + labelsJSON(nil, multi))
		default:
			m := members[found[0]]
			sp.replace(m.valStart, m.valEnd, labelsJSON(jsonKeys(m.raw), bytes.ContainsRune(m.raw, '\n')))
			for _, i := range found[1:] {
				remove(i)
			}
		}
	}
	if drain != nil {
		found := find("drain")
		switch {
		case !*drain:
			for _, i := range found {
				remove(i)
			}
		case len(found) == 0:
			add(`"drain": true`)
		default:
			m := members[found[0]]
			sp.replace(m.valStart, m.valEnd, "true")
			for _, i := range found[1:] {
				remove(i)
			}
		}
	}
	// deletions of neighbouring members may touch: merge them
	sort.Slice(deleted, func(i, j int) bool { return deleted[i][0] < deleted[j][0] })
	for i := 0; i < len(deleted); i++ {
		start, end := deleted[i][0], deleted[i][1]
		for i+1 < len(deleted) && deleted[i+1][0] <= end {
			end = max(end, deleted[i+1][1])
			i++
		}
		sp.replace(start, end, "")
	}
	return sp.apply(data)
}

// ---- CUE ----

// cueIdent matches a label key CUE reads as a plain identifier; keywords
// and every other key are quoted.
var (
	cueIdent    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	cueKeywords = map[string]bool{"true": true, "false": true, "null": true, "if": true, "for": true, "in": true,
		"let": true, "import": true, "package": true, "func": true}
)

func cueLabel(k string) string {
	if cueIdent.MatchString(k) && !cueKeywords[k] {
		return k
	}
	return strconv.Quote(k)
}

// cueField is one top-level field of a CUE file with its name.
type cueField struct {
	name string
	f    *ast.Field
}

func cueFields(f *ast.File) []cueField {
	var out []cueField
	for _, d := range f.Decls {
		fl, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		name, _, err := ast.LabelName(fl.Label)
		if err != nil {
			continue
		}
		out = append(out, cueField{name, fl})
	}
	return out
}

// cueLabelKeys returns the label keys of a labels value in their order.
func cueLabelKeys(v ast.Expr) []string {
	s, ok := v.(*ast.StructLit)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range s.Elts {
		if fl, ok := e.(*ast.Field); ok {
			if name, _, err := ast.LabelName(fl.Label); err == nil {
				out = append(out, name)
			}
		}
	}
	return out
}

// spliceCUE edits a CUE node file in place (see EditNodeFile).
func spliceCUE(file string, data []byte, labels map[string]string, drain *bool) ([]byte, error) {
	f, err := parser.ParseFile(file, data, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	fields := cueFields(f)
	if len(fields) == 0 {
		return nil, errors.New("no fields")
	}
	l := newLines(data)
	nl := newline(data)
	var sp splicer
	// remove deletes a field with its doc comments, and its lines when
	// nothing else is on them.
	remove := func(fl *ast.Field) {
		start, end := fl.Pos().Offset(), fl.End().Offset()
		for _, cg := range ast.Comments(fl) {
			if p := cg.Pos(); p.IsValid() && p.Offset() < start {
				start = p.Offset()
			} else if e := cg.End(); cg.Line && e.IsValid() && e.Offset() > end {
				end = e.Offset()
			}
		}
		first, last := l.line(start), l.line(max(end-1, start))
		before := string(data[l.begin(first):start])
		after := strings.TrimRight(string(data[end:l.end(last)]), "\r\n")
		after = strings.TrimLeft(after, " \t,")
		if strings.TrimSpace(before) == "" && (after == "" || strings.HasPrefix(after, "//")) {
			sp.replace(l.begin(first), l.end(last), "")
			return
		}
		// another field shares the line: drop this one and one comma
		if e := skipJSON(data, end, ""); e < len(data) && data[e] == ',' {
			end = skipJSON(data, e+1, "")
		} else if s := strings.TrimRight(string(data[:start]), " \t"); strings.HasSuffix(s, ",") {
			start = len(s) - 1
		}
		sp.replace(start, end, "")
	}
	lastField := fields[len(fields)-1].f
	lastLine := l.line(max(lastField.End().Offset()-1, 0))
	topIndent := l.indent(l.line(lastField.Pos().Offset()))
	insertAt := l.end(lastLine)
	prefix := ""
	if insertAt == len(data) && len(data) > 0 && data[len(data)-1] != '\n' {
		prefix = nl
	}
	structText := func(old []string, multiLine bool, indent string) string {
		order := labelOrder(old, labels)
		if !multiLine {
			parts := make([]string, len(order))
			for i, k := range order {
				parts[i] = cueLabel(k) + ": " + strconv.Quote(labels[k])
			}
			return "{" + strings.Join(parts, ", ") + "}"
		}
		width := 0
		for _, k := range order {
			width = max(width, len(cueLabel(k))+1)
		}
		var b strings.Builder
		b.WriteString("{" + nl)
		for _, k := range order {
			key := cueLabel(k) + ":"
			b.WriteString(indent + "\t" + key + strings.Repeat(" ", width-len(key)+1) + strconv.Quote(labels[k]) + nl)
		}
		b.WriteString(indent + "}")
		return b.String()
	}
	find := func(name string) []*ast.Field {
		var out []*ast.Field
		for _, cf := range fields {
			if cf.name == name {
				out = append(out, cf.f)
			}
		}
		return out
	}
	if labels != nil {
		found := find("labels")
		switch {
		case len(labels) == 0:
			for _, fl := range found {
				remove(fl)
			}
		case len(found) == 0:
			sp.replace(insertAt, insertAt, prefix+topIndent+"labels: "+structText(nil, true, topIndent)+nl)
			prefix = ""
		default:
			fl := found[0]
			var old []string
			for _, dup := range found {
				old = append(old, cueLabelKeys(dup.Value)...)
			}
			start, end := fl.Value.Pos().Offset(), fl.Value.End().Offset()
			multi := bytes.ContainsRune(data[start:end], '\n') || len(labels) > 3
			sp.replace(start, end, structText(old, multi, l.indent(l.line(fl.Pos().Offset()))))
			for _, dup := range found[1:] {
				remove(dup)
			}
		}
	}
	if drain != nil {
		found := find("drain")
		switch {
		case !*drain:
			for _, fl := range found {
				remove(fl)
			}
		case len(found) == 0:
			sp.replace(insertAt, insertAt, prefix+topIndent+"drain: true"+nl)
		default:
			fl := found[0]
			sp.replace(fl.Value.Pos().Offset(), fl.Value.End().Offset(), "true")
			for _, dup := range found[1:] {
				remove(dup)
			}
		}
	}
	return sp.apply(data)
}

// formatCUE edits a CUE node file through its AST and formats it with
// cue/format: comments stay, layout is cue fmt's.
func formatCUE(file string, data []byte, labels map[string]string, drain *bool) ([]byte, error) {
	f, err := parser.ParseFile(file, data, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	label := func(k string) ast.Label {
		if c := cueLabel(k); c != k {
			return ast.NewString(k)
		}
		return ast.NewIdent(k)
	}
	newField := func(name string, v ast.Expr) *ast.Field {
		fl := &ast.Field{Label: ast.NewIdent(name), Value: v}
		ast.SetRelPos(fl, token.Newline)
		return fl
	}
	// set replaces the value of the first top-level field named name
	// (dropping the others), adds it when absent, removes it when v is nil.
	set := func(name string, v func(old ast.Expr) ast.Expr) {
		var decls []ast.Decl
		done := false
		for _, d := range f.Decls {
			fl, ok := d.(*ast.Field)
			if !ok {
				decls = append(decls, d)
				continue
			}
			if n, _, err := ast.LabelName(fl.Label); err != nil || n != name {
				decls = append(decls, d)
				continue
			}
			if done {
				continue
			}
			done = true
			if nv := v(fl.Value); nv != nil {
				fl.Value = nv
				decls = append(decls, fl)
			}
		}
		if !done {
			if nv := v(nil); nv != nil {
				decls = append(decls, newField(name, nv))
			}
		}
		f.Decls = decls
	}
	if labels != nil {
		set("labels", func(old ast.Expr) ast.Expr {
			if len(labels) == 0 {
				return nil
			}
			s := &ast.StructLit{Lbrace: token.Blank.Pos(), Rbrace: token.Newline.Pos()}
			for _, k := range labelOrder(cueLabelKeys(old), labels) {
				fl := &ast.Field{Label: label(k), Value: ast.NewString(labels[k])}
				ast.SetRelPos(fl, token.Newline)
				s.Elts = append(s.Elts, fl)
			}
			return s
		})
	}
	if drain != nil {
		set("drain", func(ast.Expr) ast.Expr {
			if !*drain {
				return nil
			}
			return ast.NewBool(true)
		})
	}
	return format.Node(f)
}
