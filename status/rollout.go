package status

import (
	"sort"

	"github.com/fleetwave/fleetwave"
)

// Rollout is status/rollouts/<id>.yaml: one rollout with its source, its
// pinned targets, its waves and every item.
type Rollout struct {
	// Format is the version the document was read at (Decode); Encode
	// always writes Version.
	Format  int               `json:"-"`
	Items   []fleetwave.Item  `json:"items"`
	Rollout fleetwave.Rollout `json:"rollout"`
	// Targets are the nodes of the items, sorted (a node twice when it has
	// two items).
	Targets []string `json:"targets"`
	// Waves are the nodes of each started wave, by wave number.
	Waves []Wave `json:"waves"`
}

// Wave is one wave of a rollout and its nodes, sorted.
type Wave struct {
	Nodes []string `json:"nodes"`
	Wave  int      `json:"wave"`
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
