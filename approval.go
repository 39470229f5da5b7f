package fleetwave

import "time"

// ApprovalState is where an approval request stands.
type ApprovalState string

// Approval states. Pending waits for a decision; approved has one and
// creates its rollout, then is consumed (the rollout's id recorded). The
// others are terminal: rejected, expired (its TTL passed, counted on the
// hub's clock from when it first saw the request), stale (its BRC's
// target version changed before its rollout was created), refused (the
// submission was not accepted: unsigned or unknown signer, unknown brc,
// version not the BRC's, no matching node). A resubmission is a new
// request.
const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved"
	ApprovalConsumed ApprovalState = "consumed"
	ApprovalRejected ApprovalState = "rejected"
	ApprovalExpired  ApprovalState = "expired"
	ApprovalStale    ApprovalState = "stale"
	ApprovalRefused  ApprovalState = "refused"
)

func (s ApprovalState) String() string { return string(s) }

// Terminal reports whether nothing changes the request any more.
func (s ApprovalState) Terminal() bool {
	switch s {
	case ApprovalConsumed, ApprovalRejected, ApprovalExpired, ApprovalStale, ApprovalRefused:
		return true
	}
	return false
}

// Approval is an approval request as the hub tracks it: what it pins (a
// BRC's target version, the nodes resolved once at submission, a batch
// size), who submitted and who decided it (verified identities: a commit's
// signer or an API token's identity, never a name typed into a file), and
// what became of it.
type Approval struct {
	ID            string `json:"id" yaml:"id"`
	BRC           string `json:"brc" yaml:"brc"`
	TargetVersion string `json:"target_version" yaml:"target_version"`
	// Generation is the BRC's generation at submission.
	Generation int64 `json:"generation,omitempty" yaml:"generation,omitempty"`
	// Nodes are the pinned targets (a selector is resolved once, at
	// submission, and recorded in Selector for the record).
	Nodes     []string      `json:"nodes" yaml:"nodes"`
	Selector  string        `json:"selector,omitempty" yaml:"selector,omitempty"`
	BatchSize int           `json:"batch_size,omitempty" yaml:"batch_size,omitempty"`
	State     ApprovalState `json:"state" yaml:"state"`
	// Reason is the machine-readable why of a refused, expired or stale
	// request (e.g. unsigned, expired, version_changed); Message explains.
	Reason  string `json:"reason,omitempty" yaml:"reason,omitempty"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
	// SubmittedBy is the verified identity; SubmittedVia the commit that
	// added the request file, or "api".
	SubmittedBy  string    `json:"submitted_by,omitempty" yaml:"submitted_by,omitempty"`
	SubmittedVia string    `json:"submitted_via,omitempty" yaml:"submitted_via,omitempty"`
	SubmittedAt  time.Time `json:"submitted_at" yaml:"submitted_at"`
	DecidedBy    string    `json:"decided_by,omitempty" yaml:"decided_by,omitempty"`
	DecidedAt    time.Time `json:"decided_at,omitzero" yaml:"decided_at,omitempty"`
	// Rollout is the rollout the approval created.
	Rollout    string    `json:"rollout,omitempty" yaml:"rollout,omitempty"`
	ConsumedAt time.Time `json:"consumed_at,omitzero" yaml:"consumed_at,omitempty"`
	EndedAt    time.Time `json:"ended_at,omitzero" yaml:"ended_at,omitempty"`
}

// ApprovalRolloutID is the id of the rollout approval request id creates:
// one request, one rollout, ever.
func ApprovalRolloutID(id string) string { return "approval-" + id }
