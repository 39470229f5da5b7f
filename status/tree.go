package status

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave"
)

// RenderNode renders n as status/nodes/<id>.yaml, the bytes EncodeNode
// writes, for the hub's writes: it builds the generic value RenderJSON
// reads from NodeJSON's bytes from n's fields directly. At 100,000 nodes a
// wave changes thousands of node documents per status write, and encoding
// each to JSON and decoding it again was a fifth of what writing them
// allocated. A string that is not valid UTF-8 (which encoding/json
// replaces) takes the JSON way.
func RenderNode(n Node) ([]byte, error) {
	t := treeBuilder{ok: true}
	return t.render(t.node(n), func() ([]byte, error) { return NodeJSON(n) })
}

// render writes the document of tree, or renders its JSON form (form)
// when a string of it is not as encoding/json would write it.
func (t *treeBuilder) render(tree map[string]any, form func() ([]byte, error)) ([]byte, error) {
	if !t.ok {
		j, err := form()
		if err != nil {
			return nil, err
		}
		return RenderJSON(j)
	}
	b := startDoc()
	if err := encodeYAML(b, tree); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// treeBuilder builds a document's generic value as decodeJSON reads its
// JSON form: objects map[string]any, arrays []any, null nil, integers
// int64. ok turns false at a string JSON would not carry as it is.
type treeBuilder struct{ ok bool }

func (t *treeBuilder) str(s string) string {
	if t.ok && !utf8.ValidString(s) {
		t.ok = false
	}
	return s
}

// strs is a []string's JSON form: null when nil.
func (t *treeBuilder) strs(ss []string) any {
	if ss == nil {
		return nil
	}
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = t.str(s)
	}
	return out
}

// set puts a string field, left out when empty (omitempty).
func (t *treeBuilder) set(m map[string]any, k, v string) {
	if v != "" {
		m[k] = t.str(v)
	}
}

// node mirrors nodeFile's JSON tags (NodeJSON).
func (t *treeBuilder) node(n Node) map[string]any {
	m := make(map[string]any, 8)
	if n.Reported {
		m["agent_version"] = t.str(n.AgentVersion)
		m["capabilities"] = t.strs(n.Capabilities)
	} else {
		m["reported"] = false
	}
	if n.Drain != nil {
		m["drain"] = *n.Drain
	}
	if len(n.Drift) > 0 {
		l := make([]any, len(n.Drift))
		for i, d := range n.Drift {
			e := map[string]any{"kind": t.str(d.Kind), "node": t.str(d.Node)}
			t.set(e, "block", d.Block)
			t.set(e, "desired", d.Desired)
			t.set(e, "observed", d.Observed)
			t.set(e, "trigger", d.Trigger)
			l[i] = e
		}
		m["drift"] = l
	}
	if len(n.Held) > 0 {
		l := make([]any, len(n.Held))
		for i, h := range n.Held {
			e := map[string]any{"block": t.str(h.Block), "brc": t.str(h.BRC), "reason": t.str(h.Reason)}
			t.set(e, "message", h.Message)
			l[i] = e
		}
		m["held"] = l
	}
	if n.Instances == nil {
		m["instances"] = nil
	} else {
		l := make([]any, len(n.Instances))
		for i, in := range n.Instances {
			e := map[string]any{"block": t.str(in.Block), "generation": in.Generation}
			t.set(e, "config_hash", in.ConfigHash)
			t.set(e, "managed_by", in.ManagedBy)
			t.set(e, "state", string(in.State))
			t.set(e, "version", in.Version)
			l[i] = e
		}
		m["instances"] = l
	}
	m["node"] = t.str(n.Node)
	if len(n.ObservedVersions) > 0 {
		o := make(map[string]any, len(n.ObservedVersions))
		for k, vs := range n.ObservedVersions {
			o[t.str(k)] = t.strs(vs)
		}
		m["observed_versions"] = o
	}
	if n.UnknownNode {
		m["unknown_node"] = true
	}
	if len(n.Waiting) > 0 {
		l := make([]any, len(n.Waiting))
		for i, w := range n.Waiting {
			e := map[string]any{"action": t.str(w.Action), "block": t.str(w.Block), "item": t.str(w.Item),
				"rollout": t.str(w.Rollout), "status": t.str(string(w.Status))}
			t.set(e, "reason", w.Reason)
			l[i] = e
		}
		m["waiting"] = l
	}
	return m
}

// RenderRolloutPart renders p as its file, the bytes EncodeRolloutPart
// writes, as RenderNode does a node's (a wave changes the parts that
// hold its items: thousands of items per status write at 100,000 nodes).
func RenderRolloutPart(p RolloutPart) ([]byte, error) {
	t := treeBuilder{ok: true}
	return t.render(t.part(p), func() ([]byte, error) { return json.Marshal(p) })
}

// time is a time.Time's JSON form; encoding/json refuses a year it cannot
// write in RFC 3339.
func (t *treeBuilder) time(v time.Time) string {
	if y := v.Year(); y < 0 || y > 9999 {
		t.ok = false
	}
	return v.Format(time.RFC3339Nano)
}

// part mirrors RolloutPart's JSON tags.
func (t *treeBuilder) part(p RolloutPart) map[string]any {
	m := map[string]any{"part": int64(p.Part), "rollout": t.str(p.Rollout), "targets": t.strs(p.Targets)}
	if p.Items == nil {
		m["items"] = nil
	} else {
		l := make([]any, len(p.Items))
		for i := range p.Items {
			l[i] = t.item(&p.Items[i])
		}
		m["items"] = l
	}
	if p.Waves == nil {
		m["waves"] = nil
	} else {
		l := make([]any, len(p.Waves))
		for i, w := range p.Waves {
			e := map[string]any{"nodes": t.strs(w.Nodes), "wave": int64(w.Wave)}
			if w.Size != 0 {
				e["size"] = int64(w.Size)
			}
			l[i] = e
		}
		m["waves"] = l
	}
	return m
}

// item mirrors fleetwave.Item's JSON tags.
func (t *treeBuilder) item(it *fleetwave.Item) map[string]any {
	m := make(map[string]any, 16)
	m["id"] = t.str(it.ID)
	m["rollout"] = t.str(it.Rollout)
	m["node"] = t.str(it.Node)
	m["block"] = t.str(it.Block)
	m["action"] = t.str(it.Action)
	m["generation"] = it.Generation
	t.set(m, "target_version", it.TargetVersion)
	t.set(m, "config_hash", it.ConfigHash)
	t.set(m, "managed_by", it.ManagedBy)
	t.set(m, "criticality", string(it.Criticality))
	m["status"] = t.str(string(it.Status))
	t.set(m, "reason", it.Reason)
	m["source"] = t.str(string(it.Source))
	t.set(m, "source_user", it.SourceUser)
	if it.Wave != 0 {
		m["wave"] = int64(it.Wave)
	}
	m["retry_count"] = int64(it.RetryCount)
	if !it.RetryAfter.IsZero() {
		m["retry_after"] = t.time(it.RetryAfter)
	}
	if !it.DispatchedAt.IsZero() {
		m["dispatched_at"] = t.time(it.DispatchedAt)
	}
	if !it.CompletedAt.IsZero() {
		m["completed_at"] = t.time(it.CompletedAt)
	}
	m["attempts"] = int64(it.Attempts)
	t.set(m, "last_attempt", it.LastAttempt)
	t.set(m, "last_failure_class", string(it.LastClass))
	t.set(m, "desired_state", string(it.DesiredState))
	t.set(m, "message", it.Message)
	t.set(m, "output", it.Output)
	return m
}
