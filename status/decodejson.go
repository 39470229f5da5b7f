package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// decodeJSON reads one JSON value into its generic form, as
// encoding/json's Decoder with UseNumber made it, its numbers then turned
// into Go numbers:
// objects map[string]any (the last of a repeated key wins), arrays []any,
// numbers int64 when integers that fit, else float64 (the number's text
// when out of range), strings, booleans and nil. Documents are rendered
// from their JSON form at every status write; encoding/json's decoding
// into interfaces was most of that cost. A string with an escape or
// invalid UTF-8 is decoded by encoding/json, so the two never differ on
// one. Nothing but white space may follow the value.
func decodeJSON(data []byte) (any, error) {
	r := jsonReader{b: data}
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	r.space()
	if r.i != len(r.b) {
		return nil, r.fail("after the top-level value")
	}
	return v, nil
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

type jsonReader struct {
	b []byte
	i int
	// strs interns keys: a document's items repeat the same few field
	// names, each allocated once. (Values are mostly unique: ids, times.)
	strs map[string]string
	// size is the size of the last object read at each depth: the next
	// one (an array's next item) is made that large at once.
	size [8]int
}

// internMax bounds the strings interned, and internLen their length.
const internMax, internLen = 4096, 32

func (r *jsonReader) intern(b []byte) string {
	if len(b) > internLen {
		return string(b)
	}
	if s, ok := r.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if r.strs == nil {
		r.strs = map[string]string{}
	}
	if len(r.strs) < internMax {
		r.strs[s] = s
	}
	return s
}

func (r *jsonReader) fail(what string) error {
	if r.i >= len(r.b) {
		return fmt.Errorf("json: unexpected end of input %s", what)
	}
	return fmt.Errorf("json: invalid character %q at offset %d %s", r.b[r.i], r.i, what)
}

func (r *jsonReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *jsonReader) value(depth int) (any, error) {
	r.space()
	if r.i >= len(r.b) {
		return nil, r.fail("looking for a value")
	}
	switch c := r.b[r.i]; {
	case c == '{':
		return r.object(depth + 1)
	case c == '[':
		return r.array(depth + 1)
	case c == '"':
		return r.str(false)
	case c == '-' || c >= '0' && c <= '9':
		return r.number()
	default:
		for _, lit := range [...]struct {
			text string
			v    any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if len(r.b)-r.i >= len(lit.text) && string(r.b[r.i:r.i+len(lit.text)]) == lit.text {
				r.i += len(lit.text)
				return lit.v, nil
			}
		}
		return nil, r.fail("looking for a value")
	}
}

func (r *jsonReader) object(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("json: exceeded max depth")
	}
	r.i++ // {
	hint := &r.size[min(depth, len(r.size)-1)]
	m := make(map[string]any, *hint)
	defer func() { *hint = len(m) }()
	r.space()
	if r.i < len(r.b) && r.b[r.i] == '}' {
		r.i++
		return m, nil
	}
	for {
		r.space()
		if r.i >= len(r.b) || r.b[r.i] != '"' {
			return nil, r.fail("looking for an object key")
		}
		k, err := r.str(true)
		if err != nil {
			return nil, err
		}
		r.space()
		if r.i >= len(r.b) || r.b[r.i] != ':' {
			return nil, r.fail("after an object key")
		}
		r.i++
		v, err := r.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		r.space()
		if r.i >= len(r.b) {
			return nil, r.fail("in an object")
		}
		switch r.b[r.i] {
		case ',':
			r.i++
		case '}':
			r.i++
			return m, nil
		default:
			return nil, r.fail("after an object value")
		}
	}
}

func (r *jsonReader) array(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("json: exceeded max depth")
	}
	r.i++ // [
	a := []any{}
	r.space()
	if r.i < len(r.b) && r.b[r.i] == ']' {
		r.i++
		return a, nil
	}
	for {
		v, err := r.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		r.space()
		if r.i >= len(r.b) {
			return nil, r.fail("in an array")
		}
		switch r.b[r.i] {
		case ',':
			r.i++
		case ']':
			r.i++
			return a, nil
		default:
			return nil, r.fail("after an array element")
		}
	}
}

// str reads a string at r.i (its opening quote); a key is interned.
func (r *jsonReader) str(key bool) (string, error) {
	start := r.i
	ascii := true
	for j := start + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := r.b[start+1 : j]
			if ascii || utf8.Valid(s) {
				r.i = j + 1
				if key {
					return r.intern(s), nil
				}
				return string(s), nil
			}
			return r.slowStr(start)
		case c == '\\' || c < 0x20:
			return r.slowStr(start)
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	r.i = len(r.b)
	return "", r.fail("in a string")
}

// slowStr has encoding/json decode the string at start, found by its
// closing quote.
func (r *jsonReader) slowStr(start int) (string, error) {
	j := start + 1
	for j < len(r.b) && r.b[j] != '"' {
		if r.b[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(r.b) {
		r.i = len(r.b)
		return "", r.fail("in a string")
	}
	var s string
	if err := json.Unmarshal(r.b[start:j+1], &s); err != nil {
		return "", err
	}
	r.i = j + 1
	return s, nil
}

// number reads a number as numbers turns a json.Number: int64, else
// float64, else its text.
func (r *jsonReader) number() (any, error) {
	start := r.i
	digits := func() int {
		n := 0
		for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	if r.b[r.i] == '-' {
		r.i++
	}
	integer := true
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case digits() == 0:
		return nil, r.fail("in a number")
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		integer = false
		r.i++
		if digits() == 0 {
			return nil, r.fail("after a decimal point")
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		integer = false
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return nil, r.fail("in an exponent")
		}
	}
	text := string(r.b[start:r.i])
	if integer {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n, nil
		}
	}
	if f, err := strconv.ParseFloat(text, 64); err == nil {
		return f, nil
	}
	return text, nil
}
