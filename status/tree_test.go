package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// sameBytes fails unless render writes the bytes encode does.
func sameBytes(t *testing.T, what string, encode, render func() ([]byte, error)) {
	t.Helper()
	want, err := encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := render()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: bytes differ at %d", what, firstDiff(got, want))
	}
}

// TestRenderNodeIsEncodeNode: RenderNode writes EncodeNode's bytes for
// random nodes (every field set, left out, nil or empty; strings YAML
// reads as other types, line breaks, invalid UTF-8) and for the shapes a
// hub writes most.
func TestRenderNodeIsEncodeNode(t *testing.T) {
	check := func(what string, n Node) {
		t.Helper()
		sameBytes(t, what, func() ([]byte, error) { return EncodeNode(n) }, func() ([]byte, error) { return RenderNode(n) })
	}
	for seed := range uint64(500) {
		g := gen{r: rand.New(rand.NewPCG(seed, 29))}
		var n Node
		g.fill(reflect.ValueOf(&n).Elem(), 0)
		check(fmt.Sprintf("node of seed %d", seed), n)
	}
	f, tr := false, true
	for _, n := range []Node{
		{Node: "n1"},
		{Node: "n1", Instances: []Instance{}},
		{Node: "n1", Reported: true, Instances: []Instance{}},
		{Node: "n1", Reported: true, Capabilities: []string{}, Instances: []Instance{{Block: "web", Generation: 3, Version: "1.0", State: "present", ManagedBy: "web"}}, Drain: &f},
		{Node: "n1", Drain: &tr, UnknownNode: true, ObservedVersions: map[string][]string{"web": nil, "db": {}, "api": {"1", "1.0", "2"}}},
		{Node: "n1", Waiting: []WaitingItem{{Action: "install", Block: "web", Item: "web-g1.1", Rollout: "web-g1", Status: "pending", Reason: "wave_gate"}},
			Held: []Held{{Block: "web", BRC: "web", Reason: "cli_managed"}}, Drift: []Drift{{Kind: "stale_node", Node: "n1"}}},
	} {
		check(fmt.Sprintf("%+v", n), n)
	}
}

// TestRenderRolloutPartIsEncodeRolloutPart: RenderRolloutPart writes
// EncodeRolloutPart's bytes for random parts (every item field set or
// left out, times zero, in UTC and in another zone) and a rollout's.
func TestRenderRolloutPartIsEncodeRolloutPart(t *testing.T) {
	check := func(what string, p RolloutPart) {
		t.Helper()
		sameBytes(t, what, func() ([]byte, error) { return EncodeRolloutPart(p) }, func() ([]byte, error) { return RenderRolloutPart(p) })
	}
	for seed := range uint64(300) {
		g := gen{r: rand.New(rand.NewPCG(seed, 31))}
		var p RolloutPart
		g.fill(reflect.ValueOf(&p).Elem(), 0)
		p.Format = 0
		check(fmt.Sprintf("part of seed %d", seed), p)
	}
	_, parts := benchRollout(2500).Split()
	for _, p := range parts {
		check(fmt.Sprintf("part %d", p.Part), p)
	}
}

func BenchmarkRenderRolloutPart(b *testing.B) {
	_, parts := benchRollout(1000 + PartItems).Split()
	p := parts[0]
	b.Run("typed", func(b *testing.B) {
		for b.Loop() {
			if _, err := RenderRolloutPart(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			j, err := json.Marshal(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := RenderJSON(j); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRenderNode(b *testing.B) {
	f := false
	n := Node{Node: "node-00042", Reported: true, AgentVersion: "1.4.2", Capabilities: []string{"network_shuffle"}, Drain: &f,
		Instances:        []Instance{{Block: "web", Generation: 7, Version: "2.3.1", State: "present", ManagedBy: "web", ConfigHash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}},
		ObservedVersions: map[string][]string{"web": {"2.3.0", "2.3.1"}}}
	b.Run("typed", func(b *testing.B) {
		for b.Loop() {
			if _, err := RenderNode(n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			j, err := NodeJSON(n)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := RenderJSON(j); err != nil {
				b.Fatal(err)
			}
		}
	})
}
