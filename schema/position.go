package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue/ast"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// Positions of errors found before CUE has a syntax tree: encoding and YAML
// syntax errors. Lines are counted at '\n' and columns in bytes, both from
// 1, like the positions of CUE's own errors, so every error of a file
// counts columns the same way (a tab or a multi-byte character before the
// error counts as its bytes).

// lineCol returns the 1-based line and byte column of offset off of data.
func lineCol(data []byte, off int) (line, col int) {
	off = max(0, min(off, len(data)))
	line = 1 + bytes.Count(data[:off], []byte{'\n'})
	return line, off - (bytes.LastIndexByte(data[:off], '\n') + 1) + 1
}

// checkUTF8 refuses a file that is not UTF-8 text, at its first invalid
// byte. YAML's reader and CUE's scanner refuse such files too, but YAML
// names no position and CUE's JSON decoder says only "invalid JSON".
func checkUTF8(p string, data []byte) []fleetwave.FileError {
	if utf8.Valid(data) {
		return nil
	}
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	line, col := lineCol(data, off)
	return []fleetwave.FileError{{Path: p, Line: line, Col: col,
		Msg: fmt.Sprintf("invalid UTF-8: found byte 0x%02x, expected UTF-8 text", data[off])}}
}

// yamlAllowed reports whether YAML allows character r in a stream (YAML
// 1.2 §5.1, as go-yaml's reader checks it): tab, line feed, carriage
// return, printable ASCII, NEL and the non-control, non-surrogate rest of
// Unicode except U+FFFE and U+FFFF.
func yamlAllowed(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
		(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || (r >= 0x10000 && r <= 0x10ffff)
}

// yamlCharError returns the error of the first character YAML does not
// allow in data (valid UTF-8), ok=false when there is none.
func yamlCharError(p string, data []byte) (fleetwave.FileError, bool) {
	for off, r := range string(data) {
		if yamlAllowed(r) {
			continue
		}
		line, col := lineCol(data, off)
		msg := fmt.Sprintf("invalid YAML: character U+%04X is not allowed", r)
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			msg = fmt.Sprintf("invalid YAML: control character U+%04X is not allowed (only tab, line feed and carriage return are)", r)
		}
		return fleetwave.FileError{Path: p, Line: line, Col: col, Msg: msg}, true
	}
	return fleetwave.FileError{}, false
}

// The error types of go-yaml's parser (yaml_error_type_t).
const (
	yamlNoError      = 0
	yamlReaderError  = 2
	yamlScannerError = 3
	yamlParserError  = 4
)

// yamlMark is a position of go-yaml (yaml_mark_t): index counts characters
// (runes) from the start of the stream, after a byte order mark; line and
// column count from 0.
type yamlMark struct{ index, line, column int }

// yamlFailure is what go-yaml's parser knows about its error.
type yamlFailure struct {
	kind     int      // yaml_error_type_t
	problem  yamlMark // where the problem is (the offending token)
	context  string   // e.g. "while parsing a flow sequence"
	ctxMark  yamlMark // where the context starts
	event    yamlMark // the start of the event being composed
	hasEvent bool
}

