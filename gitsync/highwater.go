package gitsync

import (
	"sort"
	"sync/atomic"

	"github.com/fleetwave/fleetwave"
)

// seededMarkHash marks a high-water mark restored by SeedHighWater: its
// generation is known, the content it was returned for is not.
const seededMarkHash = "seeded"

// HighWater returns the highest generation returned so far per object
// (objects since deleted included). The hub writes them into the status
// (status/generation_marks.yaml) so that SeedHighWater can restore them
// when the mirror directory, which holds them durably, is lost.
func (r *Repo) HighWater() map[fleetwave.ObjectKey]int64 {
	marks, _, _ := r.HighWaterChanges(0)
	return marks
}

// HighWaterChanges returns the marks as HighWater does, to a caller that
// keeps a copy: with whole false, changed holds only the marks set since
// version since (nil when none was: version is since), to apply to the
// copy; with whole true (since 0, or from before the log of changes, or
// another Repo's) it holds them all. Versions are never 0.
// At 100,000 nodes a whole copy took 0.7 s under the mirror's lock on a
// loaded hub, at every status commit after a commit.
func (r *Repo) HighWaterChanges(since uint64) (changed map[fleetwave.ObjectKey]int64, version uint64, whole bool) {
	defer r.lock("HighWaterChanges")()
	g := r.gens
	switch {
	case since == g.version:
		return nil, since, false
	case since == 0 || since < g.logFrom || since > g.version:
		out := make(map[fleetwave.ObjectKey]int64, len(g.marks.Objects))
		for k, m := range g.marks.Objects {
			out[k] = m.Gen
		}
		return out, g.version, true
	}
	i := sort.Search(len(g.changes), func(i int) bool { return g.changes[i].version > since })
	out := make(map[fleetwave.ObjectKey]int64, len(g.changes)-i)
	for _, c := range g.changes[i:] {
		out[c.key] = g.marks.Objects[c.key].Gen
	}
	return out, g.version, false
}

// nextMarksVersion hands out the versions of HighWaterChanges: unique in the
// process, so a version of a Repo or genCache since replaced never
// matches the new one's.
var nextMarksVersion atomic.Uint64

// SeedHighWater raises the high-water marks to marks (never lowers one) and
// persists them. The hub calls it right after Open and before the first
// Generations when the mirror was re-cloned (its marks file is gone), with
// the marks it last wrote to status/summary.yaml.
//
// The content an object had at a seeded mark is unknown, so: an object
// whose generation recomputed from the history equals or exceeds its mark
// keeps it (the usual case: same history, new mirror); one below its mark
// (the history was rewritten while the mirror was lost) gets the mark plus
// one, a new generation, even if its content is the one returned at the
// mark. Without seeding, a lost mirror means generations restart from the
// pure history, which only matters after a force-push (they can then go
// below what was returned before).
func (r *Repo) SeedHighWater(marks map[fleetwave.ObjectKey]int64) error {
	defer r.lock("SeedHighWater")()
	g := r.gens
	changed := false
	for k, gen := range marks {
		if gen <= 0 {
			continue
		}
		if m, ok := g.marks.Objects[k]; ok && m.Gen >= gen {
			continue
		}
		g.setMark(k, mark{Gen: gen, Hash: seededMarkHash})
		changed = true
	}
	if !changed {
		return nil
	}
	// the seeded marks must be applied to the next state computed, whatever
	// commit it is: forget the tip they were taken at and cached states
	g.marks.Tip = ""
	clear(g.states)
	g.order = nil
	return g.saveMarks()
}
