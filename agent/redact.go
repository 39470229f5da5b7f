package agent

import (
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// minSecretLen is the shortest config value redact hides: shorter values
// ("true", "3", "web") are too common to be secrets and would garble the
// output.
const minSecretLen = 6

// redactedMark replaces every secret found in a command's output.
const redactedMark = "[redacted]"

// redact replaces in out every value of the rendered config that is longer
// than five characters with "[redacted]": every scalar of the YAML
// document(s), and, line by line, the text after "key:" and the whole
// trimmed line, so that a config that is not valid YAML is covered too. The
// rendered config may carry credentials; the output goes to the hub, its
// logs and the status commits, where no secret may appear.
func redact(out, config string) string {
	if out == "" || config == "" {
		return out
	}
	secrets := map[string]bool{}
	add := func(v string) {
		v = strings.TrimSpace(v)
		if len(v) >= minSecretLen {
			secrets[v] = true
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(config))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			break
		}
		walkScalars(&doc, 0, add)
	}
	for _, line := range strings.Split(config, "\n") {
		add(line)
		if _, v, ok := strings.Cut(line, ":"); ok {
			v = strings.TrimSpace(v)
			add(v)
			add(strings.Trim(v, `"'`))
		}
	}
	if len(secrets) == 0 {
		return out
	}
	list := make([]string, 0, len(secrets))
	for s := range secrets {
		list = append(list, s)
	}
	// longest first, so that a value containing another is hidden whole
	sort.Slice(list, func(i, j int) bool {
		if len(list[i]) != len(list[j]) {
			return len(list[i]) > len(list[j])
		}
		return list[i] < list[j]
	})
	args := make([]string, 0, 2*len(list))
	for _, s := range list {
		args = append(args, s, redactedMark)
	}
	return strings.NewReplacer(args...).Replace(out)
}

// walkScalars calls fn with every scalar value under n (mapping values and
// sequence items; mapping keys are names, not secrets). Depth is bounded.
func walkScalars(n *yaml.Node, depth int, fn func(string)) {
	if n == nil || depth > 64 {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		fn(n.Value)
		// a multi-line value (a key file) also leaks line by line
		if strings.Contains(n.Value, "\n") {
			for _, l := range strings.Split(n.Value, "\n") {
				fn(l)
			}
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			walkScalars(n.Content[i], depth+1, fn)
		}
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			walkScalars(c, depth+1, fn)
		}
	}
}
