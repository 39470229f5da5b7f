package engine

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// advertise stores a full report of node with caps and data addresses.
func (h *harness) advertise(node string, caps []string, addrs map[string]string) {
	h.t.Helper()
	h.report(fleetwave.Report{Node: node, Capabilities: caps, DataAddresses: addrs, SentAt: h.clk.Now()})
}

// splitSpec is a rollout whose first item is a plain one on n0, followed by
// a split group over n1..n<size> requiring network_shuffle and the data
// address "shuffle".
func splitSpec(base string, size int, gen int64, maxConcurrent int) fleetwave.RolloutSpec {
	s := spec(base, 0, "spark", gen, maxConcurrent, 0)
	s.Items = append(s.Items, itemSpec("n0", "spark", gen))
	for i := 1; i <= size; i++ {
		it := itemSpec(fmt.Sprintf("n%d", i), "spark", gen)
		it.Group = "shuffle-job"
		it.Requires = []string{"network_shuffle", "address:shuffle"}
		s.Items = append(s.Items, it)
	}
	return s
}

func TestSplitPlacement(t *testing.T) {
	shuffle := []string{"network_shuffle"}
	addr := map[string]string{"shuffle": "10.0.0.1:7077"}
	tests := []struct {
		name string
		// setup advertises the nodes n1..n3 of the group
		setup func(h *harness)
	}{
		{name: "one node lacking the capability blocks the whole group", setup: func(h *harness) {
			h.advertise("n1", shuffle, addr)
			h.advertise("n2", shuffle, addr)
			h.advertise("n3", []string{"gpu"}, addr)
		}},
		{name: "one node lacking the data address blocks the whole group", setup: func(h *harness) {
			h.advertise("n1", shuffle, addr)
			h.advertise("n2", shuffle, nil)
			h.advertise("n3", shuffle, addr)
		}},
		{name: "a node that never reported blocks the whole group", setup: func(h *harness) {
			h.advertise("n1", shuffle, addr)
			h.advertise("n2", shuffle, addr)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backends(t, func(t *testing.T, rdb redis.UniversalClient) {
				h := newHarness(t, rdb)
				tt.setup(h)
				id, _ := h.create(splitSpec("split", 3, 1, 4))
				res := h.step()
				if res.Dispatched != 1 {
					t.Fatalf("dispatched %d, want only the plain item", res.Dispatched)
				}
				_, items := h.rollout(id)
				for _, it := range items[1:] {
					if it.Status != fleetwave.ItemBlocked || it.Reason != ReasonPlacementRejected || it.Attempts != 0 || it.LastAttempt != "" {
						t.Fatalf("group item %s: %s %q, %d attempts", it.ID, it.Status, it.Reason, it.Attempts)
					}
				}
				for i := 1; i <= 3; i++ {
					if as := h.poll(fmt.Sprintf("n%d", i)); len(as) != 0 {
						t.Fatalf("node n%d got attempts %v", i, ids(as))
					}
				}
				as := h.poll("n0")
				if len(as) != 1 {
					t.Fatalf("n0 polled %d attempts", len(as))
				}
				h.complete(as[0], fleetwave.ResultSuccess)
				h.step()
				r, _ := h.rollout(id)
				if r.Status != fleetwave.RolloutCompleted || r.Counters.Failed != 3 || r.Counters.Done != 1 {
					t.Fatalf("rollout %s %+v", r.Status, r.Counters)
				}
				t.Run("the same generation is not planned again", func(t *testing.T) {
					h.advertise("n3", shuffle, addr)
					h.advertise("n2", shuffle, addr)
					s := splitSpec("split", 3, 1, 4)
					s.Items = s.Items[1:]
					if id, items := h.create(s); id != "" || len(items) != 0 {
						t.Fatalf("created %q %v", id, items)
					}
				})
				t.Run("a newer generation is placed once every node advertises", func(t *testing.T) {
					s := splitSpec("split-g2", 3, 2, 4)
					s.Items = s.Items[1:]
					id, items := h.create(s)
					if len(items) != 3 {
						t.Fatalf("created %q %v", id, items)
					}
					if res := h.step(); res.Dispatched != 3 {
						t.Fatalf("dispatched %d, want the group of 3", res.Dispatched)
					}
				})
			})
		})
	}
}

func TestSplitGroupWave(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		for i := 1; i <= 3; i++ {
			h.advertise(fmt.Sprintf("n%d", i), []string{"network_shuffle", "gpu"}, map[string]string{"shuffle": "x"})
		}
		// max_concurrent 3: the plain item takes one slot, so the group of
		// 3 cannot join the first wave and waits for the next one whole
		id, _ := h.create(splitSpec("split", 3, 1, 3))
		if res := h.step(); res.Dispatched != 1 {
			t.Fatalf("first wave dispatched %d, want the plain item only", res.Dispatched)
		}
		_, items := h.rollout(id)
		for _, it := range items[1:] {
			if it.Status != fleetwave.ItemPending || it.Reason != fleetwave.ReasonLaneFull {
				t.Fatalf("group item %s: %s %q", it.ID, it.Status, it.Reason)
			}
		}
		as := h.poll("n0")
		if len(as) != 1 {
			t.Fatalf("n0 polled %d", len(as))
		}
		// the last result of wave 1 starts wave 2 at once, without a Step
		h.complete(as[0], fleetwave.ResultSuccess)
		_, items = h.rollout(id)
		for _, it := range items[1:] {
			if it.Status != fleetwave.ItemInProgress || it.Wave != 2 || it.Attempts != 1 {
				t.Fatalf("group item %s: %s wave %d attempts %d", it.ID, it.Status, it.Wave, it.Attempts)
			}
		}
		got := h.pollAll(3)
		if len(got) != 3 {
			t.Fatalf("group delivered %d attempts", len(got))
		}
		for _, a := range got {
			if a.Fence != h.fence {
				t.Fatalf("attempt %s fence %d, want the leader's %d", a.ID, a.Fence, h.fence)
			}
			h.complete(a, fleetwave.ResultSuccess)
		}
		if r, _ := h.rollout(id); r.Status != fleetwave.RolloutCompleted || r.Wave != 2 {
			t.Fatalf("rollout %s wave %d", r.Status, r.Wave)
		}
	})
}

func TestRequiresSingleItem(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		h.advertise("n1", []string{"docker"}, nil)
		h.advertise("n2", []string{"docker", "gpu"}, nil)
		s := spec("gpu", 3, "ml", 1, 3, 0)
		for i := range s.Items {
			s.Items[i].Requires = []string{"gpu"}
		}
		id, _ := h.create(s)
		if res := h.step(); res.Dispatched != 1 {
			t.Fatalf("dispatched %d, want n2 only", res.Dispatched)
		}
		_, items := h.rollout(id)
		want := map[string]fleetwave.ItemStatus{"n1": fleetwave.ItemBlocked, "n2": fleetwave.ItemInProgress, "n3": fleetwave.ItemBlocked}
		for _, it := range items {
			if it.Status != want[it.Node] {
				t.Fatalf("item on %s: %s %q", it.Node, it.Status, it.Reason)
			}
			if it.Status == fleetwave.ItemBlocked && (it.Reason != ReasonPlacementRejected || it.Attempts != 0) {
				t.Fatalf("item on %s: %q, %d attempts", it.Node, it.Reason, it.Attempts)
			}
		}
		if as := h.poll("n1"); len(as) != 0 {
			t.Fatalf("n1 got %v", ids(as))
		}
	})
}
