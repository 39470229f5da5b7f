package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/fleetsim"
)

// TestScaleDocsKeepTheAnalysis: the generated section of scale.md is
// replaced, the text around it kept, and results of earlier runs merge
// by fleet size.
func TestScaleDocsKeepTheAnalysis(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "scale.md")
	writeFile(t, md, "# title\n\nanalysis above\n\n"+scaleBegin+"\nold figures\n"+scaleEnd+"\n\nnotes below\n")
	kept := filepath.Join(dir, "scale.json")
	if _, err := mergeResults(kept, []fleetsim.Result{{Nodes: 1000, Validate: time.Second}, {Nodes: 10000, Validate: 3 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	results, err := mergeResults(kept, []fleetsim.Result{{Nodes: 1000, Validate: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Nodes != 1000 || results[0].Validate != 2*time.Second || results[1].Nodes != 10000 {
		t.Fatalf("merged results %+v: want 1000 (the new run) then 10000 (the kept one)", results)
	}
	// a run of several hub replicas is kept beside the one hub's of its size
	three := []fleetsim.HubFigures{{ID: "a", Leader: true}, {ID: "b"}, {ID: "c"}}
	merged, err := mergeResults(filepath.Join(dir, "replicas.json"), []fleetsim.Result{{Nodes: 1000, Validate: time.Second}, {Nodes: 1000, Hubs: three}})
	if err != nil {
		t.Fatal(err)
	}
	if len(merged) != 2 || len(merged[0].Hubs) != 0 || len(merged[1].Hubs) != 3 {
		t.Errorf("merged %+v: want the one hub's run of 1000 nodes, then the three replicas' one", merged)
	}
	if err := writeScaleDocs(dir, sizesOf(results), results); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"analysis above", "notes below", "| 1000 nodes | 10000 nodes |", "2.00 s", `SCALE_NODES="1000 10000"`} {
		if !strings.Contains(s, want) {
			t.Errorf("scale.md lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "old figures") || strings.Count(s, scaleBegin) != 1 {
		t.Errorf("scale.md kept the old section or doubled it:\n%s", s)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "scale.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("scale.svg: %v, starts %.20q", err, svg)
	}
}

func TestDevScaleRefusesBadSizes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"dev", "scale", "--nodes", "1000 x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "Try:") {
		t.Errorf("exit %d, stderr %q: want a usage error (2) with a hint", code, errb.String())
	}
	if code := run(t.Context(), []string{"dev", "simulate", "--hub", "http://127.0.0.1:1", "--nodes", "3"}, &out, &errb); code != 2 {
		t.Errorf("simulate --hub without --tokens: exit %d, want 2", code)
	}
	if code := run(t.Context(), []string{"dev", "scale", "--render"}, &out, &errb); code != 2 {
		t.Errorf("scale --render without --results: exit %d, want 2", code)
	}
}

// TestScaleShapeBySize: `dev scale` runs each size with its own action,
// pollers and protocol unless a flag says otherwise, and those rules are
// the ones docs/scale.json's figures were taken with: a `make scale` on
// a fresh machine runs the scenarios the published table describes.
func TestScaleShapeBySize(t *testing.T) {
	shape := func(n int, args ...string) (time.Duration, int, bool) {
		t.Helper()
		cmd := &cobra.Command{Use: "scale"}
		var sf simFlags
		sf.register(cmd)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		d, p, h2c := sf.shape(cmd, n)
		if d == 0 {
			d = fleetsim.ActionFor(n) // what fleetsim.Run chooses for 0
		}
		if p == 0 {
			p = fleetsim.PollersFor(n, h2c)
		}
		return d, p, h2c
	}
	for _, c := range []struct {
		n       int
		args    []string
		action  time.Duration
		pollers int
		h2c     bool
	}{
		{1000, nil, 500 * time.Millisecond, 1000, false},
		{10000, nil, 500 * time.Millisecond, 10000, false},
		{15000, nil, 750 * time.Millisecond, 15000, false},
		{15001, nil, 750*time.Millisecond + 50*time.Microsecond, 15001, true},
		{100000, nil, 5 * time.Second, 100000, true},
		// flags given win
		{100000, []string{"--duration", "1s", "--pollers", "2000", "--h2c=false"}, time.Second, 2000, false},
		{1000, []string{"--h2c"}, 500 * time.Millisecond, 1000, true},
		{50000, []string{"--h2c=false"}, 2500 * time.Millisecond, 15000, false},
	} {
		d, p, h2c := shape(c.n, c.args...)
		if d != c.action || p != c.pollers || h2c != c.h2c {
			t.Errorf("%d nodes %v: action %v, %d pollers, h2c %v; want %v, %d, %v", c.n, c.args, d, p, h2c, c.action, c.pollers, c.h2c)
		}
	}

	// the published figures: every run of docs/scale.json has the shape
	// its size gets by default (runs recorded before the protocol was say
	// nothing of it)
	results, err := mergeResults(filepath.Join("..", "..", "docs", "scale.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatal("docs/scale.json holds no run")
	}
	for _, r := range results {
		d, p, h2c := shape(r.Nodes)
		if r.ActionDuration != d || r.Pollers != p {
			t.Errorf("docs/scale.json, %d nodes: action %v, %d pollers; a `make scale` of that size runs %v, %d", r.Nodes, r.ActionDuration, r.Pollers, d, p)
		}
		if want := map[bool]string{true: "h2c", false: "HTTP/1.1"}[h2c]; r.Protocol != "" && r.Protocol != want {
			t.Errorf("docs/scale.json, %d nodes: protocol %s; a `make scale` of that size speaks %s", r.Nodes, r.Protocol, want)
		}
	}
}
