package gitsync

import (
	"strings"
)

// Trailer is one "Key: Value" line of a commit message's last paragraph
// (git interpret-trailers), e.g. Fleetwave-Fence: 7.
type Trailer struct {
	Key, Value string
}

// Trailer keys the hub writes on status commits.
const (
	TrailerFence    = "Fleetwave-Fence"     // the leader's fencing token
	TrailerRollout  = "Fleetwave-Rollout"   // a rollout the commit reports on
	TrailerSyncedAt = "Fleetwave-Synced-At" // the desired commit the status is about
	// TrailerGeneration names the source object and generation of the
	// rollout the commit reports on ("trigger/db@4").
	TrailerGeneration = "Fleetwave-Generation"
)

// StatusMessage returns a commit message: subject, an optional body, and
// the trailers as the last paragraph in the given order. Newlines in a
// subject or a trailer value are replaced by spaces so that the message
// parses back the same; trailers with an empty or invalid key are dropped.
func StatusMessage(subject, body string, trailers ...Trailer) string {
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var b strings.Builder
	b.WriteString(flat(subject))
	b.WriteString("\n")
	if body = strings.TrimSpace(body); body != "" {
		b.WriteString("\n" + body + "\n")
	}
	first := true
	for _, t := range trailers {
		if !validTrailerKey(t.Key) {
			continue
		}
		if first {
			b.WriteString("\n")
			first = false
		}
		b.WriteString(t.Key + ": " + flat(t.Value) + "\n")
	}
	return b.String()
}

// ParseTrailers returns the trailers of message: the lines of its last
// paragraph when every line there is "Key: Value" (the first paragraph,
// the subject, never holds trailers). nil when there are none.
func ParseTrailers(message string) []Trailer {
	paras := strings.Split(strings.TrimSpace(strings.ReplaceAll(message, "\r\n", "\n")), "\n\n")
	if len(paras) < 2 {
		return nil
	}
	var out []Trailer
	for _, line := range strings.Split(strings.TrimSpace(paras[len(paras)-1]), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !validTrailerKey(k) {
			return nil
		}
		out = append(out, Trailer{Key: k, Value: strings.TrimSpace(v)})
	}
	return out
}

func validTrailerKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
