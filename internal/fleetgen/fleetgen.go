// Package fleetgen writes synthetic, valid fleetwave config repositories of
// any size, for benchmarks and load tests. The output depends only on the
// arguments: the same seed gives the same bytes.
package fleetgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

var (
	regions = []string{"eu-west", "eu-central", "us-east", "us-west", "ap-south", "ap-east"}
	tiers   = []string{"frontend", "backend", "edge", "batch"}
	envs    = []string{"prod", "staging", "dev"}
	crits   = []string{"high", "medium", "low"}
)

// Generate writes into dir (created if needed; existing files with the same
// names are overwritten) a repository that validates cleanly: fleetwave.cue,
// `blocks` blocks, `brcs` trigger BRCs, `nodes` nodes spread over
// organizations and workspaces (one organization per 1,000 nodes and one
// workspace per 100, at least one of each), written in a mix of .cue, .yaml
// and .json. nodes and blocks must be at least 1.
func Generate(dir string, nodes, brcs, blocks int, seed int64) error {
	if nodes < 1 || blocks < 1 || brcs < 0 {
		return fmt.Errorf("generate: need at least one node and one block, got nodes=%d blocks=%d brcs=%d", nodes, blocks, brcs)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x666c656574))
	w := &writer{dir: dir}
	orgs := max(1, nodes/1000)
	workspaces := max(1, nodes/100)
	w.put("fleetwave.cue", `kind: "config"
name: "fleetwave"
max_concurrent: 50
failure_threshold_percent: 10
backoff: "10s"
maintenance_windows: {
	"nightly": {cron: "0 2 * * *", duration: "4h", timezone: "UTC"}
	"hourly": {cron: "0 * * * *", duration: "50m"}
}
`)
	for i := range orgs {
		w.obj(i, "organizations", fmt.Sprintf("org-%03d", i), map[string]any{"criticality": crits[i%3]})
	}
	for i := range workspaces {
		w.obj(i, "workspaces", fmt.Sprintf("ws-%04d", i), map[string]any{"organization": fmt.Sprintf("org-%03d", i%orgs)})
	}
	for i := range blocks {
		actions := map[string]any{}
		for _, a := range []string{"install", "upgrade", "start", "stop", "uninstall", "backup"} {
			actions[a] = map[string]any{"command": fmt.Sprintf(`echo %s > "$FLEETWAVE_STATE_DIR/%s"`, a, a), "timeout": "2m"}
		}
		w.obj(i, "blocks", fmt.Sprintf("block-%03d", i), map[string]any{"owner": fmt.Sprintf("team-%d", i%5), "actions": actions})
	}
	// Two reconciliation BRCs may not own one block instance: BRCs of one
	// block are told apart by a shard label (round i/blocks of BRC i).
	shards := max(1, (brcs+blocks-1)/blocks)
	for i := range nodes {
		ws := i % workspaces
		labels := map[string]any{
			"region": regions[rng.IntN(len(regions))],
			"tier":   tiers[rng.IntN(len(tiers))],
			"env":    envs[rng.IntN(len(envs))],
			"rack":   fmt.Sprintf("r%03d", rng.IntN(500)),
			"shard":  fmt.Sprintf("s%d", i%shards),
		}
		n := map[string]any{
			"organization": fmt.Sprintf("org-%03d", ws%orgs),
			"workspace":    fmt.Sprintf("ws-%04d", ws),
			"labels":       labels,
		}
		if rng.IntN(4) == 0 {
			n["criticality"] = crits[rng.IntN(3)]
		}
		if rng.IntN(10) == 0 {
			n["maintenance_windows"] = []any{"nightly"}
		}
		w.obj(i, "nodes", fmt.Sprintf("node-%06d", i), n)
	}
	for i := range brcs {
		t := map[string]any{
			"block_name":             fmt.Sprintf("block-%03d", i%blocks),
			"target_version":         fmt.Sprintf("1.%d.%d", i%10, rng.IntN(20)),
			"managed_by":             fmt.Sprintf("team-%d", i%5),
			"max_concurrent_percent": 10 + rng.IntN(40),
			"block_config_template":  "node: {{ node.id }}\nregion: {{ node.labels.region }}\nversion: {{ brc.target_version }}\n",
		}
		shard := fmt.Sprintf("s%d", i/blocks)
		switch i % 4 {
		case 0:
			t["selector"] = map[string]any{"match_labels": map[string]any{"env": "prod", "shard": shard}, "match_expressions": []any{map[string]any{"key": "tier", "operator": "in", "values": []any{"frontend", "edge"}}}}
		case 1:
			t["target_workspaces"] = []any{fmt.Sprintf("ws-%04d", i%workspaces)}
			t["selector"] = map[string]any{"match_labels": map[string]any{"shard": shard}}
			t["maintenance_window"] = "hourly"
		case 2:
			t["target_organizations"] = []any{fmt.Sprintf("org-%03d", i%orgs)}
			t["selector"] = map[string]any{"match_labels": map[string]any{"shard": shard}, "match_expressions": []any{map[string]any{"key": "rack", "operator": "exists"}}}
		case 3:
			t["trigger_type"] = "schedule"
			t["action_name"] = "backup"
			t["cron_expression"] = fmt.Sprintf("%d 3 * * *", i%60)
			t["timezone"] = "Europe/Berlin"
			delete(t, "max_concurrent_percent")
			t["max_concurrent"] = 5
		}
		w.obj(i, "brc", fmt.Sprintf("brc-%03d", i), t)
	}
	return w.err
}

var kinds = map[string]string{
	"organizations": "organization", "workspaces": "workspace", "blocks": "block", "nodes": "node", "brc": "trigger",
}

type writer struct {
	dir string
	err error
}

func (w *writer) put(rel string, s string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.err = fmt.Errorf("generate: %w", err)
		return
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		w.err = fmt.Errorf("generate: %w", err)
	}
}

// obj writes one object; i picks the format (cue, yaml, json in turn).
func (w *writer) obj(i int, folder, name string, fields map[string]any) {
	fields["kind"] = kinds[folder]
	fields["name"] = name
	switch i % 3 {
	case 0: // CUE: JSON is CUE syntax; the fields stay plain data.
		b, _ := json.MarshalIndent(fields, "", "\t")
		w.put(folder+"/"+name+".cue", strings.TrimSuffix(strings.TrimPrefix(string(b), "{\n"), "}")+"\n")
	case 1:
		var sb strings.Builder
		yamlValue(&sb, fields, 0)
		w.put(folder+"/"+name+".yaml", sb.String())
	default:
		b, _ := json.MarshalIndent(fields, "", "  ")
		w.put(folder+"/"+name+".json", string(b)+"\n")
	}
}

// yamlValue writes a map in block style; scalars are JSON-quoted (JSON
// strings are valid YAML double-quoted scalars).
func yamlValue(sb *strings.Builder, m map[string]any, indent int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pad := strings.Repeat("  ", indent)
	for _, k := range keys {
		kq, _ := json.Marshal(k)
		switch v := m[k].(type) {
		case map[string]any:
			fmt.Fprintf(sb, "%s%s:\n", pad, kq)
			yamlValue(sb, v, indent+1)
		default:
			b, _ := json.Marshal(v)
			fmt.Fprintf(sb, "%s%s: %s\n", pad, kq, b)
		}
	}
}
