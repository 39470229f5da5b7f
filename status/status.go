package status

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Version is the format this build writes and the newest it reads.
const Version = 1

// Dir is the folder of the repository that holds the status documents.
const Dir = "status/"

// SummaryPath is the path of the summary document.
const SummaryPath = Dir + "summary.yaml"

const (
	rolloutsDir  = Dir + "rollouts/"
	nodesDir     = Dir + "nodes/"
	approvalsDir = Dir + "approvals/"
	ext          = ".yaml"
)

// RolloutPath is the path of rollout id's document.
func RolloutPath(id string) string { return rolloutsDir + id + ext }

// NodePath is the path of node id's document.
func NodePath(id string) string { return nodesDir + id + ext }

// ApprovalPath is the path of approval request id's document.
func ApprovalPath(id string) string { return approvalsDir + id + ext }

// Kind names a status document.
type Kind string

// The status documents. KindNone is a path that is no status document.
const (
	KindNone     Kind = ""
	KindSummary  Kind = "summary"
	KindRollout  Kind = "rollout"
	KindNode     Kind = "node"
	KindApproval Kind = "approval"
)

func (k Kind) String() string { return string(k) }

// ParsePath returns which document p is and, for the per-object ones, the
// id of its rollout, node or approval. It returns KindNone, "" for any
// other path (a file a human added, a subfolder, another extension).
func ParsePath(p string) (Kind, string) {
	if p == SummaryPath {
		return KindSummary, ""
	}
	for _, d := range []struct {
		dir  string
		kind Kind
	}{{rolloutsDir, KindRollout}, {nodesDir, KindNode}, {approvalsDir, KindApproval}} {
		rest, ok := strings.CutPrefix(p, d.dir)
		if !ok {
			continue
		}
		id, ok := strings.CutSuffix(rest, ext)
		if !ok || id == "" || strings.Contains(id, "/") {
			return KindNone, ""
		}
		return d.kind, id
	}
	return KindNone, ""
}

// FormatError is a document this build cannot read: written in a newer
// format (by a newer hub), or with a format that is no version at all.
type FormatError struct {
	Format string // the format field as written
	Newer  bool   // a valid version above Version
}

func (e *FormatError) Error() string {
	if e.Newer {
		return fmt.Sprintf("status format %s is newer than this build reads (up to %d): upgrade fleetwave to read it", e.Format, Version)
	}
	return fmt.Sprintf("status format %q is not a version: want a positive integer", e.Format)
}

// header opens every document: the file belongs to the hub.
const header = "# written by the fleetwave hub: edits here are overwritten\n"

// encode renders doc (a struct whose JSON form is an object) as a status
// document: header, format, then the other keys sorted.
func encode(doc any) ([]byte, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var generic map[string]any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	delete(generic, "format")
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("format: " + strconv.Itoa(Version) + "\n")
	if len(generic) == 0 {
		return b.Bytes(), nil
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(numbers(generic)); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// numbers turns the JSON numbers of v into int64 (or float64 when not an
// integer), so that YAML writes 1000000, not 1e+06.
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	}
	return v
}

// decode reads a status document into doc (a pointer to a struct) and
// returns its format: 1 when it has none, a *FormatError when this build
// cannot read it.
func decode(data []byte, doc any) (int, error) {
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		return 0, err
	}
	top, ok := generic.(map[string]any)
	if !ok {
		if generic == nil {
			return 0, errors.New("empty document")
		}
		return 0, fmt.Errorf("want a mapping at the top, got %T", generic)
	}
	format := 1
	if f, ok := top["format"]; ok {
		n, isInt := f.(int)
		switch {
		case !isInt || n < 1:
			return 0, &FormatError{Format: fmt.Sprint(f)}
		case n > Version:
			return 0, &FormatError{Format: strconv.Itoa(n), Newer: true}
		}
		format = n
	}
	delete(top, "format")
	b, err := json.Marshal(top)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, doc); err != nil {
		return 0, err
	}
	return format, nil
}
