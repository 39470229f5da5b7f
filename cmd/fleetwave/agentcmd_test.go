package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/agent"
)

// TestAgentConfigFileAndFlags: the file gives the settings, a flag given
// on the command line wins, and a file's mistake names file:line:col.
func TestAgentConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	writeFile(t, file, `hub: http://hub:8080
node: edge-01
token_file: token
state_dir: state
capabilities: [network_shuffle]
addresses: {shuffle: "10.0.0.5:7077", metrics: "10.0.0.5:9100"}
report_interval: 5s
`)
	parse := func(args ...string) (agent.Config, string, error) {
		t.Helper()
		var f agentFlags
		cmd := &cobra.Command{}
		bindAgentFlags(cmd, &f)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return agentConfig(cmd.Flags(), f)
	}
	cfg, token, err := parse("--config", file)
	want := agent.Config{
		HubURL: "http://hub:8080", Node: "edge-01", StateDir: filepath.Join(dir, "state"),
		Capabilities:   []string{"network_shuffle"},
		DataAddresses:  map[string]string{"shuffle": "10.0.0.5:7077", "metrics": "10.0.0.5:9100"},
		ReportInterval: 5 * time.Second,
	}
	if err != nil || token != filepath.Join(dir, "token") || !reflect.DeepEqual(cfg, want) {
		t.Fatalf("from the file: %+v, token file %q, %v", cfg, token, err)
	}

	cfg, token, err = parse("--config", file, "--node", "edge-02", "--token-file", "/etc/t", "--capability", "gpu", "--capability", "ssd", "--address", "shuffle=10.0.0.6:7077")
	want.Node, want.Capabilities = "edge-02", []string{"gpu", "ssd"}
	want.DataAddresses = map[string]string{"shuffle": "10.0.0.6:7077", "metrics": "10.0.0.5:9100"}
	if err != nil || token != "/etc/t" || !reflect.DeepEqual(cfg, want) {
		t.Fatalf("flags over the file: %+v, token file %q, %v", cfg, token, err)
	}

	cfg, _, err = parse("--hub", "http://h:1", "--node", "n", "--token-file", "t", "--state-dir", "s")
	if err != nil || cfg.HubURL != "http://h:1" || cfg.Capabilities != nil || cfg.DataAddresses != nil {
		t.Fatalf("flags only: %+v, %v", cfg, err)
	}

	partial := filepath.Join(dir, "partial.yaml")
	writeFile(t, partial, "hub: http://hub:8080\n")
	_, _, err = parse("--config", partial, "--node", "n")
	var ue usageError
	if !errors.As(err, &ue) || ue.msg != "agent needs --token-file, --state-dir (from "+partial+" or flags)" {
		t.Fatalf("missing settings: %v", err)
	}
	if _, _, err := parse("--config", file, "--address", "shuffle"); !errors.As(err, &ue) || !strings.Contains(ue.msg, "want name=value") {
		t.Fatalf("a bad --address: %v", err)
	}
}

// TestAgentCommandRefusesABadConfigFile: the command exits 1 naming
// file:line:col before it starts anything.
func TestAgentCommandRefusesABadConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	writeFile(t, file, "hub: http://hub:8080\nnode: edge-01\ncapability: gpu\npoll_wait: 10\n")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"agent", "--config", file}, &out, &errb)
	want := "fleetwave: " + file + `:3:1: unknown key "capability" (known: hub, node, token_file, state_dir, capabilities, addresses, poll_wait, report_interval, upgrade_timeout, shell)` + "\n" +
		file + `:4:12: poll_wait: "10" is not a positive duration such as 10s` + "\n"
	if code != 1 || errb.String() != want {
		t.Fatalf("exit %d, stderr:\n%s\nwant:\n%s", code, errb.String(), want)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"agent", "--node", "edge-01"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "agent needs --hub, --token-file, --state-dir (from flags)\nTry: ") {
		t.Fatalf("without settings: exit %d, %s", code, errb.String())
	}
}
