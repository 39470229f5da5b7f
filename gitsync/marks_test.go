package gitsync

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fleetwave/fleetwave"
)

func TestAppendMarksReadsBackAsJSON(t *testing.T) {
	cases := map[string]marks{
		"empty":           {},
		"tip only":        {Tip: "0123456789abcdef0123456789abcdef01234567"},
		"objects only":    {Objects: map[fleetwave.ObjectKey]mark{"nodes/a": {Gen: 1}}},
		"a save's number": {Seq: 42, Tip: "t", Objects: map[fleetwave.ObjectKey]mark{"nodes/a": {Gen: 1, Hash: "h"}}},
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

// reloaded returns the marks a genCache opened on g's file reads.
func reloaded(t *testing.T, g *genCache) marks {
	t.Helper()
	back := newGenCache(g.file)
	if err := back.loadMarks(); err != nil {
		t.Fatal(err)
	}
	back.marks.Seq = 0
	return back.marks
}

func sameMarks(t *testing.T, step string, got marks, g *genCache) {
	t.Helper()
	want := g.marks
	want.Seq = 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: read back tip %q and %d marks, saved tip %q and %d marks", step, got.Tip, len(got.Objects), want.Tip, len(want.Objects))
	}
}

// TestMarksJournalReadsBackWhatWasSaved saves marks changed at random, a
// few or many at a time, and reads them back after every save: from the
// journal's lines, from a base the journal was folded into, and from a
// base beside a journal a crash left before its removal.
func TestMarksJournalReadsBackWhatWasSaved(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	g := newGenCache(filepath.Join(t.TempDir(), marksFile))
	appended, rewritten := 0, 0
	for step := range 1500 {
		n := 1 + r.Intn(3)
		if r.Intn(50) == 0 {
			n = 400 // most marks: the base is rewritten
		}
		for range n {
			g.setMark(fleetwave.ObjectKey(fmt.Sprintf("nodes/n%03d", r.Intn(500))), mark{Gen: int64(r.Intn(9)), Hash: fmt.Sprint(r.Intn(4))})
		}
		g.marks.Tip = []string{"", "aaaa", "bbbb"}[r.Intn(3)] // an empty tip is saved too (SeedHighWater)
		before := g.journalLines
		journal, _ := os.ReadFile(g.file + journalSuffix)
		if err := g.saveMarks(); err != nil {
			t.Fatal(err)
		}
		if g.journalLines > before {
			appended++
		} else {
			rewritten++
			if r.Intn(3) == 0 && len(journal) > 0 {
				// a crash after the base's rename, before the journal's removal
				if err := os.WriteFile(g.file+journalSuffix, journal, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		sameMarks(t, fmt.Sprintf("step %d", step), reloaded(t, g), g)
	}
	if appended < 1000 || rewritten < 10 {
		t.Fatalf("%d saves appended a line, %d rewrote the base: the test no longer covers both", appended, rewritten)
	}
}

// TestMarksJournalCutShortByACrash: a line cut short ends the replay; the
// marks read back are those of the last whole save, and the next save
// rewrites the base, so no line is ever appended after a cut one.
func TestMarksJournalCutShortByACrash(t *testing.T) {
	g := newGenCache(filepath.Join(t.TempDir(), marksFile))
	g.setMark("nodes/a", mark{Gen: 1, Hash: "x"})
	g.marks.Tip = "aaaa"
	if err := g.saveMarks(); err != nil {
		t.Fatal(err)
	}
	saved := reloaded(t, g)
	g.setMark("nodes/b", mark{Gen: 2, Hash: "y"})
	if err := g.saveMarks(); err != nil {
		t.Fatal(err)
	}
	journal, err := os.ReadFile(g.file + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.file+journalSuffix, journal[:len(journal)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	back := newGenCache(g.file)
	if err := back.loadMarks(); err != nil {
		t.Fatal(err)
	}
	back.marks.Seq = 0
	if !reflect.DeepEqual(back.marks, saved) {
		t.Fatalf("read back %+v, want the first save's %+v", back.marks, saved)
	}
	back.setMark("nodes/c", mark{Gen: 3, Hash: "z"})
	if err := back.saveMarks(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.file + journalSuffix); !os.IsNotExist(err) {
		t.Fatalf("the journal after the save that follows a cut line: %v, want it folded into the base", err)
	}
	sameMarks(t, "after the rewrite", reloaded(t, back), back)
}
