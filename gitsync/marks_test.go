package gitsync

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fleetwave/fleetwave"
)

func TestAppendMarksReadsBackAsJSON(t *testing.T) {
	cases := map[string]marks{
		"empty":        {},
		"tip only":     {Tip: "0123456789abcdef0123456789abcdef01234567"},
		"objects only": {Objects: map[fleetwave.ObjectKey]mark{"nodes/a": {Gen: 1}}},
		"keys and hashes that need escaping": {Tip: "t", Objects: map[fleetwave.ObjectKey]mark{
			"nodes/a":              {Gen: 3, Hash: "ab12"},
			`nodes/q"uote\back`:    {Gen: 1, Hash: seededMarkHash},
			"nodes/<html>&amp":     {Gen: 7},
			"nodes/tab\tnewline\n": {Gen: 2, Hash: "x"},
			"nodes/ünï€ode":        {Gen: 9, Hash: "y"},
		}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			got := appendMarks(nil, &m)
			var back marks
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("appendMarks wrote invalid JSON %s: %v", got, err)
			}
			var want marks
			std, _ := json.Marshal(m)
			if err := json.Unmarshal(std, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, want) {
				t.Fatalf("appendMarks read back as %+v, encoding/json's as %+v", back, want)
			}
			if len(m.Objects) <= 1 && string(got) != string(std) {
				t.Fatalf("appendMarks = %s, encoding/json = %s", got, std)
			}
		})
	}
}
