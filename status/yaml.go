package status

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// emitYAML appends v, a generic value of a JSON document (maps of string
// keys, slices, strings, int64, float64, bools, nil), to b as yaml.v3
// renders it with indent 2, without going through yaml.v3's generic
// emitter: rendering status documents was a fifth of a busy hub's CPU.
// It reports false, with b as it was, for anything else (the caller then
// renders v with yaml.v3).
//
// The layout is yaml.v3's block style: a mapping's keys sorted as
// yaml.v3 sorts them, a nested mapping or sequence on the lines below its
// key two spaces further right, a sequence element's mapping or sequence
// starting on the element's line, empty ones as {} and []. Scalars are
// yaml.v3's own: numbers, bools and null are formatted as it formats
// them, and a string is written as yaml.v3 writes it alone in a sequence
// (scalarOf), its later lines, if any (a literal block), shifted right
// by the indentation of the collection it is in, as the chunked lists
// are (see encode).
func emitYAML(b *bytes.Buffer, v any) bool {
	start := b.Len()
	e := emitter{out: b}
	var ok bool
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			b.WriteString("{}\n")
			return true
		}
		ok = e.mapping(v, 0, false)
	case []any:
		if len(v) == 0 {
			b.WriteString("[]\n")
			return true
		}
		ok = e.sequence(v, 0, false)
	}
	if !ok {
		b.Truncate(start)
	}
	return ok
}

// emitSequence appends the non-empty s as yaml.v3 writes it at column ind
// (under a top-level key: 2); false, with b as it was, as emitYAML.
func emitSequence(b *bytes.Buffer, s []any, ind int) bool {
	start := b.Len()
	e := emitter{out: b}
	if !e.sequence(s, ind, false) {
		b.Truncate(start)
		return false
	}
	return true
}

type emitter struct {
	out    *bytes.Buffer
	orders [][]string // recent key orders: the elements of a list share theirs
}

// sortedKeys returns m's keys in yaml.v3's order, reusing a recent order
// of the same key set.
func (e *emitter) sortedKeys(m map[string]any) []string {
	for _, o := range e.orders {
		if len(o) != len(m) {
			continue
		}
		same := true
		for _, k := range o {
			if _, ok := m[k]; !ok {
				same = false
				break
			}
		}
		if same {
			return o
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Sort(keyOrderList(keys))
	if len(e.orders) == 4 {
		e.orders = e.orders[1:]
	}
	e.orders = append(e.orders, keys)
	return keys
}

func (e *emitter) pad(n int) {
	for range n {
		e.out.WriteByte(' ')
	}
}

// mapping writes m's keys at column ind; inline: the first one goes on the
// current line (after a sequence's "- ").
func (e *emitter) mapping(m map[string]any, ind int, inline bool) bool {
	for i, k := range e.sortedKeys(m) {
		if i > 0 || !inline {
			e.pad(ind)
		}
		ks, ok := keyScalar(k)
		if !ok {
			return false
		}
		e.out.WriteString(ks)
		e.out.WriteByte(':')
		switch v := m[k].(type) {
		case map[string]any:
			if len(v) == 0 {
				e.out.WriteString(" {}\n")
				continue
			}
			e.out.WriteByte('\n')
			if !e.mapping(v, ind+2, false) {
				return false
			}
		case []any:
			if len(v) == 0 {
				e.out.WriteString(" []\n")
				continue
			}
			e.out.WriteByte('\n')
			if !e.sequence(v, ind+2, false) {
				return false
			}
		default:
			e.out.WriteByte(' ')
			if !e.scalar(v, ind) {
				return false
			}
		}
	}
	return true
}

// sequence writes s's elements at column ind; inline: the first one goes
// on the current line (after an outer sequence's "- ").
func (e *emitter) sequence(s []any, ind int, inline bool) bool {
	for i, v := range s {
		if i > 0 || !inline {
			e.pad(ind)
		}
		e.out.WriteString("- ")
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				e.out.WriteString("{}\n")
				continue
			}
			if !e.mapping(v, ind+2, true) {
				return false
			}
		case []any:
			if len(v) == 0 {
				e.out.WriteString("[]\n")
				continue
			}
			if !e.sequence(v, ind+2, true) {
				return false
			}
		default:
			if !e.scalar(v, ind) {
				return false
			}
		}
	}
	return true
}

// scalar writes v and a line break. A string yaml.v3 writes on more than
// one line (a literal block) has its later lines ind spaces further
// right, empty ones excepted, as yaml.v3 indents them from the
// collection's column. One it writes with a line break other than LF is
// left to yaml.v3: the line after such a break is not always indented.
func (e *emitter) scalar(v any, ind int) bool {
	switch v := v.(type) {
	case nil:
		e.out.WriteString("null")
	case bool:
		e.out.WriteString(strconv.FormatBool(v))
	case int64:
		e.out.WriteString(strconv.FormatInt(v, 10))
	case int:
		e.out.WriteString(strconv.Itoa(v))
	case float64:
		s := strconv.FormatFloat(v, 'g', -1, 64)
		switch s {
		case "+Inf":
			s = ".inf"
		case "-Inf":
			s = "-.inf"
		case "NaN":
			s = ".nan"
		}
		e.out.WriteString(s)
	case string:
		s, ok := scalarOf(v)
		if !ok || hasLineBreak(s) {
			return false
		}
		// later lines (a literal block's) shift right; empty ones stay empty
		for first := true; ; first = false {
			line, rest, more := strings.Cut(s, "\n")
			if !first && line != "" {
				e.pad(ind)
			}
			e.out.WriteString(line)
			if !more {
				break
			}
			e.out.WriteByte('\n')
			s = rest
		}
	default:
		return false
	}
	e.out.WriteByte('\n')
	return true
}

