package fleetwave

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// An attempt is encoded and decoded on every hand-out: the hub decodes
// each one it pops from its node's queue and encodes it into the poll's
// answer, and the agent decodes the answer. encoding/json does that by
// reflection (at 10,000 nodes, 7% of the hub's CPU went to decoding
// queued attempts alone), so Attempt has a codec of its own. Its output is
// the bytes encoding/json writes for the struct's tags (HTML-safe
// escaping, omitempty, RFC 3339 deadline); its decoder reads the form the
// encoder writes and hands anything else (other spacing is fine; unknown
// or differently cased keys, nulls, escaped keys, numbers that are not
// plain integers) to encoding/json, so a decode means what it always did.

// attemptFields is Attempt without its methods: what encoding/json sees
// when the codec hands it over.
type attemptFields Attempt

// MarshalJSON encodes a as encoding/json encodes its fields.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return a.AppendJSON(make([]byte, 0, 256+len(a.Payload.Config)))
}

// AppendJSON appends a's JSON encoding (MarshalJSON's) to b.
func (a Attempt) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, a.ID)
	b = append(b, `,"item":`...)
	b = appendJSONString(b, a.Item)
	b = append(b, `,"rollout":`...)
	b = appendJSONString(b, a.Rollout)
	b = append(b, `,"node":`...)
	b = appendJSONString(b, a.Node)
	b = append(b, `,"block":`...)
	b = appendJSONString(b, a.Block)
	b = append(b, `,"action":`...)
	b = appendJSONString(b, a.Action)
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, a.Generation, 10)
	if a.TargetVersion != "" {
		b = append(b, `,"target_version":`...)
		b = appendJSONString(b, a.TargetVersion)
	}
	if a.ConfigHash != "" {
		b = append(b, `,"config_hash":`...)
		b = appendJSONString(b, a.ConfigHash)
	}
	if a.DesiredState != "" {
		b = append(b, `,"desired_state":`...)
		b = appendJSONString(b, string(a.DesiredState))
	}
	if a.ManagedBy != "" {
		b = append(b, `,"managed_by":`...)
		b = appendJSONString(b, a.ManagedBy)
	}
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, a.Fence, 10)
	b = append(b, `,"deadline":"`...)
	b, err := a.Deadline.AppendText(b) // RFC 3339, as time.Time's MarshalJSON
	if err != nil {
		return nil, err
	}
	b = append(b, `","payload":{"command":`...)
	p := a.Payload
	b = appendJSONString(b, p.Command)
	if p.TimeoutSeconds != 0 {
		b = append(b, `,"timeout_seconds":`...)
		b = strconv.AppendInt(b, int64(p.TimeoutSeconds), 10)
	}
	if p.Config != "" {
		b = append(b, `,"config":`...)
		b = appendJSONString(b, p.Config)
	}
	if p.OneShot {
		b = append(b, `,"one_shot":true`...)
	}
	if p.Operational {
		b = append(b, `,"operational":true`...)
	}
	b = append(b, '}')
	if a.Delivery != 0 {
		b = append(b, `,"delivery":`...)
		b = strconv.AppendInt(b, a.Delivery, 10)
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as encoding/json writes a string: the quote,
// the backslash and control characters escaped, U+2028 and U+2029 as \u
// escapes, invalid UTF-8 as U+FFFD, and with escapeHTML (encoding/json's
// default) <, > and & as \u003c, \u003e, \u0026. The attempt codec
// writes with it, and so does schema's canonical JSON (without HTML
// escaping, as CUE writes).
func AppendJSONString(b []byte, s string, escapeHTML bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || (c != '<' && c != '>' && c != '&')) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONString is AppendJSONString with encoding/json's default HTML
// escaping.
func appendJSONString(b []byte, s string) []byte { return AppendJSONString(b, s, true) }

// UnmarshalJSON decodes data into a as encoding/json decodes its fields.
func (a *Attempt) UnmarshalJSON(data []byte) error {
	t := *a
	if (&attemptParser{s: string(data)}).attempt(&t) {
		*a = t
		return nil
	}
	return json.Unmarshal(data, (*attemptFields)(a))
}

// DecodeAttempt decodes the JSON of an attempt held in a string (as
// UnmarshalJSON, without copying s): the decoded strings share s.
func DecodeAttempt(s string, a *Attempt) error {
	t := *a
	if (&attemptParser{s: s}).attempt(&t) {
		*a = t
		return nil
	}
	return json.Unmarshal([]byte(s), (*attemptFields)(a))
}

// errSlowPath is never returned: it tells the parser's callers to hand
// the input to encoding/json.
var errSlowPath = errors.New("attempt json: not the codec's form")

// attemptParser reads the JSON the codec writes. Each method returns
// false (or errSlowPath) on anything else, and the caller then lets
// encoding/json decode the whole input.
type attemptParser struct {
	s string
	i int
}

func (p *attemptParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte reports whether the next byte (after spaces) is c, and takes it.
func (p *attemptParser) byte(c byte) bool {
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string value.
func (p *attemptParser) str() (string, error) {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", errSlowPath
	}
	p.i++
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			v := p.s[start:p.i]
			p.i++
			return v, nil
		case c == '\\':
			return p.escaped(start)
		case c < 0x20:
			return "", errSlowPath
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(p.s[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", errSlowPath // encoding/json makes it U+FFFD
			}
			p.i += size
		default:
			p.i++
		}
	}
	return "", errSlowPath
}

// escaped reads the rest of a string value that has escapes, from start
// (its first byte) with p.i at its first backslash.
func (p *attemptParser) escaped(start int) (string, error) {
	b := make([]byte, 0, len(p.s)-start)
	b = append(b, p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", errSlowPath
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				if p.i+4 > len(p.s) {
					return "", errSlowPath
				}
				n, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 16) // no sign allowed
				if err != nil {
					return "", errSlowPath
				}
				r := rune(n)
				if r >= 0xD800 && r < 0xE000 {
					return "", errSlowPath // surrogates: encoding/json pairs them
				}
				b = utf8.AppendRune(b, r)
				p.i += 4
			default:
				return "", errSlowPath
			}
		case c < 0x20:
			return "", errSlowPath
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(p.s[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", errSlowPath
			}
			b = append(b, p.s[p.i:p.i+size]...)
			p.i += size
		default:
			b = append(b, c)
			p.i++
		}
	}
	return "", errSlowPath
}

