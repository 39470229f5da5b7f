package engine

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fleetwave/fleetwave"
)

// opSpec is a scheduled backup of block web on n1 at the schedule
// trigger's generation gen: operational, it carries no version or config.
func opSpec(base string, gen int64) fleetwave.RolloutSpec {
	s := spec(base, 1, "web", gen, 1, 0)
	it := &s.Items[0]
	it.Action, it.TargetVersion, it.ConfigHash = "backup", "", ""
	it.Payload = fleetwave.AttemptPayload{Command: "backup", TimeoutSeconds: 60, Operational: true}
	return s
}

// TestOperationalItemsLeaveTheInstanceAlone: a backup neither passes the
// health gate's generation check nor rewrites the instance's record, so a
// permanently failed upgrade stays blocked after a successful backup; it
// only runs on a free instance and an upgrade waits for it.
func TestOperationalItemsLeaveTheInstanceAlone(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := newHarness(t, rdb)
		// upgrade at generation 4 fails permanently: blocked until a newer generation
		_, up := h.create(spec("web", 1, "web", 4, 1, 0))
		h.step()
		h.complete(h.poll("n1")[0], fleetwave.ResultPermanent)
		if it := h.item(up[0]); it.Status != fleetwave.ItemBlocked {
			t.Fatalf("upgrade = %s", it.Status)
		}

		// a backup from a schedule at generation 9 runs and completes, although
		// the instance it reports is still at generation 3
		_, bk := h.create(opSpec("backup-tick1", 9))
		h.step()
		as := h.poll("n1")
		if len(as) != 1 || as[0].Action != "backup" || !as[0].Payload.Operational {
			t.Fatalf("backup attempts = %+v", as)
		}
		res := fleetwave.AttemptResult{AttemptID: as[0].ID, Fence: as[0].Fence, Class: fleetwave.ResultSuccess,
			Instance: &fleetwave.InstanceStatus{Block: "web", Version: "v3", ConfigHash: "hash-web-3", Generation: 3}}
		if err := h.e.Complete(h.ctx, "n1", res); err != nil {
			t.Fatal(err)
		}
		if it := h.item(bk[0]); it.Status != fleetwave.ItemCompleted {
			t.Fatalf("backup = %s %q, want completed (no health gate on an operational item)", it.Status, it.Reason)
		}
		// the blocked upgrade is still blocked: the backup did not overwrite its record
		if id, _ := h.create(spec("web-again", 1, "web", 4, 1, 0)); id != "" {
			t.Fatalf("the permanently failed upgrade was re-created after a backup: %s", id)
		}

		// an upgrade waits for a pending backup; a backup waits for an active upgrade
		_, bk2 := h.create(opSpec("backup-tick2", 9))
		if id, _ := h.create(spec("web-g5", 1, "web", 5, 1, 0)); id != "" {
			t.Fatalf("an upgrade superseded or joined a pending backup: %s", id)
		}
		h.step()
		a := h.poll("n1")[0]
		h.complete(a, fleetwave.ResultSuccess)
		if it := h.item(bk2[0]); it.Status != fleetwave.ItemCompleted {
			t.Fatalf("second backup = %s", it.Status)
		}
		if id, _ := h.create(spec("web-g5", 1, "web", 5, 1, 0)); id == "" {
			t.Fatal("the upgrade was not created once the backup finished")
		}
		if id, _ := h.create(opSpec("backup-tick3", 9)); id != "" {
			t.Fatalf("a backup was created while an upgrade is active: %s", id)
		}
	})
}
