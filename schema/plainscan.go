package schema

import (
	"bytes"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave"
)

// plainCUE and plainYAML are plainJSON for the two other formats: they
// decode an object file straight from its bytes, without CUE's parser or
// YAML decoder, when it is written only in forms whose value is obvious,
// and answer ok=false for anything else, valid or not (the file then takes
// the general path, which parses it and reports its problems). A YAML
// file's decoding cost a third of a full validation of a 100,000-node
// tree, a CUE file's parse a sixth.

// plainData decodes an object file of any format from its bytes when it is
// written in plain forms only (plainJSON, plainYAML, plainCUE).
func plainData(p string, data []byte) (map[string]any, bool) {
	switch path.Ext(p) {
	case ".json":
		return plainJSON(data)
	case ".yaml", ".yml":
		return plainYAML(data)
	case ".cue":
		return plainCUE(data)
	}
	return nil, false
}

// plainCUE decodes a CUE object file of regular fields at the top level
// (no braces around them, no package clause): labels that are identifiers
// neither hidden nor definitions, or double-quoted ASCII strings; values
// that are plain strings, canonical integers, booleans, lists and structs
// of those; fields and elements separated by commas or newlines; `//`
// comments.
func plainCUE(data []byte) (map[string]any, bool) {
	if !utf8.Valid(data) { // comments included
		return nil, false
	}
	d := cueScanner{jsonScanner{data: data}}
	return d.fields(1, 0)
}

type cueScanner struct{ jsonScanner }

// gap skips spaces, tabs, newlines and comments.
func (d *cueScanner) gap() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n':
			d.i++
		case '/':
			if !d.comment() {
				return
			}
		default:
			return
		}
	}
}

