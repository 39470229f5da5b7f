package hub

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave"
)

// sentItems remembers, per block instance, the item the engine created from
// a plan of this hub's leader term, so that plans made again soon after
// leave it out. During a rollout every reconcile plans its unfinished
// items again (the observations do not show them done yet) and the
// engine, finding each instance busy, creates nothing: 10,000 such items
// cost Redis about 0.3 s of CPU in one script, which holds every other
// client (dispatch, results, polls) for that long. An item the engine
// created is left out of the plans of the next ttl when it is the same
// (same event, action, generation, config, version, state). After that
// ttl it is checked rather than sent: while the instance's active item is
// still the one the engine created for it, the engine would create
// nothing (that item covers the plan), so it is left out for another ttl;
// otherwise (the item ended, or anything of it differs) it is sent again
// and the engine decides as before, and when it creates nothing for it,
// it is left out for another ttl. So at most the re-creation of an item
// whose instance the engine would act on again (an install that ended
// while its observation still shows the old state) waits for ttl, never
// longer. An item never created (its instance busy with another event's)
// is sent with every plan, so it starts as soon as the instance is free.
// Items of split groups are always sent: a group is created whole or not
// at all.
//
// An entry is stamped when the engine answered (creating 100,000 items
// takes a minute). An item the engine created nothing for and that has no
// entry (a new leader term starts without any) is adopted when its
// instance's active item is an item of its event's rollout: that item
// covers it as one created moments ago would.
//
// ttl is the reconcile interval, or four times the last reconcile when
// that is longer: at 100,000 nodes a reconcile outlasted the interval, and
// every one sent the 90,000 unfinished items again (45 create scripts,
// 40-68 s of Redis time that held back results and dispatch). Checking
// the items past ttl reads two short fields per instance instead: sending
// them again still took 20-70 s of a 100k reconcile.
type sentItems struct {
	mu    sync.Mutex
	fence int64
	ttl   time.Duration // the reconcile interval
	took  time.Duration // the last reconcile
	items map[fleetwave.InstanceKey]sentItem
	// creating holds the events a createPlanned is handing to the engine:
	// the push step and a reconcile plan a pushed BRC at the same moment,
	// and at 100,000 nodes the reconcile sent the same 100,000 items again
	// while the push step's creation ran (82 s of create scripts, for
	// nothing). The second leaves the event to the first; what it planned
	// that the first did not (a node that reported since) goes with the
	// next reconcile.
	creating map[string]bool
}

// begin claims the creation of spec's event; false when another
// createPlanned has it (end releases it).
func (s *sentItems) begin(spec fleetwave.RolloutSpec) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := eventOf(spec)
	if s.creating[ev] {
		return false
	}
	if s.creating == nil {
		s.creating = map[string]bool{}
	}
	s.creating[ev] = true
	return true
}

func (s *sentItems) end(spec fleetwave.RolloutSpec) {
	s.mu.Lock()
	delete(s.creating, eventOf(spec))
	s.mu.Unlock()
}

// span is the ttl in force (see sentItems); s.mu held.
func (s *sentItems) span() time.Duration { return max(s.ttl, 4*s.took) }

// reconciled records how long the last reconcile took.
func (s *sentItems) reconciled(took time.Duration) {
	s.mu.Lock()
	s.took = took
	s.mu.Unlock()
}

type sentItem struct {
	event, digest string
	item          string // the item the engine created ("" when unknown)
	at            time.Time
}

// eventOf names a spec's trigger event (one event, one rollout).
func eventOf(spec fleetwave.RolloutSpec) string {
	return spec.BaseID + "\n" + strconv.FormatInt(spec.Source.Generation, 10) + "\n" + string(spec.Source.Kind)
}

func digestOf(it fleetwave.ItemSpec) string {
	return strings.Join([]string{it.Action, strconv.FormatInt(it.Generation, 10), it.ConfigHash, it.TargetVersion,
		string(it.DesiredState), it.SkipReason, it.BlockReason, it.BlockMessage}, "\n")
}

