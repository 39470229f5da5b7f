// Package fleetwave holds the domain vocabulary every fleetwave package shares:
// the objects of the config repository (nodes, blocks, rollout configs, ...),
// snapshots and generations, rollouts, items, attempts and reports.
//
// The package has no I/O and no logging; it imports only the standard library.
// Its names are the names of docs/contract.md#vocabulary, used the same way in files, the
// API, the console and the logs.
package fleetwave

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// Version is the fleetwave release; the build overrides it with -ldflags.
var Version = "0.1.0-dev"

// AgentBlock is the block of the fleetwave agent itself, kept at its target
// version by the system BRC that `fleetwave init` writes. Its observed
// instance is compared with the agent_version the running agent reports.
const AgentBlock = "fleetwave-agent"

// Kind names the kind of a repository object (the `kind` field of its file).
type Kind string

// The kinds of objects a config repository holds (docs/contract.md#the-config-repository).
const (
	KindConfig       Kind = "config"       // fleetwave.cue: global defaults (a BRC of kind config)
	KindTrigger      Kind = "trigger"      // brc/<name>: a rollout rule (a BRC of kind trigger)
	KindBlock        Kind = "block"        // blocks/<name>
	KindNode         Kind = "node"         // nodes/<id>
	KindOrganization Kind = "organization" // organizations/<name>
	KindWorkspace    Kind = "workspace"    // workspaces/<name>
	KindRollout      Kind = "rollout"      // rollouts/<id>: a manual rollout request
	KindApproval     Kind = "approval"     // approvals/<id>
)

func (k Kind) String() string { return string(k) }

// ObjectKey identifies one object of the repository: "<kind>/<name>", e.g.
// "trigger/web-upgrade" or "node/edge-001". It is the key of generations.
type ObjectKey string

// Key returns the ObjectKey of the object of kind k named name.
func Key(k Kind, name string) ObjectKey { return ObjectKey(string(k) + "/" + name) }

// Kind returns the kind part of the key.
func (k ObjectKey) Kind() Kind {
	s, _, _ := strings.Cut(string(k), "/")
	return Kind(s)
}

// Name returns the name part of the key.
func (k ObjectKey) Name() string {
	_, s, _ := strings.Cut(string(k), "/")
	return s
}

// Criticality orders dispatch: high before medium before low (configurable).
type Criticality string

// The criticality levels; the empty value means "inherit" (node -> workspace ->
// organization, default medium).
const (
	CriticalityHigh   Criticality = "high"
	CriticalityMedium Criticality = "medium"
	CriticalityLow    Criticality = "low"
)

// DesiredState is what a reconciliation BRC wants for its block instances.
type DesiredState string

// Desired states of a block instance.
const (
	StateInstalled DesiredState = "installed"
	StateRunning   DesiredState = "running"
	StateStopped   DesiredState = "stopped"
	StateAbsent    DesiredState = "absent"
)

// StateAfter is the state a block instance is in after a successful
// attempt of action: the attempt's desired state when it names one,
// otherwise the action's own (uninstall: absent, start: running, stop:
// stopped), otherwise the state it had (installed when it had none).
// Agents record it in their journal and report it.
func StateAfter(action string, desired, current DesiredState) DesiredState {
	if desired != "" {
		return desired
	}
	switch action {
	case "uninstall":
		return StateAbsent
	case "start":
		return StateRunning
	case "stop":
		return StateStopped
	}
	if current == "" {
		return StateInstalled
	}
	return current
}

// TriggerType says when a trigger BRC creates work.
type TriggerType string

// Trigger types.
const (
	TriggerReconciliation TriggerType = "reconciliation"
	TriggerSchedule       TriggerType = "schedule"
)

// Standard action names; blocks may define any other name.
const (
	ActionInstall   = "install"
	ActionUpgrade   = "upgrade"
	ActionApply     = "apply"
	ActionRollback  = "rollback"
	ActionStart     = "start"
	ActionStop      = "stop"
	ActionUninstall = "uninstall"
	ActionTakeover  = "takeover"
)

// ManagedByCLI marks a block instance installed out of band.
const ManagedByCLI = "cli"

