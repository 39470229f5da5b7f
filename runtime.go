package fleetwave

import (
	"strconv"
	"time"
)

// ItemStatus is the state of an item (docs/contract.md#item).
type ItemStatus string

// Item states.
const (
	ItemPending    ItemStatus = "pending"
	ItemInProgress ItemStatus = "in_progress"
	ItemCompleted  ItemStatus = "completed"
	ItemFailed     ItemStatus = "failed"
	ItemRetrying   ItemStatus = "retrying"
	ItemBlocked    ItemStatus = "blocked"
	ItemAmbiguous  ItemStatus = "ambiguous"
	ItemSkipped    ItemStatus = "skipped"
)

func (s ItemStatus) String() string { return string(s) }

// Active reports whether an item in this state still occupies its block
// instance (at most one active item per instance).
func (s ItemStatus) Active() bool {
	switch s {
	case ItemPending, ItemInProgress, ItemRetrying, ItemAmbiguous:
		return true
	}
	return false
}

// Terminal reports whether the item will not change any more by itself.
func (s ItemStatus) Terminal() bool {
	switch s {
	case ItemCompleted, ItemFailed, ItemBlocked, ItemSkipped:
		return true
	}
	return false
}

// RolloutStatus is the state of a rollout.
type RolloutStatus string

// Rollout states.
const (
	RolloutActive    RolloutStatus = "active"
	RolloutPaused    RolloutStatus = "paused"
	RolloutBlocked   RolloutStatus = "blocked"
	RolloutCompleted RolloutStatus = "completed"
	RolloutCancelled RolloutStatus = "cancelled"
	// RolloutSuperseded: a newer generation of the same source object
	// replaced the rollout; its pending items were skipped, its attempts in
	// flight finished, and its counters stay as they were.
	RolloutSuperseded RolloutStatus = "superseded"
)

// Finished reports whether a rollout in this state changes no more by
// itself (completed, cancelled, superseded).
func (s RolloutStatus) Finished() bool {
	return s == RolloutCompleted || s == RolloutCancelled || s == RolloutSuperseded
}

func (s RolloutStatus) String() string { return string(s) }

// ItemSource says what created an item.
type ItemSource string

// Item sources.
const (
	SourceScheduler ItemSource = "scheduler"
	SourceManual    ItemSource = "manual"
	SourceApproval  ItemSource = "approval"
)

// ResultClass classifies the outcome of an attempt (docs/contract.md#item).
type ResultClass string

// Result classes: exit 0 = success, 75 = transient, other non-zero = permanent;
// lost = no result before the deadline.
const (
	ResultSuccess   ResultClass = "success"
	ResultTransient ResultClass = "transient"
	ResultPermanent ResultClass = "permanent"
	ResultLost      ResultClass = "lost"
)

// ExitTransient is the exit code a block command uses for "try again later".
const ExitTransient = 75

// ClassifyExit maps a command's exit code to a result class.
func ClassifyExit(code int) ResultClass {
	switch code {
	case 0:
		return ResultSuccess
	case ExitTransient:
		return ResultTransient
	}
	return ResultPermanent
}

// Reason codes: the machine-readable answer to "why is it not progressing?".
const (
	ReasonMaintenanceWindow = "maintenance_window"
	ReasonLaneFull          = "lane_full"
	ReasonWaveGate          = "wave_gate"
	ReasonFailureThreshold  = "failure_threshold"
	ReasonApprovalRequired  = "approval_required"
	ReasonNodeDraining      = "node_draining"
	ReasonAwaitingReport    = "awaiting_report"
	ReasonBackoff           = "backoff"
	ReasonCLIManaged        = "cli_managed"
	ReasonSuperseded        = "superseded"
	ReasonObserveMode       = "observe_mode"
	ReasonNoMatchingNodes   = "no_matching_nodes"
	// ReasonInstanceBusy: an item of a one-shot event (a manual request, a
	// schedule tick) waits for the item that holds its block instance.
	ReasonInstanceBusy = "instance_busy"
	// ReasonReportMismatch: the agent reported success but the instance it
	// reports does not show the item's generation, version or state.
	ReasonReportMismatch = "report_mismatch"
	// ReasonQuiescence: a new generation waits until its BRC saw no newer
	// commit for quiescence_seconds, so a burst of commits is one event.
	ReasonQuiescence = "quiescence"
	// ReasonClaim: a one-shot event's rollout waits until its record is
	// committed to Git, so that it never runs twice, even after Redis is lost.
	ReasonClaim = "claim"
	// ReasonStateLost: the hub's Redis lost a rollout that was not
	// finished (a total loss of its data). The rollout's document in Git is
	// closed: cancelled, its pending items skipped, the items whose attempt
	// may have run blocked; nothing of it runs again by itself.
	ReasonStateLost = "state_lost"
	// ReasonAgentUpgradeFailed: the agent's built-in upgrade of the
	// fleetwave-agent block did not bring the new build into service (no
	// such build, a bad checksum, a build that did not start or did not
	// report in time); the previous build stays or was restored. A failed
	// upgrade is permanent: its result's output starts with this reason.
	ReasonAgentUpgradeFailed = "agent_upgrade_failed"
)