// hasLineBreak reports whether s holds a YAML line break other than LF
// (CR, NEL, LS, PS).
func hasLineBreak(s string) bool {
	return strings.IndexByte(s, '\r') >= 0 || strings.Contains(s, "\u0085") ||
		strings.Contains(s, "\u2028") || strings.Contains(s, "\u2029")
}

// plainSafe reports whether yaml.v3 surely writes s as a plain scalar, as
// a value and as a key: a letter first, then letters, digits and
// _ . - / @ +, and not a word YAML reads as a bool or null (yaml.v3
// quotes YAML 1.1's too). A string that starts with a letter resolves
// to anything but a string only by that list, and none of those
// characters is an indicator past the first.
func plainSafe(s string) bool {
	if s == "" || !isASCIILetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isASCIILetter(c) && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' && c != '/' && c != '@' && c != '+' {
			return false
		}
	}
	if len(s) <= 5 {
		switch strings.ToLower(s) {
		case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
			return false
		}
	}
	return true
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// yamlTimestamp is the first layout yaml.v3 reads a timestamp with: a
// string it reads so is a timestamp, which it writes double-quoted.
const yamlTimestamp = "2006-1-2T15:4:5.999999999Z07:00"

// timestampSafe reports whether yaml.v3 surely writes s double-quoted and
// as is: a timestamp of four digits, then digits and - T Z : . + only,
// that yaml.v3's first timestamp layout reads.
func timestampSafe(s string) bool {
	if len(s) < 5 || s[4] != '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i < 4 && (c < '0' || c > '9') {
			return false
		}
		if (c < '0' || c > '9') && c != '-' && c != 'T' && c != 'Z' && c != ':' && c != '.' && c != '+' {
			return false
		}
	}
	_, err := time.Parse(yamlTimestamp, s)
	return err == nil
}

// scalars caches how yaml.v3 writes strings that are neither plainSafe nor
// timestampSafe (versions, digests, messages): what follows "- " when
// it writes the string alone in a sequence, and the key as it writes it
// in a mapping. It is cleared when full.
var scalars struct {
	sync.Mutex
	values map[string]string
	keys   map[string]string
}

const scalarsMax = 16 << 10

// scalarOf is s as yaml.v3 writes it as a value (its later lines, if any,
// at the indentation of a top-level sequence).
func scalarOf(s string) (string, bool) {
	if plainSafe(s) {
		return s, true
	}
	if timestampSafe(s) {
		return `"` + s + `"`, true
	}
	return cached(s, false)
}

// keyScalar is k as yaml.v3 writes it as a mapping's key; false when
// yaml.v3 writes it on more than one line (a complex key: one longer
// than 128 bytes, for one).
func keyScalar(k string) (string, bool) {
	if len(k) <= 128 && plainSafe(k) {
		return k, true
	}
	return cached(k, true)
}

func cached(s string, key bool) (string, bool) {
	scalars.Lock()
	m := scalars.values
	if key {
		m = scalars.keys
	}
	out, ok := m[s]
	scalars.Unlock()
	if ok {
		return out, true
	}
	var b bytes.Buffer
	if key {
		if encodeYAMLv3(&b, map[string]any{s: 0}) != nil {
			return "", false
		}
		y, ok := bytes.CutSuffix(b.Bytes(), []byte(": 0\n"))
		if !ok || bytes.IndexByte(y, '\n') >= 0 || hasLineBreak(string(y)) {
			return "", false
		}
		out = string(y)
	} else {
		if encodeYAMLv3(&b, []any{s}) != nil {
			return "", false
		}
		y, ok := bytes.CutPrefix(b.Bytes(), []byte("- "))
		if !ok {
			return "", false
		}
		if y, ok = bytes.CutSuffix(y, []byte("\n")); !ok {
			return "", false
		}
		out = string(y)
	}
	scalars.Lock()
	if scalars.values == nil || len(scalars.values)+len(scalars.keys) >= scalarsMax {
		scalars.values, scalars.keys = map[string]string{}, map[string]string{}
	}
	if key {
		scalars.keys[s] = out
	} else {
		scalars.values[s] = out
	}
	scalars.Unlock()
	return out, true
}

// keyOrderList sorts strings as yaml.v3 sorts a mapping's string keys:
// runs of digits by their value, letters before other characters after a
// digit, after them elsewhere.
type keyOrderList []string

func (l keyOrderList) Len() int      { return len(l) }
func (l keyOrderList) Swap(i, j int) { l[i], l[j] = l[j], l[i] }

// Less is yaml.v3's keyList.Less for two strings.
func (l keyOrderList) Less(i, j int) bool {
	a, b := l[i], l[j]
	if isASCII(a) && isASCII(b) {
		return keyLess([]byte(a), []byte(b))
	}
	return keyLess([]rune(a), []rune(b))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// keyLess is yaml.v3's keyList.Less on the runes (or ASCII bytes) of two
// strings.
func keyLess[E rune | byte](ar, br []E) bool {
	digits := false
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			digits = unicode.IsDigit(rune(ar[i]))
			continue
		}
		al := unicode.IsLetter(rune(ar[i]))
		bl := unicode.IsLetter(rune(br[i]))
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			if digits {
				return al
			}
			return bl
		}
		var ai, bi int
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(rune(ar[j])); j-- {
				if ar[j] != '0' {
					an = 1
					bn = 1
					break
				}
			}
		}
		for ai = i; ai < len(ar) && unicode.IsDigit(rune(ar[ai])); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for bi = i; bi < len(br) && unicode.IsDigit(rune(br[bi])); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}
