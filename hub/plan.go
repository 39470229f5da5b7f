package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/engine"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/reconciler"
	"github.com/fleetwave/fleetwave/schema"
)

// PlanReport is what a change between two revisions would do: the output of
// `fleetwave plan`. It holds config hashes, never rendered values.
type PlanReport struct {
	Base     string               `json:"base"`
	Head     string               `json:"head"`
	Objects  []ObjectChange       `json:"objects"`
	Rollouts []PlannedRollout     `json:"rollouts"`
	Problems []reconciler.Problem `json:"problems,omitempty"`
	// Errors are the head's validation errors: such a commit would be rejected.
	Errors []fleetwave.FileError `json:"errors,omitempty"`
}

// NoChanges reports whether the change would do nothing at all.
func (p *PlanReport) NoChanges() bool {
	return len(p.Objects) == 0 && len(p.Rollouts) == 0 && len(p.Errors) == 0 && len(p.Problems) == 0
}

// ObjectChange is one object whose content (and so generation) changes.
type ObjectChange struct {
	Key    fleetwave.ObjectKey `json:"key"`
	Path   string              `json:"path"`
	Change string              `json:"change"` // added, modified, removed
	From   int64               `json:"from_generation"`
	To     int64               `json:"to_generation"`
}

// PlannedRollout is the rollout one trigger would start, with its waves.
type PlannedRollout struct {
	ID            string        `json:"id"`
	Trigger       string        `json:"trigger"`
	Generation    int64         `json:"generation"`
	MaxConcurrent int           `json:"max_concurrent"`
	Lanes         []PlannedLane `json:"lanes"`
}

// PlannedLane is one owner's lane of a rollout, wave by wave.
type PlannedLane struct {
	Lane  string          `json:"lane"`
	Waves [][]PlannedItem `json:"waves"`
}

// PlannedItem is one block action on one node.
type PlannedItem struct {
	Node          string `json:"node"`
	Block         string `json:"block"`
	Action        string `json:"action"`
	TargetVersion string `json:"target_version,omitempty"`
	ConfigHash    string `json:"config_hash,omitempty"`
	Criticality   string `json:"criticality"`
	// Windows names the maintenance windows the item waits for (empty when
	// it could go now), WaitsUntil when the next one opens.
	Windows    string `json:"windows,omitempty"`
	WaitsUntil string `json:"waits_until,omitempty"`
}

// Plan compares two revisions of the repository in dir. base "" means the
// merge base of head with the tracked branch (origin/<branch>, else
// <branch>); head "" means HEAD. Observations come from status/nodes at
// base, as the hub last committed them.
func Plan(ctx context.Context, dir, branch, base, head string, now time.Time) (*PlanReport, error) {
	repo, done, err := gitsync.OpenLocal(dir, gitsync.WithNormalizer(normalizer{}))
	if err != nil {
		return nil, err
	}
	defer done()
	if head == "" {
		head = "HEAD"
	}
	headHash, err := repo.Resolve(head)
	if err != nil {
		return nil, err
	}
	var baseHash string
	if base != "" {
		if baseHash, err = repo.Resolve(base); err != nil {
			return nil, err
		}
	} else {
		tracked, err := repo.Resolve("refs/remotes/origin/" + branch)
		if err != nil {
			if tracked, err = repo.Resolve(branch); err != nil {
				return nil, fmt.Errorf("no base: neither origin/%s nor %s exists (use --base)", branch, branch)
			}
		}
		if baseHash, err = repo.MergeBase(tracked, headHash); err != nil {
			return nil, err
		}
	}
	v, err := schema.New()
	if err != nil {
		return nil, err
	}
	rep := &PlanReport{Base: baseHash, Head: headHash, Objects: []ObjectChange{}, Rollouts: []PlannedRollout{}}

	headSnap, verr, err := loadAt(ctx, repo, v, headHash)
	if err != nil {
		return nil, err
	}
	if verr != nil {
		rep.Errors = verr.Errors
		return rep, nil
	}
	var baseSnap *fleetwave.Snapshot
	if baseHash != "" {
		if baseSnap, _, err = loadAt(ctx, repo, v, baseHash); err != nil {
			return nil, err
		}
	}
	rep.Objects = objectChanges(baseSnap, headSnap)

	obs := fleetwave.Observations{}
	if baseHash != "" {
		status, err := repo.StatusFiles(ctx, baseHash)
		if err != nil {
			return nil, err
		}
		obs = observationsFromStatus(status)
	}
	// plan never sees credentials: templates get a stable placeholder, so
	// instances are compared between base and head, never with real values
	opts := reconciler.Options{Credential: func(scope, name string, _ int) (string, error) {
		return "(credential " + scope + "/" + name + ")", nil
	}, ValidateConfig: schema.ValidateConfig}
	headPlan := reconciler.PlanWith(headSnap, obs, now, opts)
	already := map[string]bool{}
	if baseSnap != nil {
		for _, r := range reconciler.PlanWith(baseSnap, obs, now, opts).Rollouts {
			for _, it := range r.Items {
				already[itemKey(it)] = true
			}
		}
	}
	for _, spec := range headPlan.Rollouts {
		var items []fleetwave.ItemSpec
		for _, it := range spec.Items {
			if !already[itemKey(it)] {
				items = append(items, it)
			}
		}
		if len(items) == 0 {
			continue
		}
		rep.Rollouts = append(rep.Rollouts, plannedRollout(spec, items, now))
	}
	rep.Problems = headPlan.Problems
	return rep, nil
}