// InstanceKey identifies a block instance: one block on one node.
type InstanceKey struct {
	Node  string `json:"node"`
	Block string `json:"block"`
}

func (k InstanceKey) String() string { return k.Block + "@" + k.Node }

// ItemSpec is what the reconciler asks the engine to do for one block instance.
type ItemSpec struct {
	Node          string       `json:"node"`
	Block         string       `json:"block"`
	Action        string       `json:"action"`
	Generation    int64        `json:"generation"` // the source object's generation
	TargetVersion string       `json:"target_version,omitempty"`
	ConfigHash    string       `json:"config_hash,omitempty"` // sha256 of the rendered config, hex
	DesiredState  DesiredState `json:"desired_state,omitempty"`
	ManagedBy     string       `json:"managed_by,omitempty"` // lane
	Criticality   Criticality  `json:"criticality,omitempty"`
	// Windows are the maintenance windows the instance's node is bound by
	// (node, workspace, organization and the trigger's named window); the
	// item waits for one of them to be open. Empty = always open.
	Windows []Window `json:"windows,omitempty"`
	// BypassWindows dispatches regardless of windows (manual and approval
	// sources, bypass_maintenance_window).
	BypassWindows bool `json:"bypass_windows,omitempty"`
	// Group ties the items of one split (multi-node) action: they are
	// dispatched all together or not at all. Empty = a single-node item.
	Group string `json:"group,omitempty"`
	// Requires lists capabilities the node must advertise (in its last full
	// report) for the item to be placed; for a group, every node of it.
	Requires []string `json:"requires,omitempty"`
	// SkipReason creates the item directly as skipped with this reason
	// (e.g. cli_managed), so the conflict is visible and counted.
	SkipReason string `json:"skip_reason,omitempty"`
	// BlockReason creates the item directly as blocked with this reason
	// (e.g. invalid_config) and BlockMessage: it is never dispatched and
	// stays blocked until a newer generation or a different config.
	BlockReason  string `json:"block_reason,omitempty"`
	BlockMessage string `json:"block_message,omitempty"`
	// Payload is what the agent needs to run the action (command, config);
	// it never appears in status files, logs or API answers other than the
	// agent's own attempt endpoint.
	Payload AttemptPayload `json:"payload"`
}

// Instance returns the block instance the spec is for.
func (s ItemSpec) Instance() InstanceKey { return InstanceKey{Node: s.Node, Block: s.Block} }

// AttemptPayload is the work an agent runs for one attempt.
type AttemptPayload struct {
	Command string `json:"command"`
	// TimeoutSeconds bounds the command; the agent kills its process group after it.
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
	Config         string `json:"config,omitempty"` // rendered block config (YAML)
	OneShot        bool   `json:"one_shot,omitempty"`
	// Operational actions (backup, restart, ...) leave the instance as it
	// is: the agent records the attempt but keeps the instance's version,
	// config hash, state, owner and generation (and creates no instance).
	Operational bool `json:"operational,omitempty"`
}

