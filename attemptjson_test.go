package fleetwave

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The codec's promise: the bytes and the values of encoding/json. Each
// test compares it with encoding/json on attemptFields (the same struct
// without the codec's methods).

// randString draws strings that exercise JSON's escaping: HTML
// characters, control characters, quotes, backslashes, multi-byte runes,
// U+2028/U+2029 and invalid UTF-8.
func randString(r *rand.Rand) string {
	pieces := []string{"", "a", "web-7", "v1.2.3", " ", "<", ">", "&", `"`, `\`, "/", "\n", "\t", "\r",
		"\b", "\f", "\x00", "\x1f", "\x7f", "é", "日本", "\u2028", "\u2029", "\xff", "\xe2\x82", "😀",
		"key: value\n", "{{ node.id }}", "sha256:0123abcd"}
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randInt(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return int64(r.IntN(1000))
	case 2:
		return -int64(r.IntN(1000))
	default:
		return r.Int64() - r.Int64()
	}
}

func randAttempt(r *rand.Rand) Attempt {
	var deadline time.Time
	switch r.IntN(5) {
	case 0: // the zero time, as an attempt template holds
	case 1:
		deadline = time.UnixMilli(1_700_000_000_000 + r.Int64N(1e9)).UTC()
	case 2:
		deadline = time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("", 3600*(r.IntN(27)-13)))
	case 3:
		deadline = time.Date(2026, 12, 6, 10, 0, 0, 0, time.FixedZone("X", -5*3600))
	default:
		deadline = time.Unix(r.Int64N(4e9), 0)
	}
	return Attempt{
		ID: randString(r), Item: randString(r), Rollout: randString(r), Node: randString(r),
		Block: randString(r), Action: randString(r), Generation: randInt(r),
		TargetVersion: randString(r), ConfigHash: randString(r), DesiredState: DesiredState(randString(r)),
		ManagedBy: randString(r), Fence: randInt(r), Deadline: deadline,
		Payload: AttemptPayload{Command: randString(r), TimeoutSeconds: int(randInt(r)), Config: randString(r),
			OneShot: r.IntN(2) == 0, Operational: r.IntN(2) == 0},
		Delivery: randInt(r),
	}
}

func TestAttemptEncodesAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		a := randAttempt(r)
		got, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(attemptFields(a))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("attempt %d:\n got %s\nwant %s", i, got, want)
		}
		// json.Marshal escapes what a MarshalJSON returns again: the
		// codec's own bytes must be right without it
		if got, err = a.AppendJSON(nil); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("attempt %d, AppendJSON:\n got %s (%v)\nwant %s", i, got, err, want)
		}
		// in a slice, as a poll's answer carries them
		got, _ = json.Marshal([]Attempt{a, {}})
		want, _ = json.Marshal([]attemptFields{attemptFields(a), {}})
		if !bytes.Equal(got, want) {
			t.Fatalf("attempt %d in a slice:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestAttemptWithADeadlineBeyondRFC3339DoesNotEncode(t *testing.T) {
	for _, d := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, err := json.Marshal(Attempt{Deadline: d})
		_, want := json.Marshal(attemptFields{Deadline: d})
		if err == nil || want == nil {
			t.Fatalf("deadline %v: codec error %v, encoding/json's %v; want both", d, err, want)
		}
	}
}

// sameAttempt compares two decoded attempts: the deadlines as instants with
// the same offset (time.FixedZone makes a new *Location each time).
func sameAttempt(a, b Attempt) bool {
	_, oa := a.Deadline.Zone()
	_, ob := b.Deadline.Zone()
	if !a.Deadline.Equal(b.Deadline) || oa != ob || a.Deadline.IsZero() != b.Deadline.IsZero() {
		return false
	}
	a.Deadline, b.Deadline = time.Time{}, time.Time{}
	return a == b
}

// decodeBoth decodes data with the codec (UnmarshalJSON through
// json.Unmarshal, and DecodeAttempt) and with encoding/json, each into a
// copy of start, and fails t when they disagree on the value or on whether
// it is an error.
func decodeBoth(t *testing.T, data []byte, start Attempt) {
	t.Helper()
	fast, slow, direct := start, attemptFields(start), start
	errFast := json.Unmarshal(data, &fast)
	errSlow := json.Unmarshal(data, &slow)
	if (errFast == nil) != (errSlow == nil) {
		t.Fatalf("%q: codec error %v, encoding/json's %v", data, errFast, errSlow)
	}
	if errSlow == nil && !sameAttempt(fast, Attempt(slow)) {
		t.Fatalf("%q:\n codec %+v\n  json %+v", data, fast, Attempt(slow))
	}
	errDirect := DecodeAttempt(string(data), &direct)
	if (errDirect == nil) != (errSlow == nil) {
		t.Fatalf("%q: DecodeAttempt error %v, encoding/json's %v", data, errDirect, errSlow)
	}
	if errSlow == nil && !sameAttempt(direct, Attempt(slow)) {
		t.Fatalf("%q:\n DecodeAttempt %+v\n          json %+v", data, direct, Attempt(slow))
	}
}

// mutations are edits of an encoded attempt that the codec's parser must
// either read as encoding/json does or hand over to it.
var mutations = []func(r *rand.Rand, s string) string{
	func(r *rand.Rand, s string) string { return s },
	func(r *rand.Rand, s string) string { return " \n" + strings.ReplaceAll(s, ",\"", " ,\t\"") + "\r\n" },
	func(r *rand.Rand, s string) string { return strings.ReplaceAll(s, `":`, `" : `) },
	func(r *rand.Rand, s string) string { return strings.Replace(s, `"id"`, `"ID"`, 1) },
	func(r *rand.Rand, s string) string {
		return strings.Replace(s, `{"id"`, `{"extra":[1,{"a":null}],"id"`, 1)
	},
	func(r *rand.Rand, s string) string { return setValue(s, "fence", "null") },
	func(r *rand.Rand, s string) string { return setValue(s, "node", "null") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "1e3") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "1.0") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", `"7"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "01") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "-0") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "-") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "+1") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "99999999999999999999") },
	func(r *rand.Rand, s string) string { return setValue(s, "generation", "true") },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"\/\u00e9\u0041\u00E9\ud83d\ude00"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"\ud800x"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"\u12"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"\u+123"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"\x"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "block", "\"\t\"") },
	func(r *rand.Rand, s string) string { return setValue(s, "block", "\"\xff\"") },
	func(r *rand.Rand, s string) string { return setValue(s, "block", `"a\"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "deadline", `"\u0032026-12-06T10:00:00Z"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "deadline", "null") },
	func(r *rand.Rand, s string) string { return setValue(s, "deadline", `"2026-12-06 10:00:00Z"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "deadline", `"2026-12-06T10:00:00.5+01:00"`) },
	func(r *rand.Rand, s string) string { return setValue(s, "deadline", "0") },
	func(r *rand.Rand, s string) string {
		return strings.Replace(s, `"payload":{`, `"payload":{"Command":"c",`, 1)
	},
	func(r *rand.Rand, s string) string { return setValue(s, "payload", "null") },
	func(r *rand.Rand, s string) string { return setValue(s, "payload", "{}") },
	func(r *rand.Rand, s string) string { return setValue(s, "payload", `{"one_shot":1}`) },
	func(r *rand.Rand, s string) string { return setValue(s, "payload", `{"one_shot":tru}`) },
	func(r *rand.Rand, s string) string {
		return setValue(s, "payload", `{"operational":false,"timeout_seconds":-4}`)
	},
	func(r *rand.Rand, s string) string {
		return setValue(s, "payload", `{"timeout_seconds":3,"timeout_seconds":4}`)
	},
	func(r *rand.Rand, s string) string { return setValue(s, "payload", `{"command":"a",}`) },
	func(r *rand.Rand, s string) string { return setValue(s, "payload", `{"command":"a" "config":"b"}`) },
	func(r *rand.Rand, s string) string { return strings.Replace(s, `{"id"`, `{"id":"first","id"`, 1) },
	func(r *rand.Rand, s string) string { return strings.Replace(s, `"item"`, `"it\u0065m"`, 1) },
	func(r *rand.Rand, s string) string { return strings.TrimSuffix(s, "}") + ",}" },
	func(r *rand.Rand, s string) string { return s + "x" },
	func(r *rand.Rand, s string) string { return s + " {}" },
	func(r *rand.Rand, s string) string { return s[:r.IntN(len(s))] },
	func(r *rand.Rand, s string) string { return "null" },
	func(r *rand.Rand, s string) string { return "{}" },
	func(r *rand.Rand, s string) string { return "[]" },
}

// setValue replaces the value of top-level key k in the encoding s (the
// payload object as a whole).
func setValue(s, k, v string) string {
	re := regexp.MustCompile(`"` + k + `":("(?:[^"\\]|\\.)*"|-?[0-9]+|\{[^}]*\})`)
	loc := re.FindStringSubmatchIndex(s)
	if loc == nil {
		return s
	}
	return s[:loc[2]] + v + s[loc[3]:]
}

func TestAttemptDecodesAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		a := randAttempt(r)
		enc, err := json.Marshal(attemptFields(a))
		if err != nil {
			t.Fatal(err)
		}
		start := Attempt{}
		if r.IntN(2) == 0 {
			start = randAttempt(r) // fields the input leaves out stay
		}
		decodeBoth(t, []byte(mutations[r.IntN(len(mutations))](r, string(enc))), start)
	}
}

// TestAttemptDecodesItsOwnEncoding: what the hub writes, the agent reads
// back unchanged, by the codec's own parser (never handed over to
// encoding/json). Invalid UTF-8 is left out: encoding/json writes it as
// U+FFFD, so it cannot come back.
func TestAttemptDecodesItsOwnEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	valid := func(s string) string { return strings.ToValidUTF8(s, "\ufffd") }
	for range 20000 {
		a := randAttempt(r)
		for _, f := range []*string{&a.ID, &a.Item, &a.Rollout, &a.Node, &a.Block, &a.Action, &a.TargetVersion,
			&a.ConfigHash, &a.ManagedBy, &a.Payload.Command, &a.Payload.Config} {
			*f = valid(*f)
		}
		a.DesiredState = DesiredState(valid(string(a.DesiredState)))
		enc, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var back Attempt
		if !(&attemptParser{s: string(enc)}).attempt(&back) {
			t.Fatalf("%s: the codec's parser handed its own encoding over", enc)
		}
		if !sameAttempt(back, a) {
			t.Fatalf("%s:\n back %+v\n want %+v", enc, back, a)
		}
	}
}

func FuzzAttemptJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 20 {
		enc, _ := json.Marshal(attemptFields(randAttempt(r)))
		f.Add(mutations[i%len(mutations)](r, string(enc)))
	}
	f.Fuzz(func(t *testing.T, s string) {
		decodeBoth(t, []byte(s), Attempt{})
	})
}

func BenchmarkAttemptJSON(b *testing.B) {
	a := Attempt{ID: "web-g3.42.1", Item: "web-g3.42", Rollout: "web-g3", Node: "node-00042", Block: "web",
		Action: "upgrade", Generation: 3, TargetVersion: "v3", ConfigHash: "sha256:0123456789abcdef",
		DesiredState: "running", Fence: 7, Deadline: time.UnixMilli(1_700_000_000_000).UTC(),
		Payload: AttemptPayload{Command: "deploy web", TimeoutSeconds: 60,
			Config: "node: node-00042\nregion: eu-1\nversion: v3\n"}, Delivery: 12}
	enc, _ := json.Marshal(attemptFields(a))
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"encode/codec", func() error { _, err := a.AppendJSON(make([]byte, 0, 512)); return err }},
		{"encode/encoding-json", func() error { _, err := json.Marshal(attemptFields(a)); return err }},
		{"decode/codec", func() error { var x Attempt; return DecodeAttempt(string(enc), &x) }},
		{"decode/encoding-json", func() error { var x attemptFields; return json.Unmarshal(enc, &x) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
