// Package schema loads and validates a fleetwave config repository tree and
// decodes it into the domain types of package fleetwave.
//
// # Layout
//
// ObjectKeyForPath maps a repository path to the object it must hold:
// fleetwave.{cue,yaml,yml,json} at the root is the kind:config object,
// brc/<name> a trigger, blocks/<name> a block, nodes/<id> a node, and
// organizations/, workspaces/, rollouts/, approvals/ their kinds. Object
// folders are flat. A file with an object extension (.cue, .yaml, .yml,
// .json) anywhere else is an error ("not part of the repository layout"):
// a typo in a folder name (node/x.cue) or a sub-folder (nodes/eu/x.cue)
// would otherwise silently drop objects from the fleet. Not reported, and
// not read: files of other extensions (README.md, *.sh), status/ (the
// hub's), cue.mod/ (the CUE module and the vendored schema) and every path
// with an element starting with '.' (.git, .github, editor files).
//
// # Positions
//
// Every error of a file that has a place in it carries path:line:col, at
// the offending token: the value of a field for an error about its value,
// the field's name for an error about the name (a label key) or about a
// struct or list. Lines count from 1 at '\n'; columns count bytes from 1,
// as CUE's positions do (a tab or a multi-byte character before the token
// counts as its bytes). Errors about a whole file (its size, its place in
// the layout, a missing file) have no line.
//
// CUE's YAML decoder is go-yaml, whose syntax errors carry at most a line,
// and for parser errors the line of the enclosing construct, often one
// early: parseFile locates them again from go-yaml's parser state (see
// yamlSyntaxError), and a character YAML does not allow (a control
// character) at that character. A file that is not UTF-8 is refused at
// its first invalid byte, whatever its format.
//
// # Validation, in three passes
//
//  1. Parse. YAML, JSON and CUE are all parsed by CUE's own decoders so that
//     every value keeps its file:line:col. A .cue object file must be plain
//     data (fields, structs, lists, literals): references, comprehensions,
//     interpolations and imports are refused, which bounds evaluation by the
//     file size (together with WithMaxFileSize). Nesting deeper than
//     MaxNestingDepth is refused before the recursive parsers run (they
//     would end the process with a fatal stack overflow), and a YAML file
//     whose aliases expand beyond the file size limit is refused before
//     CUE's decoder expands them (billion laughs).
//  2. Per file. The `kind` must match the folder; the data is unified with
//     the closed CUE definition of its kind (schema/cue/fleetwave.cue,
//     embedded and compiled once in New) and validated as concrete; `name`
//     must equal the file name stem. Then Go checks what CUE does not say
//     cleanly: durations, cron expressions (robfig/cron, 5 fields), time
//     zones, label syntax and count, names used as map keys. Defaults are
//     applied only after a file validated, by unifying it with the
//     defaults structs of the schema: default disjunctions inside the validating
//     definitions would add "empty disjunction" noise to every error.
//     Integer fields are at most 2147483647 (#Int): a larger number,
//     even one beyond 64 bits, is reported as out of bound like any other.
//  3. Across objects: one config, a trigger's block and actions exist,
//     referenced nodes, maintenance windows and triggers exist.
//     Organizations and workspaces are optional records (a fleet may have
//     none and a node may name neither), but every organization or
//     workspace an object names must have its record: a node's
//     organization and workspace, a workspace's organization, a trigger's
//     target_organizations and target_workspaces. A node's organization
//     must be its workspace's, when both say one. Two reconciliation
//     triggers (not schedules; desired_state absent included) may not own
//     the same block instance, the same block on a node of both scopes
//     (fleetwave.Snapshot.Scope, what the reconciler plans with): one
//     error per pair of triggers, in the later file. A reference to an
//     object whose file exists but failed pass 2 is not reported twice.
//
// Every problem of the tree is reported in one run, as a
// *fleetwave.ValidationError sorted by path, line and column. A panic while
// checking one file becomes a FileError of that file.
//
// # The fast path
//
// Evaluating a file with CUE costs about ten times as much as parsing it,
// and nearly every file of a large tree is a small record of a kind without
// defaults. New therefore also compiles the definition of each such kind
// (node, organization, workspace, rollout, approval), from the same
// embedded schema source, into a Go predicate with the same constraints; a
// construct the compiler does not model exactly leaves the kind without a
// fast path. A file whose data has only simple literal forms (plain
// strings, canonical integers, booleans, no duplicate fields) and that the
// predicate and the Go checks accept is valid, and its object and hash are
// computed from that data. A file of that form in the plainest syntax of its
// format (plainJSON, plainYAML, plainCUE: quoted or simple words, block
// mappings and sequences of scalars in YAML, one value per line, ASCII for
// YAML) is not even handed to CUE's parser or YAML decoder: it needs no
// positions. Every other file, in particular
// every file with a problem, is evaluated by CUE exactly as described
// above, so errors and their messages always come from CUE.
// TestFastPathMatchesCUE and FuzzFastPathMatchesCUE run generated files
// through both paths and require the same errors, or the same object and
// hash.
//
// # Hashes
//
// Normalize gives the canonical form of one file (sorted-key JSON of its data,
// without defaults); Object.Hash is its hex sha256. A file reformatted or
// converted between YAML, JSON and CUE keeps its hash, so its generation does
// not grow.
//
// # CUE contexts, workers and the cache
//
// The per-file checks (passes 1 and 2) run on runtime.GOMAXPROCS(0)
// workers; each worker evaluates data in a fresh CUE context of its own per
// Load (a context only grows) and unifies it with the schema values
// compiled by New; CUE v0.17 values are immutable and safe for concurrent
// use across contexts. Results are collected per file and merged in path
// order, so the outcome does not depend on the scheduling.
//
// A Validator caches the result of the per-file checks of every file of
// its last Load, keyed by path and sha256 of the content: the decoded
// object, its Object.Hash, or the file's errors. The next Load parses only
// new and changed files and runs the cross-object checks (map lookups,
// linear in the tree) again; entries of files absent from a Load are
// dropped, so the cache never holds more than one tree. The cache is never
// handed out: each snapshot gets deep copies of the cached objects, so a
// caller that modifies a snapshot cannot change a later one. A file with a
// cross-object error is parsed again only to position that error.
package schema
