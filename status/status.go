package status

import (
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

// GenerationMarksPath is the path of the generation marks' document.
const GenerationMarksPath = Dir + "generation_marks.yaml"

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
	KindNone            Kind = ""
	KindSummary         Kind = "summary"
	KindGenerationMarks Kind = "generation_marks"
	KindRollout         Kind = "rollout"
	KindNode            Kind = "node"
	KindApproval        Kind = "approval"
)

func (k Kind) String() string { return string(k) }

// ParsePath returns which document p is and, for the per-object ones, the
// id of its rollout, node or approval. It returns KindNone, "" for any
// other path (a file a human added, a subfolder, another extension).
func ParsePath(p string) (Kind, string) {
	switch p {
	case SummaryPath:
		return KindSummary, ""
	case GenerationMarksPath:
		return KindGenerationMarks, ""
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
