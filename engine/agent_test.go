package engine

import (
	"strings"
	"testing"
)

// TestIdHeadKeepsTheIdAndNoPayload: what the log says of an unreadable
// queue entry stops at the first character an attempt id cannot hold.
func TestIdHeadKeepsTheIdAndNoPayload(t *testing.T) {
	for v, want := range map[string]string{
		"web-g2.17.1\n7\n1700000000000\n{\"payload\":\"secret\"}": "web-g2.17.1",
		"web-g2.17.1":       "web-g2.17.1",
		"":                  "",
		"{\"token\":\"x\"}": "",
	} {
		if got := idHead(v); got != want {
			t.Errorf("idHead(%q) = %q, want %q", v, got, want)
		}
	}
	long := strings.Repeat("a", 200)
	if got := idHead(long); len(got) != 80 {
		t.Errorf("idHead of 200 id characters kept %d, want 80", len(got))
	}
}