// Node is a place an agent runs. Its persisted record is nodes/<id> in the repo.
type Node struct {
	ID                 string            `json:"name"`
	Organization       string            `json:"organization,omitempty"`
	Workspace          string            `json:"workspace,omitempty"`
	Criticality        Criticality       `json:"criticality,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	MaintenanceWindows []string          `json:"maintenance_windows,omitempty"`
	Capabilities       []string          `json:"capabilities,omitempty"`
	DataAddresses      map[string]string `json:"data_addresses,omitempty"`
	Drain              bool              `json:"drain,omitempty"`
}

// Organization is an optional record nodes inherit criticality and windows from.
type Organization struct {
	Name               string      `json:"name"`
	Criticality        Criticality `json:"criticality,omitempty"`
	MaintenanceWindows []string    `json:"maintenance_windows,omitempty"`
}

// Workspace is an optional record nodes inherit criticality and windows from.
type Workspace struct {
	Name               string      `json:"name"`
	Organization       string      `json:"organization,omitempty"`
	Criticality        Criticality `json:"criticality,omitempty"`
	MaintenanceWindows []string    `json:"maintenance_windows,omitempty"`
}

// BlockAction is one action of a block: a command the agent runs with sh -c.
type BlockAction struct {
	Command string        `json:"command"`
	Timeout time.Duration `json:"-"`
	// TimeoutText is the duration as written in the file ("5m").
	TimeoutText string `json:"timeout,omitempty"`
	// OneShot actions (restart, migrate) are never run twice for one item.
	OneShot bool `json:"one_shot,omitempty"`
	// Requires lists capabilities every node of the action must advertise.
	Requires []string `json:"requires,omitempty"`
	// Placement is PlacementSplit for an action that runs on all the
	// selected nodes together or on none (its items are one group, every
	// node of which must advertise Requires: a capability, or
	// "address:<name>" for a data address); empty or PlacementSingle for
	// an action each node runs on its own.
	Placement string `json:"placement,omitempty"`
}

// Placements of a block action.
const (
	PlacementSingle = "single"
	PlacementSplit  = "split"
)

// RequireAddressPrefix marks a requirement on a data address in
// BlockAction.Requires and ItemSpec.Requires: "address:<name>" is met by a
// node whose agent reports a non-empty data address <name>.
const RequireAddressPrefix = "address:"

// BlockDetect is how an agent finds an instance of a block installed
// without fleetwave (docs/contract.md#vocabulary): Command, run with sh -c,
// prints the installed version on its first line of stdout and exits 0
// when the block is installed, exits 1 when it is not; any other outcome
// (another exit code, a timeout) is "unknown" and changes nothing.
type BlockDetect struct {
	Command string        `json:"command"`
	Timeout time.Duration `json:"-"`
	// TimeoutText is the duration as written in the file ("30s").
	TimeoutText string `json:"timeout,omitempty"`
}

// DefaultDetectTimeout bounds a detect command that sets no timeout.
const DefaultDetectTimeout = 30 * time.Second

// Block is a deployable unit, defined once in blocks/<name>.
type Block struct {
	Name        string                 `json:"name"`
	Description string                 `json:"description,omitempty"`
	Owner       string                 `json:"owner,omitempty"`
	Actions     map[string]BlockAction `json:"actions"`
	// ConfigSchema is a CUE expression the rendered config must satisfy.
	ConfigSchema string `json:"config_schema,omitempty"`
	// Detect, when set, lets agents report instances of the block that
	// were installed by hand (managed_by cli).
	Detect *BlockDetect `json:"detect,omitempty"`
}

// Window is a named maintenance window: it opens at each cron tick (in its
// time zone) and stays open for Duration.
type Window struct {
	// Name is the window's key in the config's maintenance_windows.
	Name         string        `json:"name,omitempty"`
	Cron         string        `json:"cron"`
	DurationText string        `json:"duration"`
	Duration     time.Duration `json:"-"`
	Timezone     string        `json:"timezone,omitempty"`
	// Required is set on the window a trigger names (maintenance_window):
	// it must be open, and narrows the node's windows (one of which must be
	// open too) instead of adding to them. Not part of the config files.
	Required bool `json:"required,omitempty"`
}

// Config is the kind:config BRC (fleetwave.cue): global defaults.
type Config struct {
	Name                    string  `json:"name"`
	MaxConcurrent           int     `json:"max_concurrent,omitempty"`
	FailureThresholdPercent float64 `json:"failure_threshold_percent,omitempty"`
	// FailureThreshold halts a rollout once that many items failed
	// (0 = no count; either threshold reached halts it).
	FailureThreshold   int               `json:"failure_threshold,omitempty"`
	MaxRetries         int               `json:"max_retries,omitempty"`
	BackoffText        string            `json:"backoff,omitempty"`
	Backoff            time.Duration     `json:"-"`
	MaintenanceWindows map[string]Window `json:"maintenance_windows,omitempty"`
	// ReconcileMode is "observe" (dispatch nothing) or "enforce".
	ReconcileMode string `json:"reconcile_mode,omitempty"`
	// PriorityOrder lists criticalities in dispatch order.
	PriorityOrder []Criticality `json:"priority_order,omitempty"`
	// QuiescenceSeconds is the default for triggers.
	QuiescenceSeconds int `json:"quiescence_seconds,omitempty"`
	// Enablement stages what enforce mode may dispatch; nil = everything.
	Enablement *Enablement `json:"enablement,omitempty"`
}

// Enablement is the staged enablement of kind:config (docs/contract.md#rules): with it,
// lifecycle actions (install, start, stop, uninstall, takeover) run only on
// the nodes of Lifecycle, config actions (upgrade, apply, rollback, a
// trigger's action_name) only on those of ConfigApply; a nil scope enables
// nothing. The fleet is widened by commits, step by step.
type Enablement struct {
	Lifecycle   *EnablementScope `json:"lifecycle,omitempty"`
	ConfigApply *EnablementScope `json:"config_apply,omitempty"`
}

// EnablementScope selects nodes: all of them, a list, or a label selector
// (a node is in scope when any of these includes it).
type EnablementScope struct {
	All      bool      `json:"all,omitempty"`
	Nodes    []string  `json:"nodes,omitempty"`
	Selector *Selector `json:"selector,omitempty"`
}

// SelectorOrNil returns the scope's selector (nil for a nil scope).
func (s *EnablementScope) SelectorOrNil() *Selector {
	if s == nil {
		return nil
	}
	return s.Selector
}

// Includes reports whether node n is in the scope (never for a nil scope).
func (s *EnablementScope) Includes(n *Node) bool {
	if s == nil || n == nil {
		return false
	}
	return s.All || slices.Contains(s.Nodes, n.ID) || (!s.Selector.Empty() && s.Selector.Matches(n.Labels))
}

// Selector is a label selector (Kubernetes-like). MatchLabels are ANDed
// equality terms; MatchExpressions add in/notin/exists/doesnotexist terms.
type Selector struct {
	MatchLabels      map[string]string `json:"match_labels,omitempty"`
	MatchExpressions []SelectorTerm    `json:"match_expressions,omitempty"`
}

// SelectorTerm is one expression of a Selector.
type SelectorTerm struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"` // in, notin, exists, doesnotexist
	Values   []string `json:"values,omitempty"`
}

