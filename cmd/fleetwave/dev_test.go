package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