// key reads an object key without escapes and the colon after it.
func (p *attemptParser) key() (string, error) {
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", errSlowPath
	}
	end := p.i + 1
	for end < len(p.s) && p.s[end] != '"' && p.s[end] != '\\' {
		end++
	}
	if end >= len(p.s) || p.s[end] != '"' {
		return "", errSlowPath
	}
	k := p.s[p.i+1 : end]
	p.i = end + 1
	if !p.byte(':') {
		return "", errSlowPath
	}
	return k, nil
}

// int reads a plain integer (what encoding/json writes for an int).
func (p *attemptParser) int() (int64, error) {
	p.ws()
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.s[digits] == '0' && p.i-digits > 1) {
		return 0, errSlowPath
	}
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case '.', 'e', 'E':
			return 0, errSlowPath
		}
	}
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	if err != nil {
		return 0, errSlowPath
	}
	return n, nil
}

// bool reads true or false.
func (p *attemptParser) bool() (bool, error) {
	p.ws()
	switch {
	case len(p.s)-p.i >= 4 && p.s[p.i:p.i+4] == "true":
		p.i += 4
		return true, nil
	case len(p.s)-p.i >= 5 && p.s[p.i:p.i+5] == "false":
		p.i += 5
		return false, nil
	}
	return false, errSlowPath
}

// object reads an object, calling field for each key; an empty object
// calls nothing.
func (p *attemptParser) object(field func(k string) error) error {
	if !p.byte('{') {
		return errSlowPath
	}
	if p.byte('}') {
		return nil
	}
	for {
		k, err := p.key()
		if err != nil {
			return err
		}
		if err := field(k); err != nil {
			return err
		}
		if p.byte('}') {
			return nil
		}
		if !p.byte(',') {
			return errSlowPath
		}
	}
}

// attempt reads a whole attempt into a; false when the input is not the
// codec's form (a may then be partly written).
func (p *attemptParser) attempt(a *Attempt) bool {
	err := p.object(func(k string) (err error) {
		switch k {
		case "id":
			a.ID, err = p.str()
		case "item":
			a.Item, err = p.str()
		case "rollout":
			a.Rollout, err = p.str()
		case "node":
			a.Node, err = p.str()
		case "block":
			a.Block, err = p.str()
		case "action":
			a.Action, err = p.str()
		case "generation":
			a.Generation, err = p.int()
		case "target_version":
			a.TargetVersion, err = p.str()
		case "config_hash":
			a.ConfigHash, err = p.str()
		case "desired_state":
			var s string
			s, err = p.str()
			a.DesiredState = DesiredState(s)
		case "managed_by":
			a.ManagedBy, err = p.str()
		case "fence":
			a.Fence, err = p.int()
		case "deadline":
			// time.Time reads the string as written, escapes and all
			p.ws()
			start := p.i
			var s string
			if s, err = p.str(); err == nil && (len(s) != p.i-start-2 || a.Deadline.UnmarshalText([]byte(s)) != nil) {
				err = errSlowPath
			}
		case "payload":
			err = p.object(func(k string) (err error) {
				switch k {
				case "command":
					a.Payload.Command, err = p.str()
				case "timeout_seconds":
					var n int64
					n, err = p.int()
					if int64(int(n)) != n {
						err = errSlowPath
					}
					a.Payload.TimeoutSeconds = int(n)
				case "config":
					a.Payload.Config, err = p.str()
				case "one_shot":
					a.Payload.OneShot, err = p.bool()
				case "operational":
					a.Payload.Operational, err = p.bool()
				default:
					err = errSlowPath
				}
				return err
			})
		case "delivery":
			a.Delivery, err = p.int()
		default:
			err = errSlowPath // unknown or differently cased: encoding/json's rules
		}
		return err
	})
	if err != nil {
		return false
	}
	p.ws()
	return p.i == len(p.s)
}
