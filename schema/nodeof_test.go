package schema

import (
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"

	"github.com/fleetwave/fleetwave"
)

// TestNodeOfMatchesUnmarshal: the Node nodeOf builds from plain data is
// the one json.Unmarshal decodes from the data's canonical JSON, for
// random nodes of every field (empty maps and lists, escapes, non-ASCII
// text); what it does not take as Unmarshal would, it refuses, and the
// fast path then decodes the JSON.
func TestNodeOfMatchesUnmarshal(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	texts := []string{"", "a", "node-000001", "us-east", "tab\there", `quote " and \ backslash`, "line\nbreak",
		"ünïcode ✓", "\u2028", "<&>", "\x01"}
	text := func() string { return texts[rnd.Intn(len(texts))] }
	strMap := func() map[string]any {
		m := map[string]any{}
		for range rnd.Intn(4) {
			m[[]string{"env", "rack", "region", "z", ""}[rnd.Intn(5)]] = text()
		}
		return m
	}
	strList := func() []any {
		l := []any{}
		for range rnd.Intn(4) {
			l = append(l, text())
		}
		return l
	}
	taken := 0
	for i := range 5000 {
		data := map[string]any{"kind": "node", "name": text()}
		for _, f := range []string{"organization", "workspace", "criticality", "labels", "data_addresses", "maintenance_windows", "capabilities", "drain"} {
			if rnd.Intn(2) == 0 {
				continue
			}
			switch f {
			case "labels", "data_addresses":
				data[f] = strMap()
			case "maintenance_windows", "capabilities":
				data[f] = strList()
			case "drain":
				data[f] = rnd.Intn(2) == 0
			default:
				data[f] = text()
			}
		}
		canon, ok := appendCanonical(nil, data)
		if !ok {
			t.Fatalf("case %d: no canonical JSON for %#v", i, data)
		}
		var want fleetwave.Node
		if err := json.Unmarshal(canon, &want); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got, ok := nodeOf(data)
		if !ok {
			t.Fatalf("case %d: refused %s", i, canon)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("case %d: %s\nnodeOf    %#v\nUnmarshal %#v", i, canon, *got, want)
		}
		taken++
	}
	if taken != 5000 {
		t.Fatalf("%d of 5000 taken", taken)
	}

	for name, data := range map[string]map[string]any{
		"a field Unmarshal matches without regard to case": {"kind": "node", "Name": "n1"},
		"a field Node does not have":                       {"kind": "node", "name": "n1", "owner": "x"},
		"a number where a string is":                       {"kind": "node", "name": "n1", "labels": map[string]any{"rack": int64(3)}},
		"a string where a list is":                         {"kind": "node", "name": "n1", "capabilities": "gpu"},
		"a string where a bool is":                         {"kind": "node", "name": "n1", "drain": "true"},
		"text that is not UTF-8":                           {"kind": "node", "name": "n\xff1"},
		"a label key that is not UTF-8":                    {"kind": "node", "name": "n1", "labels": map[string]any{"r\xffck": "a"}},
	} {
		if n, ok := nodeOf(data); ok {
			t.Errorf("%s: taken as %#v", name, *n)
		}
	}
}