// comment skips a `//` comment up to its newline (not included).
func (d *cueScanner) comment() bool {
	if !bytes.HasPrefix(d.data[d.i:], []byte("//")) {
		return false
	}
	for d.i < len(d.data) && d.data[d.i] != '\n' {
		if c := d.data[d.i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
		d.i++
	}
	return true
}

// separator skips what follows a value on its line and reports whether
// that ends the value as an element: a comma, or a newline (where CUE
// inserts one), or the end of the file.
func (d *cueScanner) separator() bool {
	d.inline()
	sep := false
	if d.peek() == ',' {
		d.i++
		sep = true
		d.inline()
	}
	if d.peek() == '/' && !d.comment() {
		return false
	}
	return sep || d.peek() == '\n' || d.i == len(d.data)
}

func (d *cueScanner) inline() {
	for d.i < len(d.data) && (d.data[d.i] == ' ' || d.data[d.i] == '\t') {
		d.i++
	}
}

// fields decodes the fields of a struct up to close ('}'; 0: the end of the
// file), the opening brace already consumed.
func (d *cueScanner) fields(depth int, close byte) (map[string]any, bool) {
	if depth > maxPlainJSONDepth {
		return nil, false
	}
	m := map[string]any{}
	d.gap()
	for {
		switch {
		case close == 0 && d.i == len(d.data):
			return m, len(m) > 0
		case close != 0 && d.peek() == close:
			d.i++
			return m, true
		}
		var name string
		if d.peek() == '"' {
			s, ok := d.str()
			if !ok || !isASCII(s) {
				return nil, false
			}
			name = s
		} else {
			start := d.i
			for c := d.peek(); isIdentByte(c, d.i > start); c = d.peek() {
				d.i++
			}
			name = string(d.data[start:d.i])
			if name == "" || cueKeywords[name] { // read as something else, or a clause
				return nil, false
			}
		}
		if _, dup := m[name]; dup {
			return nil, false
		}
		d.inline()
		if d.peek() != ':' {
			return nil, false
		}
		d.i++
		d.inline()
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		m[name] = v
		sep := d.separator()
		d.gap()
		if !sep && !(close != 0 && d.peek() == close) {
			return nil, false
		}
	}
}

// isIdentByte reports whether c may be a byte of a plain identifier label:
// an ASCII letter, or (after the first) a digit or underscore.
func isIdentByte(c byte, after bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || after && (c >= '0' && c <= '9' || c == '_')
}

func (d *cueScanner) value(depth int) (any, bool) {
	switch c := d.peek(); {
	case c == '{':
		d.i++
		return d.fields(depth+1, '}')
	case c == '[':
		return d.list(depth + 1)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.int()
	}
	return nil, false
}

func (d *cueScanner) list(depth int) ([]any, bool) {
	if depth > maxPlainJSONDepth {
		return nil, false
	}
	d.i++ // [
	l := []any{}
	d.gap()
	for d.peek() != ']' {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		l = append(l, v)
		sep := d.separator()
		d.gap()
		if !sep && d.peek() != ']' {
			return nil, false
		}
	}
	d.i++
	return l, true
}

// plainYAML decodes a YAML object file of one block mapping at the left
// margin, indented with spaces only: keys that are plain words or quoted
// strings without escapes; values that are such strings, canonical
// integers, true or false, plain words that YAML and CUE read as strings,
// one-line flow collections in JSON's plain forms, block mappings and block
// sequences of scalars; `#` comments. ASCII only.
func plainYAML(data []byte) (map[string]any, bool) {
	var lines []yamlLine
	for len(data) > 0 {
		line := data
		if n := bytes.IndexByte(data, '\n'); n >= 0 {
			line, data = data[:n], data[n+1:]
		} else {
			data = nil
		}
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		for _, c := range line[indent:] {
			if c < 0x20 || c >= 0x7f { // tabs, carriage returns, non-ASCII
				return nil, false
			}
		}
		if text := line[indent:]; len(text) > 0 && text[0] != '#' {
			lines = append(lines, yamlLine{indent, text})
		}
	}
	if len(lines) == 0 || lines[0].indent != 0 {
		return nil, false
	}
	y := yamlScanner{lines: lines}
	m, ok := y.mapping(0, 1)
	return m, ok && y.pos == len(lines)
}

type yamlLine struct {
	indent int
	text   []byte // from the first non-space byte
}

type yamlScanner struct {
	lines []yamlLine
	pos   int
}

// mapping decodes the block mapping whose keys are at indent.
func (y *yamlScanner) mapping(indent, depth int) (map[string]any, bool) {
	if depth > maxPlainJSONDepth {
		return nil, false
	}
	m := map[string]any{}
	for y.pos < len(y.lines) {
		l := y.lines[y.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent || isYAMLItem(l.text) {
			return nil, false
		}
		key, rest, ok := yamlKey(l.text)
		if !ok {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		y.pos++
		var v any
		if yamlBlank(rest) {
			// the value is the block below: a sequence may start at the
			// key's own indent, a mapping further in
			if y.pos == len(y.lines) {
				return nil, false // null
			}
			switch next := y.lines[y.pos]; {
			case isYAMLItem(next.text) && next.indent >= indent:
				v, ok = y.sequence(next.indent, depth+1)
			case next.indent > indent:
				v, ok = y.mapping(next.indent, depth+1)
			default:
				return nil, false // null
			}
		} else {
			v, ok = plainYAMLValue(rest, depth)
		}
		if !ok {
			return nil, false
		}
		m[key] = v
	}
	return m, true
}

// sequence decodes a block sequence of scalars whose dashes are at indent.
func (y *yamlScanner) sequence(indent, depth int) ([]any, bool) {
	l := []any{}
	for y.pos < len(y.lines) {
		line := y.lines[y.pos]
		if line.indent < indent || line.indent == indent && !isYAMLItem(line.text) {
			break
		}
		if line.indent > indent || len(line.text) < 2 {
			return nil, false // a continuation, a nested block, a null item
		}
		v, ok := plainYAMLValue(line.text[1:], depth)
		if !ok {
			return nil, false
		}
		l = append(l, v)
		y.pos++
	}
	return l, true
}

func isYAMLItem(text []byte) bool {
	return text[0] == '-' && (len(text) == 1 || text[1] == ' ')
}

// yamlKey splits "key: rest" (rest empty or starting with a space).
func yamlKey(text []byte) (key string, rest []byte, ok bool) {
	var n int
	switch text[0] {
	case '"':
		d := jsonScanner{data: text}
		if key, ok = d.str(); !ok {
			return "", nil, false
		}
		n = d.i
	case '\'':
		if key, n, ok = singleQuoted(text); !ok {
			return "", nil, false
		}
	default:
		for n < len(text) && isPlainYAMLByte(text[n], n > 0) {
			n++
		}
		key = string(text[:n])
		if !plainYAMLWord(key) {
			return "", nil, false
		}
	}
	if n == len(text) || text[n] != ':' {
		return "", nil, false
	}
	rest = text[n+1:]
	return key, rest, len(rest) == 0 || rest[0] == ' '
}

// singleQuoted decodes a single-quoted scalar without quotes inside (no
// ” escapes) at the start of t, and returns its length with the quotes.
func singleQuoted(t []byte) (string, int, bool) {
	end := bytes.IndexByte(t[1:], '\'')
	if end < 0 || end+2 < len(t) && t[end+2] == '\'' {
		return "", 0, false
	}
	return string(t[1 : end+1]), end + 2, true
}

// yamlBlank reports whether what follows a value is only spaces and a
// comment.
func yamlBlank(rest []byte) bool {
	t := bytes.TrimLeft(rest, " ")
	return len(t) == 0 || t[0] == '#' && len(t) < len(rest)
}

// plainYAMLValue decodes the value after "key:" or "-" (which starts with a
// space) up to the end of its line.
func plainYAMLValue(rest []byte, depth int) (any, bool) {
	t := bytes.TrimLeft(rest, " ")
	if len(t) == len(rest) || len(t) == 0 {
		return nil, false
	}
	var v any
	var ok bool
	var n int
	switch c := t[0]; {
	case c == '\'':
		v, n, ok = singleQuoted(t)
	case c == '"' || c == '[' || c == '{':
		d := jsonScanner{data: t}
		v, ok = d.value(depth)
		n = d.i
	case c == '-' || c >= '0' && c <= '9':
		n = bytes.IndexByte(t, ' ')
		if n < 0 {
			n = len(t)
		}
		d := jsonScanner{data: t[:n]}
		v, ok = d.int()
		ok = ok && d.i == n
	default:
		for n < len(t) && isPlainYAMLByte(t[n], n > 0) {
			n++
		}
		switch w := string(t[:n]); w {
		case "true", "false":
			v, ok = w == "true", true
		default:
			v, ok = w, plainYAMLWord(w)
		}
	}
	return v, ok && yamlBlank(t[n:])
}

// isPlainYAMLByte reports whether c may be a byte of a plain word: a letter
// or underscore, or (after the first) a digit, '.', '-' or '/'.
func isPlainYAMLByte(c byte, after bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' ||
		after && (c >= '0' && c <= '9' || c == '.' || c == '-' || c == '/')
}

// plainYAMLWord reports whether w is a plain word YAML reads as the string
// w: not empty, and none of the words YAML 1.1 or 1.2 reads as a boolean,
// a null or a special float in any case.
func plainYAMLWord(w string) bool {
	switch strings.ToLower(w) {
	case "", "true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf":
		return false
	}
	return true
}

// appendCanonical appends the canonical JSON of plain values (what
// canonicalJSON writes for their JSON: keys sorted, HTML characters not
// escaped) without encoding/json's reflection. ok is false for a value
// that is not plain.
func appendCanonical(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendCanonical(b, v[k]); !ok {
				return nil, false
			}
		}
		return append(b, '}'), true
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendCanonical(b, x); !ok {
				return nil, false
			}
		}
		return append(b, ']'), true
	case string:
		return appendJSONString(b, v), true
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case bool:
		return strconv.AppendBool(b, v), true
	}
	return nil, false
}

// appendJSONString appends s quoted as encoding/json does with HTML
// escaping off, as CUE writes it.
func appendJSONString(b []byte, s string) []byte { return fleetwave.AppendJSONString(b, s, false) }