// RolloutSource records what created a rollout.
type RolloutSource struct {
	Object     ObjectKey  `json:"object,omitempty"`
	Generation int64      `json:"generation,omitempty"`
	Commit     string     `json:"commit,omitempty"`
	Actor      string     `json:"actor,omitempty"`
	Kind       ItemSource `json:"kind"`
}

// RolloutSpec asks the engine for a rollout over items.
type RolloutSpec struct {
	// BaseID is the id of the trigger event's rollout (e.g.
	// "web-upgrade-g3"): a later spec of the same event (same id, source
	// object, generation and kind) joins that rollout; the engine adds a
	// suffix only when another event holds the id.
	BaseID        string        `json:"base_id"`
	Source        RolloutSource `json:"source"`
	MaxConcurrent int           `json:"max_concurrent"`
	// FailureThresholdPercent halts the rollout once exceeded (0 = off);
	// FailureThreshold once that many items failed (0 = off): either one
	// reached halts it.
	FailureThresholdPercent float64 `json:"failure_threshold_percent,omitempty"`
	FailureThreshold        int     `json:"failure_threshold,omitempty"`
	MaxRetries              int     `json:"max_retries,omitempty"`
	// Backoff is the base delay of the rollout's retries (the config's
	// backoff): base*2^retry_count, capped by the engine's maximum (or by
	// Backoff when larger), with jitter. 0 = the engine's default.
	Backoff time.Duration `json:"backoff,omitempty"`
	Items   []ItemSpec    `json:"items"`
	// ObservedVersion is the engine's change counter read with the
	// observations behind the plan (engine.Observe; 0 = unknown). The
	// engine drops a spec whose instance finished an item of the same or a
	// newer generation after that read: that plan was made on stale
	// observations. A counter, not a time: replicas' clocks may differ and a
	// result stamped before the read may land after it.
	ObservedVersion int64 `json:"observed_version,omitempty"`
	// Budget names the concurrency budget the rollout shares (a BRC's
	// name): BudgetCap bounds the items in flight per lane across every
	// rollout of the budget (older generations finishing, manual
	// requests), besides MaxConcurrent for this rollout's waves. Empty =
	// no shared bound.
	Budget    string `json:"budget,omitempty"`
	BudgetCap int    `json:"budget_cap,omitempty"`
	// Supersede ends the active, paused and blocked rollouts of older
	// generations of Source.Object as superseded (converging rollouts of a
	// reconciliation BRC), even when this spec has no item.
	Supersede bool `json:"supersede,omitempty"`
	// Once marks a one-shot event (a manual request, a schedule tick, an
	// approval): each block instance gets at most one item in its rollout,
	// ever, and an item whose instance is held by another waits behind it
	// (instance_busy) instead of being dropped.
	Once bool `json:"once,omitempty"`
	// Hold creates the rollout held with this reason (e.g. claim): nothing
	// is dispatched until Release.
	Hold string `json:"hold,omitempty"`
}

// Counters are the dashboard counters. Always:
// Total = Done + InProgress + Pending + Failed + Skipped.
type Counters struct {
	Total      int64 `json:"total" yaml:"total"`
	Done       int64 `json:"done" yaml:"done"`               // completed
	InProgress int64 `json:"in_progress" yaml:"in_progress"` // in_progress, retrying, ambiguous
	Pending    int64 `json:"pending" yaml:"pending"`
	Failed     int64 `json:"failed" yaml:"failed"` // failed, blocked
	Skipped    int64 `json:"skipped" yaml:"skipped"`
}

// Add counts one item of status s.
func (c *Counters) Add(s ItemStatus, n int64) {
	c.Total += n
	switch s {
	case ItemCompleted:
		c.Done += n
	case ItemInProgress, ItemRetrying, ItemAmbiguous:
		c.InProgress += n
	case ItemPending:
		c.Pending += n
	case ItemFailed, ItemBlocked:
		c.Failed += n
	case ItemSkipped:
		c.Skipped += n
	}
}