// Empty reports whether the selector has no term (and so selects nothing by itself).
func (s *Selector) Empty() bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// Matches reports whether labels satisfy every term of the selector.
// A nil or empty selector matches everything.
func (s *Selector) Matches(labels map[string]string) bool {
	if s == nil {
		return true
	}
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, t := range s.MatchExpressions {
		got, ok := labels[t.Key]
		switch t.Operator {
		case "exists":
			if !ok {
				return false
			}
		case "doesnotexist":
			if ok {
				return false
			}
		case "in":
			if !ok || !contains(t.Values, got) {
				return false
			}
		case "notin":
			if ok && contains(t.Values, got) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Trigger is a kind:trigger BRC (BlockRolloutConfig), with the field names of
// the originating API.
type Trigger struct {
	Name                    string       `json:"name"`
	BlockName               string       `json:"block_name"`
	ActionName              string       `json:"action_name,omitempty"`
	TargetVersion           string       `json:"target_version,omitempty"`
	TriggerType             TriggerType  `json:"trigger_type,omitempty"`
	CronExpression          string       `json:"cron_expression,omitempty"`
	Timezone                string       `json:"timezone,omitempty"`
	TargetOrganizations     []string     `json:"target_organizations,omitempty"`
	TargetWorkspaces        []string     `json:"target_workspaces,omitempty"`
	Selector                *Selector    `json:"selector,omitempty"`
	Nodes                   []string     `json:"nodes,omitempty"`
	MaxConcurrent           int          `json:"max_concurrent,omitempty"`
	MaxConcurrentPercent    float64      `json:"max_concurrent_percent,omitempty"`
	FailureThresholdPercent float64      `json:"failure_threshold_percent,omitempty"`
	FailureThreshold        int          `json:"failure_threshold,omitempty"`
	MaxRetries              int          `json:"max_retries,omitempty"`
	MaintenanceWindow       string       `json:"maintenance_window,omitempty"`
	BypassMaintenanceWindow bool         `json:"bypass_maintenance_window,omitempty"`
	AutoTakeover            bool         `json:"auto_takeover,omitempty"`
	QuiescenceSeconds       int          `json:"quiescence_seconds,omitempty"`
	BlockConfigTemplate     string       `json:"block_config_template,omitempty"`
	DesiredState            DesiredState `json:"desired_state,omitempty"`
	// ManagedBy is the owner group (lane) of the instances; default the BRC name.
	ManagedBy string `json:"managed_by,omitempty"`
}

// Owner returns the owner group of the trigger's instances (its lane):
// managed_by, else the block's owner, else the trigger's name. b may be nil.
func (t *Trigger) Owner(b *Block) string {
	switch {
	case t.ManagedBy != "":
		return t.ManagedBy
	case b != nil && b.Owner != "":
		return b.Owner
	}
	return t.Name
}

// RolloutRequest is a manual rollout request (rollouts/<id>).
type RolloutRequest struct {
	Name          string    `json:"name"`
	BRC           string    `json:"brc"`
	ActionName    string    `json:"action_name,omitempty"`
	TargetVersion string    `json:"target_version,omitempty"`
	Nodes         []string  `json:"nodes,omitempty"`
	Selector      *Selector `json:"selector,omitempty"`
	BatchSize     int       `json:"batch_size,omitempty"`
}

// ApprovalRequest is an approvals/<id> file: a config version of a BRC,
// nodes or a selector, a batch size, and later the decision. RequestedBy
// and DecidedBy, typed in the file, are never trusted: the hub takes the
// identities from the commits' verified signatures.
type ApprovalRequest struct {
	Name          string    `json:"name"`
	BRC           string    `json:"brc"`
	TargetVersion string    `json:"target_version"`
	Nodes         []string  `json:"nodes,omitempty"`
	Selector      *Selector `json:"selector,omitempty"`
	BatchSize     int       `json:"batch_size,omitempty"`
	RequestedBy   string    `json:"requested_by,omitempty"`
	Decision      string    `json:"decision,omitempty"` // "", approved, rejected
	DecidedBy     string    `json:"decided_by,omitempty"`
}

// Object is one decoded, validated object of a snapshot with where it came from.
type Object struct {
	Key  ObjectKey
	Path string // repository-relative path, slash-separated
	// Hash is the hash of the object's normalized content (sorted JSON); two
	// files with the same meaning have the same Hash.
	Hash string
}

// Snapshot is one validated tree of the config repository at a commit.
// Maps are keyed by object name (node id for nodes). A Snapshot is read-only
// once built.
type Snapshot struct {
	Commit        string // full hex commit hash ("" for a plain directory)
	Config        Config
	Triggers      map[string]*Trigger
	Blocks        map[string]*Block
	Nodes         map[string]*Node
	Organizations map[string]*Organization
	Workspaces    map[string]*Workspace
	Rollouts      map[string]*RolloutRequest
	Approvals     map[string]*ApprovalRequest
	// Objects lists every object of the tree with its path and content hash.
	Objects map[ObjectKey]Object
	// Generations holds each object's generation at Commit (docs/contract.md#vocabulary); an
	// object missing from the map has generation 0 (not yet computed).
	Generations map[ObjectKey]int64
	// NodeIDs holds the ids of Nodes in ascending order when the loader
	// set them, so that SortedNodeIDs and Scope do not sort the fleet
	// again each time (100,000 ids take tens of milliseconds, and a
	// plan, a drift and a status write scope every BRC). It is nil in a
	// snapshot built by hand; a copy that replaces Nodes sets it again,
	// or to nil. Nodes does not change once the snapshot is in use.
	NodeIDs []string
	// ChangedSince, when set, is the commit of the snapshot this one was
	// loaded from, and Changed the keys of the objects that may differ
	// between the two: every other object of either is the other's (a tree
	// loaded from the last one, schema.Sequence). ChangedFrom reads them,
	// so that a push's changes are found without comparing every object
	// (100,000 nodes take tens of ms).
	ChangedSince string
	Changed      []ObjectKey
}

// ChangedFrom returns the keys of the objects that may differ from prev's,
// and false when s does not tell (it was not loaded from prev's commit):
// then every object may.
func (s *Snapshot) ChangedFrom(prev *Snapshot) ([]ObjectKey, bool) {
	if s == nil || prev == nil || s.ChangedSince == "" || s.ChangedSince != prev.Commit {
		return nil, false
	}
	return s.Changed, true
}

// Generation returns the generation of the object, 0 when unknown.
func (s *Snapshot) Generation(k ObjectKey) int64 {
	if s == nil || s.Generations == nil {
		return 0
	}
	return s.Generations[k]
}

// SortedNodeIDs returns the ids of the snapshot's nodes in ascending order.
// The slice may be the snapshot's own (NodeIDs): callers read it and do
// not change its elements.
func (s *Snapshot) SortedNodeIDs() []string {
	if s.NodeIDs != nil && len(s.NodeIDs) == len(s.Nodes) {
		return s.NodeIDs[:len(s.NodeIDs):len(s.NodeIDs)] // an append copies
	}
	ids := make([]string, 0, len(s.Nodes))
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Scope returns the ids of the nodes trigger t addresses, sorted, draining
// nodes included: the nodes it lists in nodes (every node when it lists
// none) that are in one of its target_organizations and one of its
// target_workspaces (each only when given) and match its selector (when
// not empty). A node's organization is its own, else its workspace's.
// It is a pure function of the snapshot, shared by the reconciler and the
// schema's checks so both agree on which BRC owns which instance.
func (s *Snapshot) Scope(t *Trigger) []string {
	var ids []string
	if len(t.Nodes) > 0 {
		// the nodes it lists, not the fleet: a BRC of one node at 100,000
		// nodes is scoped in microseconds
		ids = make([]string, 0, len(t.Nodes))
		for _, id := range t.Nodes {
			if _, ok := s.Nodes[id]; ok {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
	} else {
		ids = s.SortedNodeIDs()
	}
	var out []string
	for _, id := range ids {
		n := s.Nodes[id]
		if len(t.TargetOrganizations) > 0 {
			org := n.Organization
			if ws := s.Workspaces[n.Workspace]; org == "" && ws != nil {
				org = ws.Organization
			}
			if !slices.Contains(t.TargetOrganizations, org) {
				continue
			}
		}
		if len(t.TargetWorkspaces) > 0 && !slices.Contains(t.TargetWorkspaces, n.Workspace) {
			continue
		}
		if !t.Selector.Empty() && !t.Selector.Matches(n.Labels) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// FileError is one problem of a repository file, printed as
// "path:line:col: message". Line and Col are 1-based; 0 means unknown.
type FileError struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
	Msg  string `json:"message"`
}

func (e FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		b.WriteString(":" + itoa(e.Line))
		if e.Col > 0 {
			b.WriteString(":" + itoa(e.Col))
		}
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// ValidationError lists every problem of a tree, sorted by path, line, col.
type ValidationError struct {
	Errors []FileError
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders the errors by path, line, column, then message.
func (e *ValidationError) Sort() {
	sort.SliceStable(e.Errors, func(i, j int) bool {
		a, b := e.Errors[i], e.Errors[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		return a.Msg < b.Msg
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

// DefaultActionTimeout is the timeout of a block action that sets none:
// the schema fills it in (defaults.block in the CUE definitions say the
// same, a test checks they agree), the engine bounds an attempt whose
// payload has none by it, and the agent a command.
const DefaultActionTimeout = 5 * time.Minute