// filter returns spec without the items created from it in the last ttl
// under fence, how many it left out, and which of the items it kept were
// created from it before ttl (their instance and item): check them with
// stillActive before sending them.
func (s *sentItems) filter(fence int64, spec fleetwave.RolloutSpec, now time.Time) (fleetwave.RolloutSpec, int, map[fleetwave.InstanceKey]string) {
	if spec.Once || s.ttl <= 0 {
		return spec, 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != fence {
		return spec, 0, nil
	}
	event := eventOf(spec)
	kept := make([]fleetwave.ItemSpec, 0, len(spec.Items))
	var again map[fleetwave.InstanceKey]string
	for _, it := range spec.Items {
		if it.Group == "" {
			if e, ok := s.items[it.Instance()]; ok && e.event == event && e.digest == digestOf(it) {
				if now.Sub(e.at) < s.span() {
					continue
				}
				if e.item != "" {
					if again == nil {
						again = map[fleetwave.InstanceKey]string{}
					}
					again[it.Instance()] = e.item
				}
			}
		}
		kept = append(kept, it)
	}
	left := len(spec.Items) - len(kept)
	spec.Items = kept
	return spec, left, again
}

// stillActive returns spec without the items of again (filter's) whose
// instance's active item is still the one created for them (active: the
// active item of each instance that has one), and how many it left out;
// those are left out for another ttl.
func (s *sentItems) stillActive(fence int64, spec fleetwave.RolloutSpec, again, active map[fleetwave.InstanceKey]string, now time.Time) (fleetwave.RolloutSpec, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != fence {
		return spec, 0
	}
	kept := make([]fleetwave.ItemSpec, 0, len(spec.Items))
	for _, it := range spec.Items {
		k := it.Instance()
		if id, ok := again[k]; ok && id != "" && active[k] == id {
			if e, ok := s.items[k]; ok && e.item == id {
				e.at = now
				s.items[k] = e
			}
			continue
		}
		kept = append(kept, it)
	}
	left := len(spec.Items) - len(kept)
	spec.Items = kept
	return spec, left
}

// created records the items the engine created from spec (created holds
// their indexes in spec.Items, ids their item ids), under fence, and again
// those it created earlier and created nothing for now.
func (s *sentItems) created(fence int64, spec fleetwave.RolloutSpec, created []int, ids []string, now time.Time) {
	if spec.Once || s.ttl <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != fence || s.items == nil {
		s.fence, s.items = fence, map[fleetwave.InstanceKey]sentItem{}
	}
	event := eventOf(spec)
	newID := make([]string, len(spec.Items))
	isNew := make([]bool, len(spec.Items))
	for j, i := range created {
		if i >= 0 && i < len(spec.Items) {
			isNew[i] = true
			if j < len(ids) {
				newID[i] = ids[j]
			}
		}
	}
	for i, it := range spec.Items {
		k, d := it.Instance(), digestOf(it)
		e, ok := s.items[k]
		switch {
		case isNew[i]:
			s.items[k] = sentItem{event: event, digest: d, item: newID[i], at: now}
		case ok && it.Group == "" && e.event == event && e.digest == d:
			e.at = now
			s.items[k] = e
		}
	}
}

// unknown returns the instances of spec's items (not of split groups)
// that have no entry under fence.
func (s *sentItems) unknown(fence int64, spec fleetwave.RolloutSpec) []fleetwave.InstanceKey {
	if spec.Once || s.ttl <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != fence {
		return nil
	}
	var out []fleetwave.InstanceKey
	for _, it := range spec.Items {
		if _, ok := s.items[it.Instance()]; !ok && it.Group == "" {
			out = append(out, it.Instance())
		}
	}
	return out
}

// adopt records, for the items of spec without an entry whose instance's
// active item (active) is an item of rollout (spec's event's), that item
// as created from spec: the engine created nothing for them because that
// item covers them, as it does for the items it created moments ago. An
// item held by another event's item stays without an entry, so it is sent
// with every plan.
func (s *sentItems) adopt(fence int64, spec fleetwave.RolloutSpec, rollout string, active map[fleetwave.InstanceKey]string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != fence || rollout == "" {
		return
	}
	event := eventOf(spec)
	for _, it := range spec.Items {
		k := it.Instance()
		id := active[k]
		if _, ok := s.items[k]; ok || it.Group != "" {
			continue
		}
		if of, _, isItem := cutLastNumber(id); !isItem || of != rollout {
			continue
		}
		s.items[k] = sentItem{event: event, digest: digestOf(it), item: id, at: now}
	}
}

// prune drops the entries older than twice the ttl (one sent again after
// ttl is recorded again by created, unless it was dropped meanwhile).
func (s *sentItems) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.items {
		if now.Sub(e.at) >= 2*s.span() {
			delete(s.items, k)
		}
	}
}
