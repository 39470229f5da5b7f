package status

import "github.com/fleetwave/fleetwave"

// Approval is status/approvals/<id>.yaml: an approval request as the
// engine records it (what it pins, who submitted and decided it, its state
// and the rollout it created) and what its rollout waits for.
type Approval struct {
	// Format is the version the document was read at (Decode); Encode
	// always writes Version.
	Format int `json:"-"`
	fleetwave.Approval
	// Waiting says why an approved request has no rollout yet (e.g.
	// awaiting_report: n1, n2).
	Waiting string `json:"waiting,omitempty"`
}

// EncodeApproval renders a as status/approvals/<id>.yaml.
func EncodeApproval(a Approval) ([]byte, error) { return encode(a) }

// DecodeApproval reads status/approvals/<id>.yaml. It fails on YAML that
// is no approval document and, with a *FormatError, on a format this
// build cannot read.
func DecodeApproval(data []byte) (Approval, error) {
	var a Approval
	f, err := decode(data, &a)
	if err != nil {
		return Approval{}, err
	}
	a.Format = f
	return a, nil
}
