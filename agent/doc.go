// Package agent is fleetwave's node agent: the HTTP client of the hub that
// runs block actions on one node and reports what it observes.
//
// # Loop
//
// Run loads the local state (StateDir/state.json), registers with a full
// report, then long-polls the hub for attempts, runs each one, posts its
// result and sends a full report; a full report also goes out every
// ReportInterval. Hub errors (transport, 5xx, 429, even 401 during a token
// rotation) are retried with capped exponential backoff and jitter: a hub
// outage never stops the agent. Run returns only when its context is
// cancelled (nil) or at start-up when the state cannot be trusted.
//
// # Attempts
//
// For each attempt, in order:
//
//  1. An attempt id already in the journal is never run again: its recorded
//     result is sent again (the hub may have missed it).
//  2. An attempt whose fence is lower than the highest fence the agent has
//     accepted is refused without running: class permanent, output
//     "stale fencing token". An attempt for another node or with a block
//     name that is not a DNS-label-like name is refused as permanent too.
//  3. The fence is accepted and the attempt journalled "started"; the state
//     file is fsync'd before the command runs.
//  4. The payload config is written to StateDir/configs/<block>.yaml (0600)
//     and Shell -c payload.command runs in StateDir/blocks/<block>/, in its own
//     process group, with a minimal environment: PATH, HOME, FLEETWAVE_NODE,
//     FLEETWAVE_BLOCK, FLEETWAVE_ACTION, FLEETWAVE_VERSION (target version),
//     FLEETWAVE_GENERATION, FLEETWAVE_ATTEMPT, FLEETWAVE_CONFIG (the config
//     file) and FLEETWAVE_STATE_DIR (the instance directory). Combined output
//     is kept up to its last 8 KiB.
//  5. The exit code is classified with fleetwave.ClassifyExit (0 success,
//     75 transient, other permanent). A command still running at the payload
//     timeout (default 5m) has its whole process group terminated (SIGTERM,
//     then SIGKILL after a grace period) and is classed transient: the action
//     was cut short, not refused, and the hub's retry policy decides. A
//     command the agent cannot start (config not writable, shell missing) is
//     transient as well: it is the node's fault, not the block's.
//  6. On success the instance is updated (version, config hash, generation,
//     state, managed_by, last attempt); an absent desired state or the
//     uninstall action removes it. The journal entry becomes "done" with the
//     result, the state is saved, and the result is posted.
//
// An attempt found "started" but not "done" when the agent starts (it
// crashed or was stopped mid-run) is never re-run: it is reported with class
// lost, and the hub decides from the next full report.
//
// Results the hub refuses with a 4xx other than 401, 403, 408 and 429 (for
// example a stale attempt) are dropped; others are retried until delivered.
// Undelivered results survive restarts.
//
// # Configuration file
//
// `fleetwave agent --config FILE` reads a YAML file (FileConfig,
// LoadConfigFile): hub, node, token_file, state_dir, capabilities,
// addresses and the optional timings. It is read once, at start: an agent
// advertises a changed capability or address after a restart. Mistakes
// are *ConfigFileError values, "file:line:col: message".
//
// # Local state
//
// state.json holds the node, the highest accepted fence, the block instances
// and the attempt journal (bounded to the newest entries). It is written
// atomically (temp file, fsync, rename, fsync of the directory). A file that
// does not parse, or that belongs to another node, makes Run fail with
// ErrStateCorrupted rather than being trusted or overwritten. A lock file
// keeps two agents off one state directory.
package agent
