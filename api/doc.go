// Package api is fleetwave's HTTP API and the embedded web console.
//
// The API reads and drives the hub through the Hub interface it defines; the
// hub package implements it. The package holds no state of its own besides
// its Prometheus metrics and the per-client request counts of its limiter.
//
// # Wire format
//
// Every answer is JSON except /healthz, /metrics and the console. An error is
// always
//
//	{"error": {"code": "not_found", "message": "no such rollout", "details": ...}}
//
// with a matching HTTP status; a refusal about one field names it at the
// start of the message and in details ({"field": "instances[2].state"}).
// Stable codes:
//
//	invalid_body (400)       the body is not one JSON object: empty, broken,
//	                         an unknown field (named), a wrong type (the field
//	                         path named), data after the object
//	invalid_report (400)     a report field out of its domain or limits
//	invalid_result (400)     a result field out of its domain or limits; 422
//	                         when the hub does not accept a valid class (lost)
//	attempt_mismatch (400)   a result's attempt_id differs from the path's
//	invalid_query (400)      a bad query parameter (wait, limit, cursor, state; a
//	                         build's version, os, arch)
//	invalid_labels (400)     a label set breaks the label rules (details.labels)
//	unauthorized (401)       missing or unknown bearer token
//	invalid_signature (401)  a git webhook whose signature does not verify
//	forbidden (403)          a token of another node, an attempt of another
//	                         node, a role too low
//	not_found (404)          also for unknown paths and methods under /api/
//	conflict (409)           the config repository moved under a write; retry
//	already_exists (409)     a request file of that name exists
//	invalid_change (422)     a write the repository's schema refuses
//	not_editable (422)       a node file the hub cannot rewrite faithfully
//	unknown_attempt (404)    no such attempt
//	unknown_artifact (404)   no agent build of that version, os and arch
//	body_timeout (408)       the body did not arrive within the body timeout
//	body_too_large (413)     the body exceeds the cap
//	too_many_requests (429)  a client over its in-flight limit; Retry-After
//	                         says when to try again
//	not_ready (503)          /readyz: a required dependency fails; a write
//	                         before the first snapshot
//	git_unavailable (503)    a write could not reach the config repository
//	git_busy (503)           another write holds the repository; retry
//	redis_unavailable (503)  Redis cannot be reached or cannot serve now
//	internal (500)           anything else; the cause is only logged
//
// The hub may return more codes through *Error (e.g. stale_attempt,
// invalid_state, not_leader).
//
// # Bodies and limits
//
// Request bodies are capped (WithMaxBody, default 1 MiB), must arrive in full
// within the body timeout (WithBodyTimeout, default 10 s; then 408 and the
// connection is closed) and are decoded strictly: one JSON object, no unknown
// field, nothing after it. An answer given without reading the body (401,
// 403, 429, ...) closes the connection rather than waiting for the body.
// Answers must be written within the write timeout (WithWriteTimeout,
// default 30 s); the long poll gets its wait on top. Deadlines are set per
// request, so the server needs no WriteTimeout that would cut long polls.
//
// The git webhook needs no token, so each client address (an IPv4 address,
// an IPv6 /64) may have only WithClientLimit (default 8) requests in flight
// there; more are answered 429 with Retry-After (the body timeout, in whole
// seconds). Forwarding headers are not trusted: behind a proxy, its clients
// share its address.
//
// Reports (register and report) are refused with invalid_report when: node
// is set and differs from the path's node; an instance's block is not a
// block name (1-63 lowercase letters, digits and '-', alphanumeric at both
// ends) or appears twice; a generation is negative; a state is not one of
// installed, running, stopped, absent or empty (an instance the agent has
// not changed yet); there are more than MaxReportInstances instances,
// MaxReportAttempts attempt ids, MaxReportCapabilities capabilities or
// MaxReportDataAddresses data addresses; a string is longer than
// MaxFieldLen bytes or holds a control character; a capability, attempt id
// or data address name is empty. received_at is set by the hub.
//
// Results are refused with invalid_result when attempt_id is missing, fence
// is negative, class is not success, transient, permanent or lost (the hub
// refuses lost with 422: the command of an agent that restarted may still
// run, so the hub counts the attempt lost itself, at its deadline), a
// reason is given to another class than permanent or is not one of
// fleetwave.PermanentReasons, output is longer than MaxOutputLen bytes, or the instance
// breaks the rules of a report's instance; with attempt_mismatch when
// attempt_id differs from the path. An attempt of another node is 403
// forbidden whatever the body: before refusing a body's content, the API
// asks the hub whose attempt it is (Hub.AttemptNode); only 408 and 413,
// which say nothing about the content, come first.
//
// # Routes
//
//	GET  /                      the console (HTML; polls /api/v1/summary every second)
//	                            pages #/, #/rollouts/{id}, #/nodes[/{id}], #/new, #/approvals
//	GET  /healthz               200 "ok" while the process serves
//	GET  /readyz                readiness (Hub.Readiness), see below
//	GET  /metrics               Prometheus text format
//	GET  /api/v1/summary        fleetwave.Summary
//	GET  /api/v1/rollouts       [fleetwave.Rollout] (the summary's rollouts); with any of
//	                            ?state=&brc=&lane=&limit=&cursor= a RolloutsPage, newest first
//	GET  /api/v1/rollouts/{id}?limit=N&cursor=C  {"rollout": fleetwave.Rollout (counters of every item),
//	                            "items": [fleetwave.Item] (a page in dispatch order: 500 by default, at most
//	                            1000), "next": cursor | ""}
//	POST /api/v1/rollouts       operator or admin; body RolloutCreate ("dry_run": true plans
//	                            only) -> 200 RolloutPlan (dry run) | 201 RolloutPlan with the
//	                            commit of rollouts/<name>; 409 already_exists
//	POST /api/v1/rollouts/{id}/{pause|resume|cancel}
//	     operator or admin token; no body or {} -> 200 RolloutAnswer
//	GET  /api/v1/nodes?limit=N&cursor=C  {"nodes": [NodeView], "next": cursor | ""}
//	GET  /api/v1/nodes/{id}     NodeView
//	PUT  /api/v1/nodes/{id}/labels       operator or admin; LabelsBody (the whole set)
//	POST /api/v1/nodes/{id}/{drain|undrain} operator or admin; optional ReasonBody
//	                            -> 200 NodeWrite (commit "" when the file already said so)
//	GET  /api/v1/whoami         {"name": "...", "role": "admin" | "operator" | "viewer"}: the
//	                            caller's identity; 401 without a token that matches one (always
//	                            on a hub without identities, as for writes)
//	GET  /api/v1/config-approvals[/{id}] approval requests
//	POST /api/v1/config-approvals        operator or admin; ApprovalSubmission -> 201
//	POST /api/v1/config-approvals/{id}/{approve|reject} an admin other than the submitter
//	POST /api/v1/hooks/git      202 {"status": "accepted"}: fetch the config repository now;
//	                            the body (the git server's payload) is capped, read in time
//	                            and verified, never decoded
//
// Writes (labels, drain, rollout requests, approvals) are commits to the
// config repository authored by the hub, the actor in a Fleetwave-Actor
// trailer and the reason in Fleetwave-Reason: the repository stays the one
// source of truth, and a write the schema refuses is refused before it is
// pushed. When the hub has identities (hub.yaml), every read under /api/
// but the agents' endpoints needs at least a viewer token too; the console
// page asks for one (a #token=... link or its sign-in form) and keeps it
// in the tab's session storage.
//
// The summary, the rollout list and a rollout's page are read fresh from
// Redis for every request, so a client reads its own writes. A client that
// repeats them (the console, every second) may send Cache-Control:
// max-stale=N (seconds, at most 60): when the fresh read takes longer than
// 40 ms (Redis runs one script at a time, and a wave start of thousands of
// attempts takes hundreds of ms at 100,000 nodes), the answer is the last
// read, at most N seconds old, with its age in the Age header; the fresh
// read goes on and is the next answer. Requests share the read in
// progress, so however many consoles are open, one read of each reaches
// Redis at a time.
//
// /readyz answers 200 when ready and 503 when not, with the state of each
// dependency; its causes name the dependency and hold no credentials:
//
//	{"ready": false,
//	 "checks": {"redis": "error: dial unix <data dir>/redis.sock: connect: connection refused",
//	            "snapshot": "ok", "git": "ok", "leader": "follower"},
//	 "error": {"code": "not_ready", "message": "hub not ready: redis: dial unix ...",
//	           "details": {"failing": ["redis"]}}}
//
// Which checks are required is the hub's call (Readiness.Failing): the hub
// requires Redis, and a snapshot of the leader; a git outage is reported but
// keeps the hub ready, as it dispatches from its last good snapshot.
//
// Agent endpoints need "Authorization: Bearer <node token>". A missing or
// unknown token is 401 unauthorized; a token of another node than {node} is
// 403 forbidden. Agents can thus reach only their own node's work.
//
//	POST /api/v1/agent/nodes/{node}/register
//	     body fleetwave.Report (the full report at start) -> 204
//	GET  /api/v1/agent/nodes/{node}/attempts?wait=10s&delivered=41&resume=true
//	     long poll; wait is a Go duration or whole seconds, 0 when absent,
//	     capped at 30s -> 200 {"attempts": [fleetwave.Attempt]} (never null); with
//	     "report": true when the hub has no observations of the node (its Redis
//	     lost them): the agent sends a full report at once. Each attempt's
//	     "delivery" numbers it (per node, increasing in the answer's order,
//	     which the agent takes them in); delivered is the highest the agent
//	     journalled, and resume=true says its previous poll failed (or it
//	     just started): the attempts numbered after delivered never reached
//	     it and are retried at once. Both optional
//	     (absent: 0 and false); invalid is 400 invalid_query
//	POST /api/v1/agent/nodes/{node}/attempts/{attempt}/result
//	     body fleetwave.AttemptResult; its attempt_id must equal {attempt} -> 204
//	POST /api/v1/agent/nodes/{node}/report
//	     body fleetwave.Report (a full report) -> 204
//	GET  /api/v1/agent/nodes/{node}/detect
//	     -> 200 {"blocks": [fleetwave.DetectCommand]} (never null): the detect
//	     commands of the blocks whose BRCs target the node ({"block", "command",
//	     "timeout_seconds"}); 503 not_ready before the hub read its config
//	     repository. The agent runs them at registration and before each full
//	     report: exit 0 = installed (first line of stdout: the version), exit 1 =
//	     not installed, anything else = unknown. An instance found that the
//	     agent did not install is reported with managed_by "cli"; the report's
//	     "detected" lists the blocks it accounts for (managed or answered)
//	GET  /api/v1/agent/nodes/{node}/artifacts/{version}?os=linux&arch=amd64
//	     the agent build fleetwave-agent-<version>-<os>-<arch> of the hub's agent_artifacts
//	     directory (hub.yaml), streamed as application/octet-stream (HEAD and ranges work)
//	     with its hex sha256 from the directory's SHA256SUMS in X-Fleetwave-Sha256 and its
//	     version in X-Fleetwave-Version -> 200; 404 unknown_artifact when the hub holds no
//	     such build or SHA256SUMS does not list it; 400 invalid_query for a version that
//	     cannot name a file, or a missing os or arch. The built-in upgrade of the
//	     fleetwave-agent block downloads here; a download changes nothing by itself: an
//	     agent installs only the version of an attempt the hub dispatched to it.
//
// The node of a report is always the token's node: a body naming another
// node is refused with invalid_report. The attempt endpoint is the only
// answer that carries attempt payloads (commands and rendered configs);
// nothing else the API returns holds a payload or a secret.
package api
