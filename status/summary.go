package status

import (
	"encoding/json"
	"time"

	"github.com/fleetwave/fleetwave"
)

// Summary is status/summary.yaml: the fleet as a whole. Fields are in the
// order of the file (sorted by name).
type Summary struct {
	// Format is the version the document was read at (Decode); Encode
	// always writes Version.
	Format int `json:"-"`
	// Approval is the approval policy in force, the requests by state, and
	// the last commit whose approvals/ changes were processed. nil only in
	// documents written before approvals existed.
	Approval *ApprovalSummary `json:"approval,omitempty"`
	// Counters are the fleet's counters as it is now: the latest rollout
	// of each BRC and the open requests.
	Counters fleetwave.Counters `json:"counters"`
	// GenerationMarks are the generation marks as hubs wrote them here
	// before they had their own document (GenerationMarks); read when that
	// document is absent, never written.
	GenerationMarks map[fleetwave.ObjectKey]int64 `json:"generation_marks,omitempty"`
	// Generations gives, per trigger, the desired generation and the
	// lowest its in-scope instances report. nil when the hub had no valid
	// snapshot; empty (written as {}) when it had one without triggers.
	Generations map[fleetwave.ObjectKey]Generation `json:"generations,omitzero"`
	// HeldInstances counts the instances held or with a problem, by reason.
	HeldInstances map[string]int `json:"held_instances,omitempty"`
	// History counts every item ever.
	History fleetwave.Counters `json:"history"`
	// Lanes are the counters per owner lane.
	Lanes map[string]fleetwave.Counters `json:"lanes"`
	// Nodes is the number of nodes of the snapshot; nil without one.
	Nodes *int `json:"nodes,omitempty"`
	// ReconcileMode is the snapshot's reconcile_mode ("" without one).
	ReconcileMode string `json:"reconcile_mode,omitempty"`
	// Requests are the manual rollout requests: their rollout and state,
	// or why they were refused or wait.
	Requests map[string]fleetwave.RequestStatus `json:"requests,omitempty"`
	// Rollouts lists every rollout the engine holds, by id.
	Rollouts []RolloutLine `json:"rollouts"`
	// Schedules gives each schedule trigger's next tick.
	Schedules map[string]Schedule `json:"schedules,omitempty"`
	// SignedChanges are the latest commits to brc/, blocks/ and nodes/
	// with their verified signer (with the approval policy on).
	SignedChanges []SignedChange `json:"signed_changes,omitempty"`
	// Sync is the last sync of the tracked branch.
	Sync Sync `json:"sync"`
	// Waiting says, per BRC, why its new generation creates nothing yet.
	Waiting map[string]fleetwave.Wait `json:"waiting,omitempty"`
}

// ApprovalSummary is the "approval" section of the summary.
type ApprovalSummary struct {
	// Cursor is the last commit whose approvals/ changes were processed.
	Cursor   string `json:"cursor"`
	Required bool   `json:"required"`
	// Requests counts the approval requests by state.
	Requests map[string]int `json:"requests"`
	Scope    string         `json:"scope"`
	TTL      string         `json:"ttl"` // a Go duration: 24h0m0s
}

// Generation is a trigger's desired generation and the lowest generation
// its in-scope instances report (0: some did not report it).
type Generation struct {
	Desired  int64 `json:"desired"`
	Observed int64 `json:"observed"`
}

// RolloutLine is one rollout in the summary.
type RolloutLine struct {
	Counters fleetwave.Counters      `json:"counters"`
	ID       string                  `json:"id"`
	Reason   string                  `json:"reason,omitempty"`
	Source   string                  `json:"source"` // <object key>@<generation>
	Status   fleetwave.RolloutStatus `json:"status"`
	Wave     int                     `json:"wave"`
}

// Schedule is a schedule trigger's next tick (UTC).
type Schedule struct {
	NextFireAt time.Time `json:"next_fire_at"`
}

// SignedChange is a commit to brc/, blocks/ or nodes/ and its verified
// signer ("" when unsigned).
type SignedChange struct {
	Commit string   `json:"commit"`
	Paths  []string `json:"paths"`
	Signer string   `json:"signer"`
}

// Sync is the last sync of the tracked branch: the commit seen, the
// commit applied (the last valid one), the result ("ok", "rejected") and
// a rejected commit's errors as file:line:col: message.
type Sync struct {
	Applied string   `json:"applied"`
	Commit  string   `json:"commit"`
	Errors  []string `json:"errors,omitempty"`
	Message string   `json:"message,omitempty"`
	Result  string   `json:"result"`
}

// GenerationMarks is status/generation_marks.yaml: the highest generation
// ever given to each object (objects since deleted included), restored
// from here when the hub's mirror is lost, so generations never go down.
// A document of its own, written only when a mark changed: at 100,000
// nodes the marks are 2 MB of YAML, which the summary rendered and
// committed again with every status write.
type GenerationMarks struct {
	// Format is the version the document was read at.
	Format int                           `json:"-"`
	Marks  map[fleetwave.ObjectKey]int64 `json:"generation_marks"`
}

// GenerationMarksJSON is m's JSON form, what EncodeGenerationMarks renders
// (see RenderJSON).
func GenerationMarksJSON(m GenerationMarks) ([]byte, error) {
	if m.Marks == nil {
		m.Marks = map[fleetwave.ObjectKey]int64{}
	}
	return json.Marshal(m)
}

// EncodeGenerationMarks renders m as status/generation_marks.yaml.
func EncodeGenerationMarks(m GenerationMarks) ([]byte, error) {
	j, err := GenerationMarksJSON(m)
	if err != nil {
		return nil, err
	}
	return RenderJSON(j)
}

// DecodeGenerationMarks reads status/generation_marks.yaml. It fails on
// YAML that is no such document and, with a *FormatError, on a format
// this build cannot read.
func DecodeGenerationMarks(data []byte) (GenerationMarks, error) {
	var m GenerationMarks
	f, err := decode(data, &m)
	if err != nil {
		return GenerationMarks{}, err
	}
	m.Format = f
	return m, nil
}

// EncodeSummary renders s as status/summary.yaml.
func EncodeSummary(s Summary) ([]byte, error) { return encode(s) }

// DecodeSummary reads status/summary.yaml. It fails on YAML that is no
// summary and, with a *FormatError, on a format this build cannot read.
func DecodeSummary(data []byte) (Summary, error) {
	var s Summary
	f, err := decode(data, &s)
	if err != nil {
		return Summary{}, err
	}
	s.Format = f
	return s, nil
}
