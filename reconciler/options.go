package reconciler

import (
	"slices"

	"github.com/fleetwave/fleetwave"
)

// Reasons the reconciler gives for instances it holds on purpose (Plan.Holds).
const (
	// ReasonLifecycleDisabled: the node is outside the lifecycle enablement
	// scope, so install/start/stop/uninstall/takeover are not planned for it.
	ReasonLifecycleDisabled = "lifecycle_disabled"
	// ReasonConfigApplyDisabled: config actions (upgrade, apply, rollback or
	// the trigger's action_name) are not enabled yet.
	ReasonConfigApplyDisabled = "config_apply_disabled"
	// ReasonUnknownWindow: a maintenance window name does not resolve in the
	// config; the instance is not planned (fails closed).
	ReasonUnknownWindow = "unknown_window"
	// ReasonInvalidConfig: the block_config_template did not render, or its
	// output does not satisfy the block's config_schema; the item is created
	// blocked with the error (never dispatched) until a newer generation.
	ReasonInvalidConfig = "invalid_config"
	// ReasonUnknownAction: the block has no such action.
	ReasonUnknownAction = "unknown_action"
	// ReasonNotInstalled: an operational action (restart, backup, ...) of a
	// manual request targets a node that reports no instance of the block;
	// the item is recorded as skipped.
	ReasonNotInstalled = "not_installed"
)

// converging reports whether action changes what an instance is (its
// version, config, state or owner), as opposed to an operational action
// (restart, backup, ...) that leaves the instance as it is.
func converging(t *fleetwave.Trigger, action string) bool {
	switch action {
	case fleetwave.ActionInstall, fleetwave.ActionUpgrade, fleetwave.ActionApply, fleetwave.ActionRollback,
		fleetwave.ActionStart, fleetwave.ActionStop, fleetwave.ActionUninstall, fleetwave.ActionTakeover:
		return true
	}
	return t.TriggerType != fleetwave.TriggerSchedule && action == configAction(t)
}

// leaveInstance clears what an item would write into its instance: an
// operational action or a takeover keeps the instance's version, config
// hash and state (the agent keeps every field an attempt leaves empty).
func leaveInstance(item *fleetwave.ItemSpec) {
	item.TargetVersion, item.ConfigHash, item.DesiredState = "", "", ""
}

// CredentialFunc returns the credential name of scope, creating a random one
// of length characters the first time; later calls (and later processes)
// return the same value. It must be safe for concurrent use and must never
// put the value into an error. The hub backs it with internal/credstore.
type CredentialFunc func(scope, name string, length int) (string, error)

// Options carry what the hub decides outside the repository. The zero value
// means: no credentials (credential_get_or_create fails) and no staged
// enablement (enforce mode may dispatch everything).
type Options struct {
	// Credential backs credential_get_or_create in templates. Nil makes the
	// template function fail with a clear error.
	Credential CredentialFunc
	// Enablement restricts what enforce mode may dispatch (DESIGN §6 staged
	// enablement). Nil = everything enabled.
	Enablement *Enablement
	// ValidateConfig checks a rendered config against a block's
	// config_schema; a failure makes the instance an invalid_config problem
	// (not dispatched until a new generation fixes it). Nil = not checked.
	ValidateConfig func(schema, rendered string) error
}

// Enablement is the staged-enablement policy: lifecycle reconciliation for a
// node list or selector, config apply/rollback enabled separately. Instances
// it holds back are listed in Plan.Holds with ReasonLifecycleDisabled or
// ReasonConfigApplyDisabled; they are planned as soon as the policy widens.
type Enablement struct {
	// LifecycleNodes and LifecycleSelector select the nodes on which
	// lifecycle actions (install, start, stop, uninstall, takeover) are
	// enabled; a node is enabled when it is listed OR matches the (non-empty)
	// selector. Both empty = lifecycle enabled nowhere.
	LifecycleNodes    []string            `json:"lifecycle_nodes,omitempty"`
	LifecycleSelector *fleetwave.Selector `json:"lifecycle_selector,omitempty"`
	// ConfigApplyEnabled enables config actions (upgrade, apply, rollback and
	// the trigger's action_name) on every node in scope.
	ConfigApplyEnabled bool `json:"config_apply_enabled,omitempty"`
}

// lifecycleAction reports whether an action changes the lifecycle of an
// instance (as opposed to its version or configuration).
func lifecycleAction(a string) bool {
	switch a {
	case fleetwave.ActionInstall, fleetwave.ActionStart, fleetwave.ActionStop, fleetwave.ActionUninstall, fleetwave.ActionTakeover:
		return true
	}
	return false
}

// holdReason returns why the enablement policy holds action on node n, ""
// when it is enabled.
func (e *Enablement) holdReason(n *fleetwave.Node, action string) string {
	if e == nil {
		return ""
	}
	if lifecycleAction(action) {
		if slices.Contains(e.LifecycleNodes, n.ID) || (!e.LifecycleSelector.Empty() && e.LifecycleSelector.Matches(n.Labels)) {
			return ""
		}
		return ReasonLifecycleDisabled
	}
	if !e.ConfigApplyEnabled {
		return ReasonConfigApplyDisabled
	}
	return ""
}