// Rollout is a rollout's state as the engine reports it.
type Rollout struct {
	ID                      string        `json:"id"`
	Status                  RolloutStatus `json:"status"`
	Reason                  string        `json:"reason,omitempty"`
	Source                  RolloutSource `json:"source"`
	MaxConcurrent           int           `json:"max_concurrent"`
	FailureThresholdPercent float64       `json:"failure_threshold_percent,omitempty"`
	FailureThreshold        int           `json:"failure_threshold,omitempty"`
	Wave                    int           `json:"wave"` // number of the current (last started) wave
	// Hold, when set, keeps the rollout from dispatching (e.g. claim: until
	// its record is committed to Git).
	Hold      string    `json:"hold,omitempty"`
	Counters  Counters  `json:"counters"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Filling says the engine is still creating the rollout's items (a
	// large rollout is created in chunks): what it holds is not all of
	// them yet. Not part of the API's answer.
	Filling bool `json:"-"`
}

// Item is one queue entry (BRI) as the engine reports it.
type Item struct {
	ID            string       `json:"id"`
	Rollout       string       `json:"rollout"`
	Node          string       `json:"node"`
	Block         string       `json:"block"`
	Action        string       `json:"action"`
	Generation    int64        `json:"generation"`
	TargetVersion string       `json:"target_version,omitempty"`
	ConfigHash    string       `json:"config_hash,omitempty"`
	ManagedBy     string       `json:"managed_by,omitempty"`
	Criticality   Criticality  `json:"criticality,omitempty"`
	Status        ItemStatus   `json:"status"`
	Reason        string       `json:"reason,omitempty"`
	Source        ItemSource   `json:"source"`
	SourceUser    string       `json:"source_user,omitempty"`
	Wave          int          `json:"wave,omitempty"`
	RetryCount    int          `json:"retry_count"`
	RetryAfter    time.Time    `json:"retry_after,omitzero"`
	DispatchedAt  time.Time    `json:"dispatched_at,omitzero"`
	CompletedAt   time.Time    `json:"completed_at,omitzero"`
	Attempts      int          `json:"attempts"`
	LastAttempt   string       `json:"last_attempt,omitempty"`
	LastClass     ResultClass  `json:"last_failure_class,omitempty"`
	DesiredState  DesiredState `json:"desired_state,omitempty"`
	// Message explains a blocked item that was never dispatched (e.g. the
	// config_schema error of its rendered config; it names fields, never
	// values).
	Message string `json:"message,omitempty"`
	// Output is the tail of the last failed attempt's output, redacted by
	// the agent (every value of the rendered config hidden).
	Output string `json:"output,omitempty"`
}

// Attempt is one dispatch of an item to an agent.
type Attempt struct {
	ID            string         `json:"id"`
	Item          string         `json:"item"`
	Rollout       string         `json:"rollout"`
	Node          string         `json:"node"`
	Block         string         `json:"block"`
	Action        string         `json:"action"`
	Generation    int64          `json:"generation"`
	TargetVersion string         `json:"target_version,omitempty"`
	ConfigHash    string         `json:"config_hash,omitempty"`
	DesiredState  DesiredState   `json:"desired_state,omitempty"`
	ManagedBy     string         `json:"managed_by,omitempty"`
	Fence         int64          `json:"fence"`
	Deadline      time.Time      `json:"deadline"`
	Payload       AttemptPayload `json:"payload"`
	// Delivery numbers the attempt among those polled by its node (per node,
	// increasing; 0 from a hub that does not number them). The agent keeps
	// the highest it journalled and says it in its next polls (Receipt).
	Delivery int64 `json:"delivery,omitempty"`
}

// Receipt is what a polling agent says of the attempts it received.
type Receipt struct {
	// Delivered is the highest Delivery among the attempts the agent
	// journalled (0: none).
	Delivered int64
	// Resume says the agent's previous poll failed, or that it has just
	// started: an answer may have been lost on its way, and the attempts
	// delivered after Delivered never reached the agent. The hub sends
	// them again rather than wait out their deadlines. An agent that says
	// nothing (an older one) leaves them to their deadlines.
	Resume bool
}

// Query is rc as a poll's query says it ("&delivered=N&resume=true", each
// part only when set), to append to "?wait=...".
func (rc Receipt) Query() string {
	q := ""
	if rc.Delivered > 0 {
		q += "&delivered=" + strconv.FormatInt(rc.Delivered, 10)
	}
	if rc.Resume {
		q += "&resume=true"
	}
	return q
}

// AttemptResult is what an agent sends back for one attempt.
type AttemptResult struct {
	AttemptID string      `json:"attempt_id"`
	Fence     int64       `json:"fence"`
	Class     ResultClass `json:"class"`
	ExitCode  int         `json:"exit_code"`
	// Output is a bounded, redacted tail of the command's output.
	Output string `json:"output,omitempty"`
	// Instance is the block instance as the agent observed it after the action.
	Instance *InstanceStatus `json:"instance,omitempty"`
	// Reason, on a permanent result, names why when the agent knows better
	// than "permanent_failure": one of PermanentReasons.
	Reason string `json:"reason,omitempty"`
}

// PermanentReasons are the reasons an agent may give a permanent result
// (AttemptResult.Reason); the item is blocked with that reason.
var PermanentReasons = []string{ReasonAgentUpgradeFailed}

// InstanceStatus is one block instance as an agent observed it.
type InstanceStatus struct {
	Block       string       `json:"block"`
	Version     string       `json:"version,omitempty"`
	ConfigHash  string       `json:"config_hash,omitempty"`
	Generation  int64        `json:"generation"` // the generation of the item that last changed it
	State       DesiredState `json:"state,omitempty"`
	ManagedBy   string       `json:"managed_by,omitempty"`
	LastAttempt string       `json:"last_attempt,omitempty"`
	UpdatedAt   time.Time    `json:"updated_at,omitzero"`
}

// Report is an agent's full observation of its node.
type Report struct {
	Node          string            `json:"node"`
	AgentVersion  string            `json:"agent_version,omitempty"`
	Capabilities  []string          `json:"capabilities,omitempty"`
	DataAddresses map[string]string `json:"data_addresses,omitempty"`
	Instances     []InstanceStatus  `json:"instances"`
	// Attempts lists attempt ids the agent has journalled (ran or refused).
	Attempts []string  `json:"attempts,omitempty"`
	SentAt   time.Time `json:"sent_at"`
	// ReceivedAt is set by the hub.
	ReceivedAt time.Time `json:"received_at,omitzero"`
	// Detected lists the blocks of the hub's detect commands
	// (DetectCommand) this report accounts for: those fleetwave manages on
	// the node and those whose detect command answered (exit 0 or 1). An
	// instance a detect command found that fleetwave did not install is in
	// Instances with ManagedBy ManagedByCLI.
	Detected []string `json:"detected,omitempty"`
}

// DetectCommand is a block's detect command as the hub hands it to the
// agent of a node in the scope of a BRC of the block (GET
// /api/v1/agent/nodes/{node}/detect).
type DetectCommand struct {
	Block          string `json:"block"`
	Command        string `json:"command"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// Observations are the latest full reports, keyed by node id.
type Observations map[string]*Report

// Instance returns the observed block instance, or nil.
func (o Observations) Instance(k InstanceKey) *InstanceStatus {
	r := o[k.Node]
	if r == nil {
		return nil
	}
	for i := range r.Instances {
		if r.Instances[i].Block == k.Block {
			return &r.Instances[i]
		}
	}
	return nil
}

// SyncState is the result of the last sync of the config repository.
type SyncState struct {
	// Commit is the newest commit seen on the tracked branch.
	Commit string `json:"commit,omitempty" yaml:"commit,omitempty"`
	// Applied is the commit whose snapshot is in force (the last good one).
	Applied string `json:"applied,omitempty" yaml:"applied,omitempty"`
	// Result is "ok", "rejected" (invalid commit) or "error" (could not fetch).
	Result string      `json:"result,omitempty" yaml:"result,omitempty"`
	Errors []FileError `json:"errors,omitempty" yaml:"errors,omitempty"`
	// Message describes a fetch error.
	Message string    `json:"message,omitempty" yaml:"message,omitempty"`
	At      time.Time `json:"at,omitzero" yaml:"at,omitempty"`
}

// RequestStatus is what became of a manual rollout request
// (rollouts/<name>): the rollout it created and that rollout's state
// ("claimed" while its record is not yet in Git), or why it created none
// (State "refused", with the error code, e.g. no_matching_nodes), or why it
// waits (State "waiting", e.g. observe_mode). Once a request has a rollout
// or a refusal it is handled, for good.
type RequestStatus struct {
	Rollout string `json:"rollout,omitempty" yaml:"rollout,omitempty"`
	State   string `json:"state" yaml:"state"`
	Code    string `json:"code,omitempty" yaml:"code,omitempty"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

// Request states (RequestStatus.State) besides a rollout's status.
const (
	RequestClaimed = "claimed"
	RequestRefused = "refused"
	RequestWaiting = "waiting"
)

// Handled reports whether the request was handled: it has a rollout or a
// refusal.
func (r RequestStatus) Handled() bool { return r.Rollout != "" || r.State == RequestRefused }

// Summary is the fleet-wide view: the dashboard counters, the last sync and
// the rollouts.
type Summary struct {
	// Counters describe the fleet now (FleetCounters): the latest rollout of
	// each BRC and the open manual requests.
	Counters Counters `json:"counters"`
	// History counts every item ever created, of every rollout.
	History  Counters  `json:"history"`
	Sync     SyncState `json:"sync"`
	Nodes    int       `json:"nodes"`
	Rollouts []Rollout `json:"rollouts"`
	// Requests says what became of each manual request, by name.
	Requests map[string]RequestStatus `json:"requests,omitempty"`
	// Waiting says, per BRC, why its new generation creates nothing yet
	// (approval_required, quiescence).
	Waiting map[string]Wait `json:"waiting,omitempty"`
}

// Wait is why a BRC's new generation creates nothing yet: an approval it
// needs (what one must pin, the requests already submitted), or the
// quiescence it waits out (until when).
type Wait struct {
	Reason        string    `json:"reason" yaml:"reason"`
	TargetVersion string    `json:"target_version,omitempty" yaml:"target_version,omitempty"`
	Generation    int64     `json:"generation,omitempty" yaml:"generation,omitempty"`
	Nodes         int       `json:"nodes,omitempty" yaml:"nodes,omitempty"`
	Approvals     []string  `json:"approvals,omitempty" yaml:"approvals,omitempty"`
	Until         time.Time `json:"until,omitzero" yaml:"until,omitempty"`
	Message       string    `json:"message,omitempty" yaml:"message,omitempty"`
}

// Plus returns the sum of c and o.
func (c Counters) Plus(o Counters) Counters {
	return Counters{Total: c.Total + o.Total, Done: c.Done + o.Done, InProgress: c.InProgress + o.InProgress,
		Pending: c.Pending + o.Pending, Failed: c.Failed + o.Failed, Skipped: c.Skipped + o.Skipped}
}

// CurrentRollouts returns the rollouts that describe the fleet now, in the
// order given: per trigger (a BRC), its latest rollout (highest generation,
// then the newest) unless superseded; and every rollout of another source
// (a manual request, an approval) that is not finished. Older generations,
// earlier schedule ticks and finished requests are history.
func CurrentRollouts(rs []Rollout) []Rollout {
	latest := map[ObjectKey]int{} // trigger -> index in rs
	for i, r := range rs {
		if r.Source.Object.Kind() != KindTrigger {
			continue
		}
		j, ok := latest[r.Source.Object]
		if !ok {
			latest[r.Source.Object] = i
			continue
		}
		o := rs[j]
		if r.Source.Generation > o.Source.Generation ||
			(r.Source.Generation == o.Source.Generation && r.CreatedAt.After(o.CreatedAt)) {
			latest[r.Source.Object] = i
		}
	}
	var out []Rollout
	for i, r := range rs {
		if r.Source.Object.Kind() == KindTrigger {
			if latest[r.Source.Object] == i && r.Status != RolloutSuperseded {
				out = append(out, r)
			}
		} else if !r.Status.Finished() {
			out = append(out, r)
		}
	}
	return out
}

// FleetCounters sums the counters of the rollouts that describe the fleet
// now (CurrentRollouts): the dashboard's Total = Done + In Progress +
// Pending + Failed + Skipped of the fleet as it is, not of its history.
func FleetCounters(rs []Rollout) Counters {
	var c Counters
	for _, r := range CurrentRollouts(rs) {
		c = c.Plus(r.Counters)
	}
	return c
}
