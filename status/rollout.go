package status

import (
	"fmt"
	"sort"

	"github.com/fleetwave/fleetwave"
)

// Rollout is status/rollouts/<id>.yaml: one rollout with its source, its
// pinned targets, its waves and every item. A rollout of more than
// PartItems items keeps its items, targets and wave nodes in parts (see
// Split); its document lists the parts and each wave's size.
type Rollout struct {
	// Format is the version the document was read at (Decode); Encode
	// always writes Version.
	Format int              `json:"-"`
	Items  []fleetwave.Item `json:"items"`
	// Parts are the files that hold the items of a large rollout, in
	// order; none for a rollout of at most PartItems items.
	Parts   []Part            `json:"parts,omitempty"`
	Rollout fleetwave.Rollout `json:"rollout"`
	// Targets are the nodes of the items, sorted (a node twice when it has
	// two items).
	Targets []string `json:"targets"`
	// Waves are the nodes of each started wave, by wave number.
	Waves []Wave `json:"waves"`
}

// Wave is one wave of a rollout and its nodes, sorted. In the document of
// a rollout split in parts, Nodes is empty and Size counts them; each
// part lists its own nodes of the wave.
type Wave struct {
	Nodes []string `json:"nodes"`
	Size  int      `json:"size,omitempty"`
	Wave  int      `json:"wave"`
}

// PartItems is the most items a rollout's document holds itself. A
// larger rollout's items are in parts of PartItems items each
// (status/rollouts/<id>/items-0001.yaml, ...), so that a status commit
// renders and writes again only the parts whose items changed: a
// 100,000-item rollout in one document was 58 MB of YAML per commit, and
// a reviewer cannot read its diff.
const PartItems = 1000

// Part names one part of a rollout's items.
type Part struct {
	Items int    `json:"items"`
	Path  string `json:"path"`
}

// RolloutPart is status/rollouts/<id>/items-NNNN.yaml: PartItems
// consecutive items of a large rollout (fewer in the last part), with
// their nodes (targets) and each wave's nodes among them.
type RolloutPart struct {
	Format  int              `json:"-"`
	Items   []fleetwave.Item `json:"items"`
	Part    int              `json:"part"` // from 1
	Rollout string           `json:"rollout"`
	Targets []string         `json:"targets"`
	Waves   []Wave           `json:"waves"`
}

// RolloutPartPath is the path of part n (from 1) of rollout id's items.
func RolloutPartPath(id string, n int) string {
	return fmt.Sprintf("%s%s/items-%04d%s", rolloutsDir, id, n, ext)
}

// Split returns d's document and its parts: d itself and no parts when
// it has at most PartItems items. A part depends only on its own items,
// so an unchanged part renders to the same bytes.
func (d Rollout) Split() (Rollout, []RolloutPart) {
	if len(d.Items) <= PartItems {
		d.Parts = nil
		return d, nil
	}
	var parts []RolloutPart
	main := Rollout{Items: []fleetwave.Item{}, Rollout: d.Rollout, Targets: []string{}}
	for start := 0; start < len(d.Items); start += PartItems {
		items := d.Items[start:min(start+PartItems, len(d.Items))]
		sub := NewRollout(d.Rollout, items)
		n := len(parts) + 1
		parts = append(parts, RolloutPart{Items: items, Part: n, Rollout: d.Rollout.ID, Targets: sub.Targets, Waves: sub.Waves})
		main.Parts = append(main.Parts, Part{Items: len(items), Path: RolloutPartPath(d.Rollout.ID, n)})
	}
	for _, w := range d.Waves {
		main.Waves = append(main.Waves, Wave{Nodes: []string{}, Size: len(w.Nodes), Wave: w.Wave})
	}
	if main.Waves == nil {
		main.Waves = []Wave{}
	}
	return main, parts
}

// RolloutFiles renders d as its files by path: its document and, for a
// large rollout, its parts.
func RolloutFiles(d Rollout) (map[string][]byte, error) {
	main, parts := d.Split()
	doc, err := EncodeRollout(main)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{RolloutPath(d.Rollout.ID): doc}
	for _, p := range parts {
		b, err := EncodeRolloutPart(p)
		if err != nil {
			return nil, err
		}
		files[RolloutPartPath(p.Rollout, p.Part)] = b
	}
	return files, nil
}

// EncodeRolloutPart renders p as status/rollouts/<id>/items-NNNN.yaml.
func EncodeRolloutPart(p RolloutPart) ([]byte, error) { return encode(p) }

// DecodeRolloutPart reads one part of a rollout's items.
func DecodeRolloutPart(data []byte) (RolloutPart, error) {
	var p RolloutPart
	f, err := decode(data, &p)
	if err != nil {
		return RolloutPart{}, err
	}
	p.Format = f
	return p, nil
}

// ReadRollout reads rollout id's document and, through file, its parts,
// and returns the whole rollout: its items in order, targets and waves
// derived from them (NewRollout), no parts. It fails on a part that is
// missing, unreadable or not the one the document names.
func ReadRollout(id string, data []byte, file func(path string) ([]byte, bool)) (Rollout, error) {
	d, err := DecodeRollout(data)
	if err != nil {
		return Rollout{}, err
	}
	if len(d.Parts) == 0 {
		return d, nil
	}
	var items []fleetwave.Item
	for i, pt := range d.Parts {
		want := RolloutPartPath(id, i+1)
		if pt.Path != want {
			return Rollout{}, fmt.Errorf("part %d is %q, want %q", i+1, pt.Path, want)
		}
		b, ok := file(want)
		if !ok {
			return Rollout{}, fmt.Errorf("part %s is missing", want)
		}
		p, err := DecodeRolloutPart(b)
		if err != nil {
			return Rollout{}, fmt.Errorf("%s: %w", want, err)
		}
		if p.Rollout != id || p.Part != i+1 || len(p.Items) != pt.Items {
			return Rollout{}, fmt.Errorf("%s holds part %d of %q with %d items, want part %d of %q with %d", want, p.Part, p.Rollout, len(p.Items), i+1, id, pt.Items)
		}
		items = append(items, p.Items...)
	}
	whole := NewRollout(d.Rollout, items)
	whole.Format = d.Format
	return whole, nil
}

// NewRollout builds the document of rollout r from its items: the targets
// and waves are derived from the items.
func NewRollout(r fleetwave.Rollout, items []fleetwave.Item) Rollout {
	byWave := map[int][]string{}
	for _, it := range items {
		if it.Wave > 0 {
			byWave[it.Wave] = append(byWave[it.Wave], it.Node)
		}
	}
	var waves []Wave
	for w, nodes := range byWave {
		sort.Strings(nodes)
		waves = append(waves, Wave{Nodes: nodes, Wave: w})
	}
	sort.Slice(waves, func(i, j int) bool { return waves[i].Wave < waves[j].Wave })
	targets := make([]string, 0, len(items))
	for _, it := range items {
		targets = append(targets, it.Node)
	}
	sort.Strings(targets)
	return Rollout{Items: items, Rollout: r, Targets: targets, Waves: waves}
}

// EncodeRollout renders d as status/rollouts/<id>.yaml.
func EncodeRollout(d Rollout) ([]byte, error) { return encode(d) }

// DecodeRollout reads status/rollouts/<id>.yaml. It fails on YAML that is
// no rollout document and, with a *FormatError, on a format this build
// cannot read.
func DecodeRollout(data []byte) (Rollout, error) {
	var d Rollout
	f, err := decode(data, &d)
	if err != nil {
		return Rollout{}, err
	}
	d.Format = f
	return d, nil
}
