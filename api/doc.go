// Package api is fleetwave's HTTP API and the embedded web console.
//
// The API reads and drives the hub through the Hub interface it defines; the
// hub package implements it. The package holds no state of its own besides
// its Prometheus metrics.
//
// # Wire format
//
// Every answer is JSON except /healthz, /metrics and the console. An error is
// always
//
//	{"error": {"code": "not_found", "message": "no such rollout", "details": ...}}
//
// with a matching HTTP status. Stable codes: invalid_body (400), invalid_query
// (400), attempt_mismatch (400), unauthorized (401), forbidden (403),
// not_found (404, also for unknown paths and methods under /api/),
// body_too_large (413), not_ready (503), internal (500); the hub may return more through *Error. Request
// bodies are capped (WithMaxBody, default 1 MiB) and decoded strictly:
// unknown fields, trailing data and empty bodies are refused with invalid_body.
//
// # Routes
//
//	GET  /                      the console (HTML; polls /api/v1/summary every second)
//	GET  /healthz               200 "ok" while the process serves
//	GET  /readyz                200 "ok", or 503 not_ready (Hub.Ready)
//	GET  /metrics               Prometheus text format
//	GET  /api/v1/summary        fleetwave.Summary
//	GET  /api/v1/rollouts       [fleetwave.Rollout] (the summary's rollouts)
//	GET  /api/v1/rollouts/{id}  {"rollout": fleetwave.Rollout, "items": [fleetwave.Item]}
//	POST /api/v1/hooks/git      202 {"status": "accepted"}: fetch the config repository now;
//	                            the body is read (and capped) but ignored
//
// Agent endpoints need "Authorization: Bearer <node token>". A missing or
// unknown token is 401 unauthorized; a token of another node than {node} is
// 403 forbidden. Agents can thus reach only their own node's work.
//
//	POST /api/v1/agent/nodes/{node}/register
//	     body fleetwave.Report (the full report at start) -> 204
//	GET  /api/v1/agent/nodes/{node}/attempts?wait=10s
//	     long poll; wait is a Go duration or whole seconds, 0 when absent,
//	     capped at 30s -> 200 {"attempts": [fleetwave.Attempt]} (never null)
//	POST /api/v1/agent/nodes/{node}/attempts/{attempt}/result
//	     body fleetwave.AttemptResult; its attempt_id must equal {attempt} -> 204
//	POST /api/v1/agent/nodes/{node}/report
//	     body fleetwave.Report (a full report) -> 204
//
// The node of a report is always the token's node: a body naming another
// node is refused with 403. The attempt endpoint is the only answer that
// carries attempt payloads (commands and rendered configs); nothing else the
// API returns holds a payload or a secret.
package api
