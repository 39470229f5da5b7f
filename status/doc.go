// Package status owns the status documents the hub commits to the
// repository (on its status branch): their Go types, their paths, one
// encoder and one decoder, and the format version.
//
// The documents:
//
//	status/summary.yaml          Summary: the fleet as a whole
//	status/generation_marks.yaml GenerationMarks: the highest generation given to each object
//	status/rollouts/<id>.yaml    Rollout: one rollout, its targets, waves and items
//	status/nodes/<id>.yaml       Node: one node's last report, drift, waiting items
//	status/approvals/<id>.yaml   Approval: one approval request and its outcome
//
// Encoding. A document is rendered through its JSON form, so its field
// names are the JSON names of its types and of the shared nouns it holds
// (fleetwave.Rollout, fleetwave.Item, ...): the same names the API
// answers with. The two the hub writes most, a node's document and a part
// of a rollout's items, have renderers of their own (RenderNode,
// RenderRolloutPart) that build that form's generic value from the
// fields directly; their bytes are the same (property tests). The YAML starts with a comment saying the hub owns the
// file, then "format: <n>", then every other key sorted. Integers are
// written as integers and times as quoted RFC 3339 strings. Nothing in a
// document depends on the wall clock of the write, so writing the same
// state twice gives the same bytes and no new commit. A document's long
// lists (a rollout's items, targets and waves, the summary's rollouts)
// are rendered a chunk of elements at a time, so encoding needs memory
// for the output and one chunk, not for a second copy of the document;
// the bytes are the same as rendering the whole document at once.
//
// Versions. Format is the version of the document's shape. Version is the
// newest this build reads and the one it writes. A document without a
// format field is version 1 (what hubs wrote before the field existed). A
// document of a newer format is refused with a *FormatError: it was
// written by a newer hub, and reading it as an older shape could drop
// what it records. A change that renames or removes a field, or changes
// its meaning, raises Version; adding a field does not.
package status