func itemKey(it fleetwave.ItemSpec) string {
	return strings.Join([]string{it.Node, it.Block, it.Action, it.TargetVersion, it.ConfigHash}, "\x00")
}

// loadAt reads commit from the object store and validates it as a whole:
// a snapshot with its generations, or the commit's validation errors
// (refused files included), or an error when it cannot be read at all.
// The hub's sync and `fleetwave plan` both load commits through it.
func loadAt(ctx context.Context, repo *gitsync.Repo, v *schema.Validator, commit string) (*fleetwave.Snapshot, *fleetwave.ValidationError, error) {
	files, refused, err := repo.Files(ctx, commit)
	if err != nil {
		return nil, nil, err
	}
	snap, err := v.Load(files)
	var verr *fleetwave.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return nil, nil, err
	}
	if len(refused) > 0 {
		if verr == nil {
			verr = &fleetwave.ValidationError{}
		}
		verr.Errors = append(verr.Errors, refused...)
		verr.Sort()
	}
	if verr != nil {
		return nil, verr, nil
	}
	gens, err := repo.Generations(ctx, commit)
	if err != nil {
		return nil, nil, err
	}
	snap.Commit, snap.Generations = commit, gens
	return snap, nil, nil
}

func objectChanges(base, head *fleetwave.Snapshot) []ObjectChange {
	out := []ObjectChange{}
	for key, o := range head.Objects {
		var prev fleetwave.Object
		var ok bool
		if base != nil {
			prev, ok = base.Objects[key]
		}
		switch {
		case !ok:
			out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "added", From: base.Generation(key), To: head.Generation(key)})
		case prev.Hash != o.Hash:
			out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "modified", From: base.Generation(key), To: head.Generation(key)})
		}
	}
	if base != nil {
		for key, o := range base.Objects {
			if _, ok := head.Objects[key]; !ok {
				out = append(out, ObjectChange{Key: key, Path: o.Path, Change: "removed", From: base.Generation(key), To: base.Generation(key)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func plannedRollout(spec fleetwave.RolloutSpec, items []fleetwave.ItemSpec, now time.Time) PlannedRollout {
	pr := PlannedRollout{ID: spec.BaseID, Trigger: spec.Source.Object.Name(), Generation: spec.Source.Generation, MaxConcurrent: max(spec.MaxConcurrent, 1)}
	lanes := map[string][]fleetwave.ItemSpec{}
	var order []string
	for _, it := range items {
		if _, ok := lanes[it.ManagedBy]; !ok {
			order = append(order, it.ManagedBy)
		}
		lanes[it.ManagedBy] = append(lanes[it.ManagedBy], it)
	}
	sort.Strings(order)
	for _, lane := range order {
		pl := PlannedLane{Lane: lane}
		list := lanes[lane]
		for i := 0; i < len(list); i += pr.MaxConcurrent {
			var wave []PlannedItem
			for _, it := range list[i:min(i+pr.MaxConcurrent, len(list))] {
				pi := PlannedItem{Node: it.Node, Block: it.Block, Action: it.Action, TargetVersion: it.TargetVersion,
					ConfigHash: shortHash(it.ConfigHash), Criticality: string(it.Criticality)}
				if open, next, err := engine.WindowState(it, now); err == nil && !open {
					var names []string
					for _, w := range it.Windows {
						names = append(names, w.Name)
					}
					pi.Windows = strings.Join(names, ",")
					if !next.IsZero() {
						pi.WaitsUntil = next.UTC().Format(time.RFC3339)
					}
				}
				wave = append(wave, pi)
			}
			pl.Waves = append(pl.Waves, wave)
		}
		pr.Lanes = append(pr.Lanes, pl)
	}
	return pr
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// nodeStatus is the shape of status/nodes/<id>.yaml (see statusFiles).
type nodeStatus struct {
	Node         string   `yaml:"node"`
	AgentVersion string   `yaml:"agent_version"`
	Capabilities []string `yaml:"capabilities"`
	Instances    []struct {
		Block      string `yaml:"block"`
		Version    string `yaml:"version"`
		ConfigHash string `yaml:"config_hash"`
		Generation int64  `yaml:"generation"`
		State      string `yaml:"state"`
		ManagedBy  string `yaml:"managed_by"`
	} `yaml:"instances"`
}

// observationsFromStatus reads the observed instances back from committed
// status/nodes files; unreadable files are ignored (the hub rewrites them).
func observationsFromStatus(files map[string][]byte) fleetwave.Observations {
	obs := fleetwave.Observations{}
	for p, data := range files {
		if !strings.HasPrefix(p, "status/nodes/") {
			continue
		}
		var ns nodeStatus
		if err := yaml.Unmarshal(data, &ns); err != nil || ns.Node == "" {
			continue
		}
		r := &fleetwave.Report{Node: ns.Node, AgentVersion: ns.AgentVersion, Capabilities: ns.Capabilities, Instances: []fleetwave.InstanceStatus{}}
		for _, in := range ns.Instances {
			r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: in.Block, Version: in.Version, ConfigHash: in.ConfigHash,
				Generation: in.Generation, State: fleetwave.DesiredState(in.State), ManagedBy: in.ManagedBy})
		}
		obs[ns.Node] = r
	}
	return obs
}

// WriteText prints the report for a terminal (markdown=false) or as a
// pull-request comment (markdown=true).
func (p *PlanReport) WriteText(w io.Writer, markdown bool) {
	h1, bullet, code := "fleetwave plan", "  ", func(s string) string { return s }
	if markdown {
		h1, bullet, code = "### fleetwave plan", "- ", func(s string) string { return "`" + s + "`" }
	}
	fmt.Fprintf(w, "%s %s..%s\n\n", h1, shortHash(p.Base), shortHash(p.Head))
	if len(p.Errors) > 0 {
		fmt.Fprintf(w, "This change would be REJECTED (%d error(s)); nothing would run:\n", len(p.Errors))
		if markdown {
			fmt.Fprintln(w, "```")
		}
		for _, e := range p.Errors {
			fmt.Fprintf(w, "%s\n", e.Error())
		}
		if markdown {
			fmt.Fprintln(w, "```")
		}
		return
	}
	if p.NoChanges() {
		fmt.Fprintln(w, "no changes")
		return
	}
	if len(p.Objects) > 0 {
		fmt.Fprintln(w, "Objects whose generation grows:")
		for _, o := range p.Objects {
			fmt.Fprintf(w, "%s%s %s (%s): generation %d -> %d\n", bullet, code(string(o.Key)), code(o.Path), o.Change, o.From, o.To)
		}
		fmt.Fprintln(w)
	}
	if len(p.Rollouts) == 0 {
		fmt.Fprintln(w, "No block instance would change.")
	}
	for _, r := range p.Rollouts {
		n := 0
		for _, l := range r.Lanes {
			for _, wv := range l.Waves {
				n += len(wv)
			}
		}
		fmt.Fprintf(w, "Rollout %s: trigger %s generation %d, %d item(s), max_concurrent %d\n", code(r.ID), r.Trigger, r.Generation, n, r.MaxConcurrent)
		for _, l := range r.Lanes {
			for i, wv := range l.Waves {
				var parts []string
				for _, it := range wv {
					s := fmt.Sprintf("%s %s@%s", it.Action, it.Block, it.Node)
					if it.TargetVersion != "" {
						s += " -> " + it.TargetVersion
					}
					if it.ConfigHash != "" {
						s += " config " + it.ConfigHash
					}
					s += " (" + it.Criticality
					if it.Windows != "" {
						s += ", waits for window " + it.Windows
						if it.WaitsUntil != "" {
							s += " until " + it.WaitsUntil
						}
					}
					parts = append(parts, s+")")
				}
				fmt.Fprintf(w, "%slane %s wave %d: %s\n", bullet, l.Lane, i+1, strings.Join(parts, "; "))
			}
		}
		fmt.Fprintln(w)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "%sproblem: %s on %s (%s): %s\n", bullet, pr.Block, pr.Node, pr.Reason, pr.Message)
	}
}