// yamlSyntaxError locates the syntax error CUE's YAML decoder reported for
// data. CUE decodes YAML with go-yaml, whose errors are plain strings: a
// reader error (invalid character) has no position, and the line of a
// parser error is the 0-based line of its context (the enclosing flow
// sequence, say), so it usually points one line early, and there is never
// a column. go-yaml keeps the exact marks in its parser, which it does not
// export: this parses data again with go-yaml and reads them with
// reflection (read only, no unsafe). ok is false when data parses (the
// error came from CUE's conversion, whose errors have positions) or the
// marks cannot be read (a go-yaml whose internals changed; the caller then
// keeps CUE's message). TestYAMLSyntaxErrorPositions pins the result.
func yamlSyntaxError(p string, data []byte) (fe fleetwave.FileError, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var err error
	for {
		var n yaml.Node
		if err = dec.Decode(&n); err != nil {
			break
		}
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fleetwave.FileError{}, false
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, found := strings.CutPrefix(msg, "line "); found {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	f, ok := yamlFailureOf(dec)
	if !ok {
		return fleetwave.FileError{}, false
	}
	fe = fleetwave.FileError{Path: p, Msg: "invalid YAML: " + msg}
	switch {
	case f.kind == yamlReaderError:
		// The reader checks characters ahead of the scanner, in order: the
		// first character YAML does not allow is the one it refused.
		if ce, ok := yamlCharError(p, data); ok {
			return ce, true
		}
		return fleetwave.FileError{}, false
	case f.kind == yamlScannerError || f.kind == yamlParserError:
		fe.Line, fe.Col = yamlLineCol(data, f.problem)
		if f.context != "" && f.ctxMark != f.problem {
			l, c := yamlLineCol(data, f.ctxMark)
			hint := ""
			if f.context == "while scanning an alias" {
				// e.g. an unquoted cron expression "*/5 * * * *"
				hint = "; quote a value that starts with '*'"
			}
			fe.Msg += fmt.Sprintf(" (%s at %d:%d%s)", f.context, l, c, hint)
		}
	case f.kind == yamlNoError && f.hasEvent:
		// an error of go-yaml's composer (an unknown anchor): at the event
		fe.Line, fe.Col = yamlLineCol(data, f.event)
	default:
		return fleetwave.FileError{}, false
	}
	return fe, true
}

// yamlLineCol converts a go-yaml mark into a line and byte column of data.
func yamlLineCol(data []byte, m yamlMark) (line, col int) {
	off := 0
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		off = 3 // the reader drops the byte order mark before counting
	}
	for i := 0; i < m.index && off < len(data); i++ {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return lineCol(data, off)
}

// yamlFailureOf reads the error state of the parser of a go-yaml Decoder
// (Decoder.parser.parser, a yaml_parser_t, and Decoder.parser.event).
func yamlFailureOf(dec *yaml.Decoder) (f yamlFailure, ok bool) {
	defer func() {
		if recover() != nil { // a field of another type than expected
			f, ok = yamlFailure{}, false
		}
	}()
	pp := reflect.ValueOf(dec).Elem().FieldByName("parser")
	if !pp.IsValid() || pp.Kind() != reflect.Pointer || pp.IsNil() {
		return f, false
	}
	ps := pp.Elem()
	st := ps.FieldByName("parser")
	if !st.IsValid() {
		return f, false
	}
	kind, problem, ctx, ctxMark := st.FieldByName("error"), st.FieldByName("problem_mark"), st.FieldByName("context"), st.FieldByName("context_mark")
	if !kind.IsValid() || !ctx.IsValid() {
		return f, false
	}
	f.kind, f.context = int(kind.Int()), ctx.String()
	if f.problem, ok = markOf(problem); !ok {
		return f, false
	}
	if f.ctxMark, ok = markOf(ctxMark); !ok {
		return f, false
	}
	if ev := ps.FieldByName("event"); ev.IsValid() {
		if typ := ev.FieldByName("typ"); typ.IsValid() && typ.Int() != 0 {
			f.event, f.hasEvent = markOf(ev.FieldByName("start_mark"))
		}
	}
	return f, true
}

func markOf(v reflect.Value) (yamlMark, bool) {
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return yamlMark{}, false
	}
	i, l, c := v.FieldByName("index"), v.FieldByName("line"), v.FieldByName("column")
	if !i.IsValid() || !l.IsValid() || !c.IsValid() {
		return yamlMark{}, false
	}
	return yamlMark{index: int(i.Int()), line: int(l.Int()), column: int(c.Int())}, true
}

// yamlConversionError positions an error of CUE's conversion of go-yaml's
// nodes, which CUE writes as "<file>:<line>: <message>" without a column
// (an invalid !!binary value, a tag it cannot decode, aliases expanding to
// too many nodes): at the node of that line the message names by its tag
// or quoted value, else at the first node of the line. ok is false when
// the error has another form.
func yamlConversionError(p string, data []byte, err error) (fleetwave.FileError, bool) {
	rest, ok := strings.CutPrefix(err.Error(), p+":")
	if !ok {
		return fleetwave.FileError{}, false
	}
	num, msg, ok := strings.Cut(rest, ": ")
	line, aerr := strconv.Atoi(num)
	if !ok || aerr != nil || line < 1 {
		return fleetwave.FileError{}, false
	}
	var best *yaml.Node
	bestScore := -1
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fleetwave.FileError{}, false // a syntax error after all
		}
		stack := []*yaml.Node{&doc}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			stack = append(stack, n.Content...)
			if n.Line != line || n.Kind == yaml.DocumentNode {
				continue
			}
			score := 0
			if n.Tag != "" && n.Style&yaml.TaggedStyle != 0 && strings.Contains(msg, n.Tag) {
				score += 2
			}
			if n.Value != "" && strings.Contains(msg, strconv.Quote(n.Value)) {
				score++
			}
			if score > bestScore || (score == bestScore && n.Column < best.Column) {
				best, bestScore = n, score
			}
		}
	}
	fe := fleetwave.FileError{Path: p, Line: line, Col: 1, Msg: "invalid YAML: " + msg}
	if best != nil {
		// Column counts characters from 1; find its byte on the line.
		off := 0
		for l := 1; l < line; l++ {
			i := bytes.IndexByte(data[off:], '\n')
			if i < 0 {
				return fe, true
			}
			off += i + 1
		}
		for c := 1; c < best.Column && off < len(data); c++ {
			_, n := utf8.DecodeRune(data[off:])
			off += n
		}
		fe.Line, fe.Col = lineCol(data, off)
	}
	return fe, true
}

