package reconciler

import (
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
	// ReasonInvalidConfig: the block_config_template did not render, its
	// output is not a YAML mapping (invalid YAML, a list, a scalar), or it
	// does not satisfy the block's config_schema; the item is created
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
// means: no credentials (credential_get_or_create fails) and no config
// schema check. Staged enablement is part of the snapshot (kind:config).
type Options struct {
	// Credential backs credential_get_or_create in templates. Nil makes the
	// template function fail with a clear error.
	Credential CredentialFunc
	// ValidateConfig checks a rendered config against a block's
	// config_schema; a failure blocks the item with invalid_config (never
	// dispatched until a new generation fixes it). Nil = not checked.
	ValidateConfig func(schema, rendered string) error
	// RequireReport plans only nodes whose agent sent a full report: for
	// another node the action (install, upgrade or nothing) is unknown, so
	// it is held with reason awaiting_report and joins its trigger's
	// rollout once it reported. A hub that lost Redis thus waits for the
	// agents' next reports instead of re-installing the fleet.
	// It also means the observations are the agents' live reports: an
	// install of a block with a detect command waits for a report that
	// ran it, and items whose nodes lack a requirement are blocked at plan
	// time (placement_rejected, naming them; see nodeside.go).
	RequireReport bool
	// ActiveInstance says whether an item that will change the instance is
	// active in the engine (e.g. the install its BRC just planned): a
	// manual request's operational action (restart, backup) then waits
	// behind it instead of being skipped as not installed. Nil = none.
	ActiveInstance func(fleetwave.InstanceKey) bool
	// Only, when not nil, restricts PlanWith to these triggers (the hub
	// plans the BRCs a push changed first, before the whole fleet). The
	// plan of a trigger does not depend on the others, so its rollout is
	// the same as in a whole plan.
	Only map[string]bool
	// Renders, when not nil, keeps the configs rendered for a snapshot
	// from one plan (and Drift) to the next.
	Renders *RenderCache
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

// holdReason returns why the staged enablement e (kind:config) holds
// action on node n, "" when it is enabled. A nil e enables everything.
func holdReason(e *fleetwave.Enablement, n *fleetwave.Node, action string) string {
	if e == nil {
		return ""
	}
	if lifecycleAction(action) {
		if e.Lifecycle.Includes(n) {
			return ""
		}
		return ReasonLifecycleDisabled
	}
	if !e.ConfigApply.Includes(n) {
		return ReasonConfigApplyDisabled
	}
	return ""
}
