// Package reconciler is the pure logic between a validated snapshot of the
// config repository and the engine: which block instances should exist, with
// which rendered config, and which items (install, upgrade, start, stop,
// uninstall, ...) converge the observed state to the desired one.
//
// Plan is a function of (snapshot, observations, now) alone: it does no I/O,
// reads no clock and its output does not depend on map iteration order.
//
// For every reconciliation trigger (kind:trigger BRC) the scope is the set of
// nodes that pass every filter the trigger sets (target_organizations,
// target_workspaces, selector, nodes); no filter means every node. Draining
// nodes stay in (drain changes availability, not intent: the engine keeps
// their items waiting with reason node_draining). For each node
// in scope the block_config_template is rendered in a sandbox (see Render)
// and hashed; the action follows from the difference with the observed
// instance:
//
//	desired absent, observed present           -> uninstall
//	observed missing                           -> install
//	version or rendered-config hash differ     -> action_name (default upgrade)
//	desired running, observed stopped          -> start
//	desired stopped, observed running/installed-> stop
//	otherwise                                  -> nothing
//
// Items are ordered by the configured criticality order (high, medium, low by
// default; a node inherits criticality from its workspace, then its
// organization, default medium), then by node id: one total order, so the
// result never depends on input order. Each reconciliation trigger yields
// one RolloutSpec per generation, the same event each time it is planned
// (id RolloutID): nodes that reported or became eligible later join that
// rollout; the engine drops items whose instance already has an active
// item (idempotency), so planning twice is harmless. The spec's Budget is
// the trigger, so max_concurrent bounds its items in flight across all of
// its rollouts, and Supersede ends the rollouts of its older generations.
//
// Beyond reconciliation triggers (PlanWith):
//
//   - windows: every item carries its node's effective maintenance windows
//     (node, else workspace, else organization, plus the trigger's
//     maintenance_window), resolved from the config; an unknown name is a
//     Problem (fail closed). bypass_maintenance_window and manual requests
//     set BypassWindows.
//   - ownership: an observed CLI-managed instance gets a takeover item when
//     the trigger has auto_takeover and the block a takeover action, else an
//     item skipped with cli_managed (the engine records the conflict).
//   - detect (nodeside.go): DetectCommands gives each node the detect
//     commands of the blocks its BRCs target; with Options.RequireReport
//     an install of a block with a detect command waits (awaiting_report)
//     until the node's report accounts for it (Report.Detected), so an
//     instance installed by hand is never installed over. PlanManual
//     plans a takeover request (action_name takeover) with the block's
//     takeover action, else the agent's built-in one (no command).
//   - placement (nodeside.go): the items of a split action are one group
//     (ItemSpec.Group = the action), waiting whole while one of its nodes
//     is held and blocked whole (placement_rejected) when one cannot take
//     part; with Options.RequireReport, items whose nodes lack a
//     requirement in their last report are blocked with a message naming
//     the nodes and what they lack.
//   - staged enablement (kind:config enablement) and, with
//     Options.RequireReport, a node without a report hold instances instead
//     of planning them; they are listed in Plan.Holds.
//   - Schedules/PlanSchedule: cron ticks of schedule triggers; missed ticks
//     fire once. PlanManual: rollouts/<name> requests with targets resolved
//     once. Drift: what observe mode reports.
//
// Templates are parsed once per plan and per distinct source (Options and
// the parse cache live in one plan call; nothing is global) and executed per
// node in the sandbox described in sandbox.go.
package reconciler