// yamlKeyErrors refuses the mapping keys of a YAML file (f, as CUE's
// decoder made it from data) that YAML reads as something else than a
// string: a plain 0123, 1.5, .inf, true, ~ or null. CUE turns such a key
// into the text of its value, often a different one (0123 becomes 0o123,
// 00 0o0, ~ null, .inf +Inf, True true), so a label or a name written so
// would silently be another one, which a selector for the written text
// never matches. Every such key is an error at its position, whatever
// object field holds it. go-yaml reads YAML 1.2: yes, no, on and off are
// strings, and so is a plain 01289 for CUE (not an octal number).
//
// Only files with a key CUE made from such a value are parsed again with
// go-yaml: every other key's label is a string that does not start like a
// number, null, true or false.
//
// f is nil when CUE's decoder refused a key ("invalid label -1"): every key
// is checked then.
func yamlKeyErrors(p string, data []byte, f *ast.File) []fleetwave.FileError {
	if f != nil && !mayHaveNonStringKey(f) {
		return nil
	}
	var errs []fleetwave.FileError
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			break // io.EOF; CUE's decoder read the same stream without error
		}
		stack := []*yaml.Node{&doc}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n.Kind == yaml.AliasNode {
				continue // checked where it is defined
			}
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if fe, ok := yamlKeyError(p, data, n.Content[i]); ok {
						errs = append(errs, fe)
					}
				}
			}
			stack = append(stack, n.Content...)
		}
	}
	return errs
}

// mayHaveNonStringKey reports whether a label of f could come from a YAML
// key that is not a string: CUE's label of such a key is the text of a
// number (a digit, a sign or a dot first, or NaN or number & ...), null,
// true or false.
func mayHaveNonStringKey(f *ast.File) bool {
	found := false
	ast.Walk(f, func(n ast.Node) bool {
		if fd, ok := n.(*ast.Field); ok && !found {
			name, _, err := ast.LabelName(fd.Label)
			if err == nil && name != "" && (strings.ContainsRune("0123456789+-.", rune(name[0])) ||
				strings.HasPrefix(name, "null") || strings.HasPrefix(name, "true") || strings.HasPrefix(name, "false") ||
				strings.HasPrefix(name, "NaN") || strings.HasPrefix(name, "number")) {
				found = true
			}
		}
		return !found
	}, nil)
	return found
}

// cueYAMLOctalLike is CUE's exception to go-yaml's resolution: a plain
// scalar go-yaml reads as a float that looks like a YAML 1.1 octal number
// with an 8 or a 9 (01289) is a string.
var cueYAMLOctalLike = regexp.MustCompile(`^[-+]?0[0-9_]+$`)

