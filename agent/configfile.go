package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// FileConfig is the agent's configuration file (`fleetwave agent --config
// FILE`), in YAML:
//
//	hub: https://hub.example:8080
//	node: edge-01
//	token_file: /etc/fleetwave/token     # a relative path is relative to the file's directory
//	state_dir: /var/lib/fleetwave
//	capabilities: [network_shuffle]      # advertised in every full report
//	addresses:                           # data addresses, name: value
//	  shuffle: 10.0.0.5:7077
//	poll_wait: 10s                       # optional, as Config's fields
//	report_interval: 30s
//	upgrade_timeout: 1m
//	shell: /bin/sh
//
// Every key is optional in the file (the command line may give it); an
// unknown key, a key given twice or a value of the wrong kind is an error
// naming the file, line and column. A field left out is its zero value.
type FileConfig struct {
	Hub            string
	Node           string
	TokenFile      string // absolute, or made absolute against the file's directory
	StateDir       string // likewise
	Capabilities   []string
	Addresses      map[string]string
	PollWait       time.Duration
	ReportInterval time.Duration
	UpgradeTimeout time.Duration
	Shell          string
}

// ConfigFileError is one mistake in an agent configuration file, at a
// position (1-based line and column).
type ConfigFileError struct {
	Path      string
	Line, Col int
	Msg       string
}

func (e *ConfigFileError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Col, e.Msg)
}

// LoadConfigFile reads the agent configuration file at path. Its error is
// the read error, or every mistake found as *ConfigFileError values joined
// with errors.Join (one "file:line:col: message" per line).
func LoadConfigFile(path string) (FileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, err
	}
	return ParseConfigFile(path, data)
}

// ParseConfigFile parses data, the content of the agent configuration file
// at path (which names the file in errors and anchors relative paths).
func ParseConfigFile(path string, data []byte) (FileConfig, error) {
	p := &fileParser{path: path, dir: filepath.Dir(path)}
	var c FileConfig
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, &ConfigFileError{Path: path, Line: 1, Col: 1, Msg: "empty file: want a mapping such as \"hub: http://hub:8080\""}
		}
		return c, &ConfigFileError{Path: path, Line: yamlErrLine(err), Col: 1, Msg: yamlErrMsg(err)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return c, &ConfigFileError{Path: path, Line: next.Line, Col: next.Column, Msg: "a second YAML document: the file holds one mapping"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return c, p.errAt(root, "want a mapping of keys (hub, node, token_file, state_dir, ...)")
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if prev, ok := seen[k.Value]; ok {
			p.add(k, fmt.Sprintf("%s given twice (first at line %d)", k.Value, prev.Line))
			continue
		}
		seen[k.Value] = k
		switch k.Value {
		case "hub":
			if s, ok := p.str(k.Value, k, v); ok {
				if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					p.add(v, fmt.Sprintf("hub: %q is not an http(s) URL such as http://hub:8080", s))
				} else {
					c.Hub = s
				}
			}
		case "node":
			if s, ok := p.str(k.Value, k, v); ok {
				if strings.ContainsAny(s, " \t/") {
					p.add(v, fmt.Sprintf("node: %q is not a node id", s))
				} else {
					c.Node = s
				}
			}
		case "token_file":
			c.TokenFile = p.path1(k, v)
		case "state_dir":
			c.StateDir = p.path1(k, v)
		case "shell":
			c.Shell, _ = p.str(k.Value, k, v)
		case "capabilities":
			c.Capabilities = p.list(k, v)
		case "addresses":
			c.Addresses = p.addresses(k, v)
		case "poll_wait":
			c.PollWait = p.duration(k, v)
		case "report_interval":
			c.ReportInterval = p.duration(k, v)
		case "upgrade_timeout":
			c.UpgradeTimeout = p.duration(k, v)
		default:
			p.add(k, fmt.Sprintf("unknown key %q (known: %s)", k.Value, strings.Join(fileKeys, ", ")))
		}
	}
	if len(p.errs) > 0 {
		return FileConfig{}, errors.Join(p.errs...)
	}
	return c, nil
}

// fileKeys are the keys of the agent configuration file.
var fileKeys = []string{"hub", "node", "token_file", "state_dir", "capabilities", "addresses", "poll_wait", "report_interval", "upgrade_timeout", "shell"}

type fileParser struct {
	path, dir string
	errs      []error
}

func (p *fileParser) errAt(n *yaml.Node, msg string) *ConfigFileError {
	return &ConfigFileError{Path: p.path, Line: n.Line, Col: n.Column, Msg: msg}
}

func (p *fileParser) add(n *yaml.Node, msg string) { p.errs = append(p.errs, p.errAt(n, msg)) }

// str wants v, the value of what name names, to be a non-empty string
// scalar; at is where a missing value is reported.
func (p *fileParser) str(name string, at, v *yaml.Node) (string, bool) {
	switch {
	case v.Kind != yaml.ScalarNode:
		p.add(v, name+": want a string")
	case v.Tag == "!!null" || strings.TrimSpace(v.Value) == "":
		p.add(at, name+": no value")
	default:
		return v.Value, true
	}
	return "", false
}

// path1 is a path value, made absolute against the file's directory.
func (p *fileParser) path1(k, v *yaml.Node) string {
	s, ok := p.str(k.Value, k, v)
	if !ok {
		return ""
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(p.dir, s)
	}
	if abs, err := filepath.Abs(s); err == nil {
		s = abs
	}
	return s
}

func (p *fileParser) duration(k, v *yaml.Node) time.Duration {
	s, ok := p.str(k.Value, k, v)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.add(v, fmt.Sprintf("%s: %q is not a positive duration such as 10s", k.Value, s))
		return 0
	}
	return d
}

// list is a sequence of distinct non-empty strings.
func (p *fileParser) list(k, v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.add(v, k.Value+": want a list of strings, e.g. [network_shuffle]")
		return nil
	}
	out := []string{}
	seen := map[string]bool{}
	for _, e := range v.Content {
		s, ok := p.str(k.Value+" entry", e, e)
		switch {
		case !ok:
		case seen[s]:
			p.add(e, fmt.Sprintf("%s: %q listed twice", k.Value, s))
		default:
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// addresses is a mapping of address names to non-empty values.
func (p *fileParser) addresses(k, v *yaml.Node) map[string]string {
	if v.Kind != yaml.MappingNode {
		p.add(v, k.Value+": want a mapping of name: address, e.g. {shuffle: 10.0.0.5:7077}")
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		nk, nv := v.Content[i], v.Content[i+1]
		name, ok := p.str(k.Value+" name", nk, nk)
		if !ok {
			continue
		}
		if _, dup := out[name]; dup {
			p.add(nk, fmt.Sprintf("%s: %q given twice", k.Value, name))
			continue
		}
		if s, ok := p.str(k.Value+"."+name, nk, nv); ok {
			out[name] = s
		}
	}
	return out
}

// yamlErrLine digs the line out of a yaml.v3 syntax error ("yaml: line 3:
// ..."), 1 when it names none.
func yamlErrLine(err error) int {
	var line int
	if _, e := fmt.Sscanf(err.Error(), "yaml: line %d:", &line); e == nil && line > 0 {
		return line
	}
	return 1
}

func yamlErrMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(s, ": "); strings.HasPrefix(s, "line ") && i >= 0 {
		s = s[i+2:]
	}
	return "not YAML: " + s
}
