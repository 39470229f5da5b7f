package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	t.Run("every key, relative paths against the file's directory", func(t *testing.T) {
		got, err := ParseConfigFile(path, []byte(`# edge-01's agent
hub: https://hub.example:8080
node: edge-01
token_file: token
state_dir: /var/lib/fleetwave
capabilities: [network_shuffle, gpu]
addresses:
  shuffle: 10.0.0.5:7077
  metrics: "[fd00::5]:9100"
poll_wait: 2s
report_interval: 1m
upgrade_timeout: 90s
shell: /bin/bash
`))
		if err != nil {
			t.Fatal(err)
		}
		want := FileConfig{
			Hub: "https://hub.example:8080", Node: "edge-01",
			TokenFile: filepath.Join(dir, "token"), StateDir: "/var/lib/fleetwave",
			Capabilities:   []string{"network_shuffle", "gpu"},
			Addresses:      map[string]string{"shuffle": "10.0.0.5:7077", "metrics": "[fd00::5]:9100"},
			PollWait:       2 * time.Second,
			ReportInterval: time.Minute,
			UpgradeTimeout: 90 * time.Second,
			Shell:          "/bin/bash",
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got  %+v\nwant %+v", got, want)
		}
	})
	t.Run("a partial file is fine: flags may give the rest", func(t *testing.T) {
		got, err := ParseConfigFile(path, []byte("capabilities: []\n"))
		if err != nil || got.Capabilities == nil || len(got.Capabilities) != 0 || got.Hub != "" {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	for _, c := range []struct {
		name, body string
		want       []string // each error line, file:line:col: message
	}{
		{"unknown key", "hub: http://h:8080\nnodes: edge-01\n",
			[]string{`agent.yaml:2:1: unknown key "nodes" (known: hub, node, token_file, state_dir, capabilities, addresses, poll_wait, report_interval, upgrade_timeout, shell)`}},
		{"bad values, each reported", "hub: ftp://h\nnode: edge 01\npoll_wait: soon\nreport_interval: -1s\ncapabilities: gpu\naddresses: [a]\n",
			[]string{
				`agent.yaml:1:6: hub: "ftp://h" is not an http(s) URL such as http://hub:8080`,
				`agent.yaml:2:7: node: "edge 01" is not a node id`,
				`agent.yaml:3:12: poll_wait: "soon" is not a positive duration such as 10s`,
				`agent.yaml:4:18: report_interval: "-1s" is not a positive duration such as 10s`,
				`agent.yaml:5:15: capabilities: want a list of strings, e.g. [network_shuffle]`,
				`agent.yaml:6:12: addresses: want a mapping of name: address, e.g. {shuffle: 10.0.0.5:7077}`,
			}},
		{"duplicates", "node: a\nnode: b\ncapabilities: [gpu, gpu]\naddresses: {x: \"1\", x: \"2\"}\n",
			[]string{
				`agent.yaml:2:1: node given twice (first at line 1)`,
				`agent.yaml:3:21: capabilities: "gpu" listed twice`,
				`agent.yaml:4:21: addresses: "x" given twice`,
			}},
		{"missing and non-string values", "hub:\nstate_dir: [a]\naddresses: {shuffle: }\n",
			[]string{
				`agent.yaml:1:1: hub: no value`,
				`agent.yaml:2:12: state_dir: want a string`,
				`agent.yaml:3:13: addresses.shuffle: no value`,
			}},
		{"not a mapping", "- hub\n", []string{`agent.yaml:1:1: want a mapping of keys (hub, node, token_file, state_dir, ...)`}},
		{"empty", "# nothing\n", []string{`agent.yaml:1:1: empty file: want a mapping such as "hub: http://hub:8080"`}},
		{"not YAML", "hub: http://h\n  node: [\n", []string{`agent.yaml:2:1: not YAML: mapping values are not allowed in this context`}},
		{"two documents", "hub: http://h:1\n---\nnode: a\n", []string{`agent.yaml:2:1: a second YAML document: the file holds one mapping`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfigFile("agent.yaml", []byte(c.body))
			if err == nil {
				t.Fatal("no error")
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", err, strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestLoadConfigFileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte("hub: http://h:8080\nshell: 3\ncolour: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfigFile(path)
	if err == nil || err.Error() != path+`:3:1: unknown key "colour" (known: hub, node, token_file, state_dir, capabilities, addresses, poll_wait, report_interval, upgrade_timeout, shell)` {
		t.Fatalf("error %v", err)
	}
	if _, err := LoadConfigFile(path + ".missing"); err == nil || !os.IsNotExist(err) {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestDemoBuildTrailer(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte("\x7fELF program bytes\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := DemoBuildVersion(src); ok || err != nil {
		t.Fatalf("a program without trailer: ok %v, %v", ok, err)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := WriteDemoBuild(src, a, "0.1.0"); err != nil {
		t.Fatal(err)
	}
	// a build of a build replaces the trailer
	if err := WriteDemoBuild(a, b, "0.2.0"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{a: "0.1.0", b: "0.2.0"} {
		v, ok, err := DemoBuildVersion(p)
		if !ok || err != nil || v != want {
			t.Fatalf("%s: %q, %v, %v; want %s", p, v, ok, err, want)
		}
	}
	body, _ := os.ReadFile(b)
	if string(body) != "\x7fELF program bytes\n"+demoTrailer+"0.2.0\n" {
		t.Fatalf("build b = %q", body)
	}
	if err := WriteDemoBuild(src, a, "../x"); err == nil {
		t.Fatal("a version that names no build was written")
	}
}
