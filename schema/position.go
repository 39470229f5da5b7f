package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

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