// yamlKeyError returns the error of mapping key k when YAML reads it as a
// number, a boolean or null.
func yamlKeyError(p string, data []byte, k *yaml.Node) (fleetwave.FileError, bool) {
	at, text := k, k.Value
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		text = "*" + k.Value
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		return fleetwave.FileError{}, false
	}
	tag := k.ShortTag()
	if tag == "!!float" && k.Style&yaml.TaggedStyle == 0 && cueYAMLOctalLike.MatchString(k.Value) {
		return fleetwave.FileError{}, false
	}
	var what, reads string
	switch tag {
	case "!!int", "!!float":
		what, reads = "a number", cueYAMLNumber(tag, k.Value)
	case "!!bool":
		what, reads = "a boolean", "false"
		if k.Value == "true" || k.Value == "True" || k.Value == "TRUE" {
			reads = "true"
		}
	case "!!null":
		what, reads = "null", "null"
	default:
		return fleetwave.FileError{}, false
	}
	fe := fleetwave.FileError{Path: p}
	fe.Line, fe.Col = yamlNodeLineCol(data, at.Line, at.Column)
	switch {
	case k.Style&yaml.TaggedStyle != 0:
		fe.Msg = fmt.Sprintf("key %s is tagged %s in YAML, which makes it %s: remove the tag and quote it (%s)", text, k.Tag, what, strconv.Quote(k.Value))
	case at != k:
		fe.Msg = fmt.Sprintf("key %s is an alias of %s, which YAML reads as %s: write the key as a quoted string (%s)", text, k.Value, what, strconv.Quote(k.Value))
	case text == "":
		fe.Msg = `an empty key reads as null in YAML: write it as ""`
	case reads == text || tag == "!!null":
		fe.Msg = fmt.Sprintf("key %s reads as %s in YAML: quote it (%s)", text, what, strconv.Quote(text))
	default:
		fe.Msg = fmt.Sprintf("key %s reads as %s in YAML (%s): quote it (%s)", text, what, reads, strconv.Quote(text))
	}
	return fe, true
}

// cueYAMLNumber is the text CUE's YAML decoder makes of a number: YAML
// 1.1 octal (0123) becomes CUE octal (0o123), .inf +Inf, .nan NaN.
func cueYAMLNumber(tag, v string) string {
	switch v {
	case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF":
		return "+Inf"
	case "-.inf", "-.Inf", "-.INF":
		return "-Inf"
	case ".nan", ".NaN", ".NAN":
		return "NaN"
	}
	if len(v) > 1 && v[0] == '0' && v[1] >= '0' && v[1] <= '9' {
		return "0o" + v[1:]
	}
	return v
}

// yamlNodeLineCol converts the position of a go-yaml node (line from 1,
// column in characters from 1) into a line and byte column of data.
func yamlNodeLineCol(data []byte, line, column int) (int, int) {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return lineCol(data, len(data))
		}
		off += i + 1
	}
	for c := 1; c < column && off < len(data) && data[off] != '\n'; c++ {
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return lineCol(data, off)
}

// yamlLoneCR refuses a YAML file with a carriage return that is not part
// of a CRLF line end, at that character. YAML reads such a character as a
// line break (an old Mac line end), where every other reader of positions
// (CUE's decoder, which locates go-yaml's nodes in the lines it counts at
// '\n', and the positions of this package) sees none: the positions would
// be wrong, and CUE's decoder can even fail on a line it does not have.
func yamlLoneCR(p string, data []byte) (fleetwave.FileError, bool) {
	for off := bytes.IndexByte(data, '\r'); off >= 0; {
		if off+1 >= len(data) || data[off+1] != '\n' {
			line, col := lineCol(data, off)
			return fleetwave.FileError{Path: p, Line: line, Col: col,
				Msg: `invalid YAML: carriage return without a line feed (a line break in YAML), expected lines ending in \n or \r\n`}, true
		}
		next := bytes.IndexByte(data[off+1:], '\r')
		if next < 0 {
			break
		}
		off += 1 + next
	}
	return fleetwave.FileError{}, false
}
