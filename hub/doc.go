// Package hub is fleetwave's composition root: the one place that wires
// gitsync (following the config repository), schema (validating each
// commit), reconciler (planning items), engine (dispatching them through
// Redis) and api (HTTP for agents, operators and the console).
//
// A hub runs these loops, each a thin ticker around a step function:
//
//   - lease: campaign for and renew the leader lease; its fencing epoch
//     guards every engine write, so a deposed hub can change nothing;
//   - sync: fetch the tracked branch; a commit touching only status/ is
//     skipped; any other new commit is read from the object store,
//     validated as a whole (an invalid commit is rejected and the last good
//     snapshot stays in force) and given its per-object generations;
//   - reconcile: plan the snapshot against the agents' observations and
//     hand each rollout to the engine (idempotent per block instance);
//     runs on a new snapshot, on reports, after completions and on a timer;
//   - step: let the engine expire deadlines and start the next waves;
//   - status: when the engine's state or the sync result changed, write
//     status/ files and commit them back to the repository (batched).
package hub
