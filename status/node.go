package status

import (
	"encoding/json"

	"github.com/fleetwave/fleetwave"
)

// Node is status/nodes/<id>.yaml: the node's last report (agent version,
// capabilities, instances), its drift, the items waiting on it and the
// instances held, and every version it ever reported.
type Node struct {
	// Format is the version the document was read at (Decode); Encode
	// always writes Version.
	Format int
	Node   string
	// Reported is false for a node the hub has no report of: the file then
	// says reported: false and has no agent_version or capabilities.
	Reported     bool
	AgentVersion string
	Capabilities []string
	// Instances are the reported instances by block (empty when not
	// reported).
	Instances []Instance
	// Drain is the node's drain flag in the snapshot; nil when the node is
	// not in it (UnknownNode) or the hub had no snapshot.
	Drain       *bool
	UnknownNode bool
	// Drift is how the node differs from what its BRCs want.
	Drift []Drift
	// ObservedVersions are, per block, every version the node reported,
	// oldest first: never forgotten (the rollback guard reads them).
	ObservedVersions map[string][]string
	// Waiting are the items pending or ambiguous on the node, by item id.
	Waiting []WaitingItem
	// Held are the instances on the node held or with a problem.
	Held []Held
}

// nodeFile is the written form of Node: what only a report gives is
// there only when the node reported.
type nodeFile struct {
	AgentVersion     *string             `json:"agent_version,omitempty"`
	Capabilities     *[]string           `json:"capabilities,omitempty"`
	Drain            *bool               `json:"drain,omitempty"`
	Drift            []Drift             `json:"drift,omitempty"`
	Held             []Held              `json:"held,omitempty"`
	Instances        []Instance          `json:"instances"`
	Node             string              `json:"node"`
	ObservedVersions map[string][]string `json:"observed_versions,omitempty"`
	Reported         *bool               `json:"reported,omitempty"`
	UnknownNode      bool                `json:"unknown_node,omitempty"`
	Waiting          []WaitingItem       `json:"waiting,omitempty"`
}

// MarshalJSON writes the file form of n.
func (n Node) MarshalJSON() ([]byte, error) { return NodeJSON(n) }

// NodeJSON is n's JSON form, what EncodeNode renders (see RenderJSON).
func NodeJSON(n Node) ([]byte, error) {
	f := nodeFile{Drain: n.Drain, Drift: n.Drift, Held: n.Held, Instances: n.Instances, Node: n.Node,
		ObservedVersions: n.ObservedVersions, UnknownNode: n.UnknownNode, Waiting: n.Waiting}
	if n.Reported {
		f.AgentVersion, f.Capabilities = &n.AgentVersion, &n.Capabilities
	} else {
		f.Reported = new(bool)
	}
	return json.Marshal(f)
}

// UnmarshalJSON reads the file form into n: a node is reported unless the
// file says reported: false.
func (n *Node) UnmarshalJSON(data []byte) error {
	var f nodeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*n = Node{Node: f.Node, Reported: f.Reported == nil || *f.Reported, Instances: f.Instances, Drain: f.Drain,
		UnknownNode: f.UnknownNode, Drift: f.Drift, ObservedVersions: f.ObservedVersions, Waiting: f.Waiting, Held: f.Held}
	if f.AgentVersion != nil {
		n.AgentVersion = *f.AgentVersion
	}
	if f.Capabilities != nil {
		n.Capabilities = *f.Capabilities
	}
	return nil
}

// Instance is one reported block instance.
type Instance struct {
	Block      string                 `json:"block"`
	ConfigHash string                 `json:"config_hash,omitempty"`
	Generation int64                  `json:"generation"`
	ManagedBy  string                 `json:"managed_by,omitempty"`
	State      fleetwave.DesiredState `json:"state,omitempty"`
	Version    string                 `json:"version,omitempty"`
}

// Drift is one way the node differs from what a BRC wants (observe mode
// shows it instead of acting), or stale_node for a node that stopped
// reporting.
type Drift struct {
	Block    string `json:"block,omitempty"`
	Desired  string `json:"desired,omitempty"`
	Kind     string `json:"kind"`
	Node     string `json:"node"`
	Observed string `json:"observed,omitempty"`
	Trigger  string `json:"trigger,omitempty"`
}

// WaitingItem is an item that waits on the node (pending, ambiguous) and
// why.
type WaitingItem struct {
	Action  string               `json:"action"`
	Block   string               `json:"block"`
	Item    string               `json:"item"`
	Reason  string               `json:"reason,omitempty"`
	Rollout string               `json:"rollout"`
	Status  fleetwave.ItemStatus `json:"status"`
}

// Held is an instance the reconciler holds (or cannot plan) on the node,
// with the BRC and why.
type Held struct {
	Block   string `json:"block"`
	BRC     string `json:"brc"`
	Message string `json:"message,omitempty"`
	Reason  string `json:"reason"`
}

// Observation is the report the document holds: what the node last
// reported as the hub committed it (the fields status keeps). A node that
// never reported gives a report with no instances: check Reported to tell.
func (n Node) Observation() *fleetwave.Report {
	r := &fleetwave.Report{Node: n.Node, AgentVersion: n.AgentVersion, Capabilities: n.Capabilities, Instances: []fleetwave.InstanceStatus{}}
	for _, in := range n.Instances {
		r.Instances = append(r.Instances, fleetwave.InstanceStatus{Block: in.Block, Version: in.Version, ConfigHash: in.ConfigHash,
			Generation: in.Generation, State: in.State, ManagedBy: in.ManagedBy})
	}
	return r
}

// EncodeNode renders n as status/nodes/<id>.yaml.
func EncodeNode(n Node) ([]byte, error) { return encode(n) }

// DecodeNode reads status/nodes/<id>.yaml. It fails on YAML that is no
// node document and, with a *FormatError, on a format this build cannot
// read.
func DecodeNode(data []byte) (Node, error) {
	var n Node
	f, err := decode(data, &n)
	if err != nil {
		return Node{}, err
	}
	n.Format = f
	return n, nil
}
