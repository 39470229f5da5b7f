package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/api"
	"github.com/fleetwave/fleetwave/gitsync"
	"github.com/fleetwave/fleetwave/schema"
)

// ownCommits are the commits this hub pushed to the tracked branch on
// behalf of API callers: unsigned, but the hub's own (the signed-commit
// policy does not refuse them).
type ownCommits struct {
	mu sync.Mutex
	m  map[string]bool
}

func (o *ownCommits) add(c string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]bool{}
	}
	o.m[c] = true
}

func (o *ownCommits) has(c string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[c]
}

// commitFiles is the hub's write to the tracked branch for an API caller:
// authored by the hub, the actor in a Fleetwave-Actor trailer, the whole
// resulting tree validated like any push (a write that would break it is
// refused with its errors), rebuilt on the new tip when someone pushed in
// between. The sync that follows applies it like any commit.
func (h *Hub) commitFiles(ctx context.Context, files map[string][]byte, message, actor string) error {
	res, err := h.repo.CommitFiles(ctx, gitsync.Write{
		Files: files, Message: message, Actor: actor,
		Validate: func(all map[string][]byte, refused []fleetwave.FileError) error {
			_, verr := validateTree(h.validator, all, refused)
			if verr != nil {
				return verr
			}
			return nil
		},
	})
	if err != nil {
		return writeError(err)
	}
	if res.Commit != "" {
		h.own.add(res.Commit)
		h.log.Info().Str("commit", res.Commit).Str("actor", actor).Int("files", len(files)).Str("subject", message).Msg("write committed")
		h.kick(h.syncNow)
	}
	return nil
}

// validateTree validates every file of a tree with the schema, as the hub
// validates a commit (refused files included).
func validateTree(v *schema.Validator, files map[string][]byte, refused []fleetwave.FileError) (*fleetwave.Snapshot, *fleetwave.ValidationError) {
	snap, err := v.Load(files)
	var verr *fleetwave.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return nil, &fleetwave.ValidationError{Errors: []fleetwave.FileError{{Path: "", Msg: err.Error()}}}
	}
	if len(refused) > 0 {
		if verr == nil {
			verr = &fleetwave.ValidationError{}
		}
		verr.Errors = append(verr.Errors, refused...)
		verr.Sort()
	}
	return snap, verr
}

// writeError is the API's answer to a write that did not land.
func writeError(err error) error {
	var inv *gitsync.InvalidWriteError
	var pre *gitsync.PreconditionError
	switch {
	case errors.As(err, &inv):
		return &api.Error{Status: http.StatusUnprocessableEntity, Code: "invalid_change",
			Message: "the change would make the repository invalid", Details: inv.Errors}
	case errors.As(err, &pre):
		return &api.Error{Status: http.StatusConflict, Code: "conflict", Message: pre.Error()}
	case errors.Is(err, gitsync.ErrRemoteUnavailable):
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "git_unavailable", Message: "the config repository's remote is unreachable; retry later"}
	case errors.Is(err, gitsync.ErrPushRaces):
		return &api.Error{Status: http.StatusServiceUnavailable, Code: "git_busy", Message: "the branch kept moving; retry"}
	}
	return fmt.Errorf("write to the repository: %w", err)
}

// signedPaths are the folders whose changes the signed-commit policy
// covers: what runs where.
var signedPaths = []string{"brc/", "blocks/", "nodes/"}

// commitSigner is a commit that changed BRCs, blocks or nodes, and who
// signed it ("unsigned", "unknown_signer", or an identity).
type commitSigner struct {
	Commit string   `json:"commit"`
	Signer string   `json:"signer"`
	Paths  []string `json:"paths"`
}

// maxSigners bounds the commits status lists with their signer.
const maxSigners = 50

// checkSigners, with the approval policy on, records the verified signer
// of each commit after applied (the last commit whose snapshot was in
// force; "" on a first start without status: nothing is looked at) up to
// head that changed BRCs, blocks or nodes (the hub's own writes count as
// the hub's); with approval.require_signed_commits it returns the errors
// that reject head: one per such commit no configured identity signed, so
// an unsigned change stays refused whatever is pushed on top of it.
func (h *Hub) checkSigners(ctx context.Context, applied, head string) []fleetwave.FileError {
	if (!h.cfg.Approval.Required && !h.cfg.Approval.RequireSignedCommits) || applied == "" || applied == head {
		return nil
	}
	changes, err := h.repo.ChangesSince(ctx, applied, head, signedPaths...)
	if err != nil {
		h.log.Warn().Err(err).Msg("read commits for their signers")
		return nil
	}
	return h.signers(ctx, changes)
}

func (h *Hub) signers(ctx context.Context, changes []gitsync.CommitChange) []fleetwave.FileError {
	keys := h.cfg.SignerKeys()
	var seen []commitSigner
	type last struct{ commit, who string }
	lastChange := map[string]last{} // path -> the commit that last changed it, and its signer
	for _, c := range changes {
		who := ""
		switch signer, err := h.repo.VerifyCommit(ctx, c.Commit, keys); {
		case h.own.has(c.Commit):
			who = "hub"
		case err == nil:
			who = IdentityOfSigner(signer.Identity)
		case errors.Is(err, gitsync.ErrUnsigned):
			who = "unsigned"
		default:
			who = "unknown_signer"
		}
		seen = append(seen, commitSigner{Commit: c.Commit, Signer: who, Paths: c.Paths})
		for _, p := range c.Paths {
			lastChange[p] = last{c.Commit, who}
		}
	}
	h.mu.Lock()
	h.signerLog = append(h.signerLog, seen...)
	if len(h.signerLog) > maxSigners {
		h.signerLog = h.signerLog[len(h.signerLog)-maxSigners:]
	}
	h.mu.Unlock()
	if !h.cfg.Approval.RequireSignedCommits {
		return nil
	}
	// the content of every changed path must come from a signed commit:
	// one signed on top of an unsigned change to the same file (a reviewed
	// revert) makes it acceptable, one touching other files does not
	var errs []fleetwave.FileError
	for p, l := range lastChange {
		if l.who != "unsigned" && l.who != "unknown_signer" {
			continue
		}
		what := map[string]string{"unsigned": "not signed", "unknown_signer": "signed by an unknown key"}[l.who]
		errs = append(errs, fleetwave.FileError{Path: p,
			Msg: fmt.Sprintf("last changed by commit %s, which is %s: approval.require_signed_commits accepts changes to brc/, blocks/ and nodes/ only from commits signed by a configured identity (push a signed commit of this file)",
				short(l.commit), what)})
	}
	return errs
}
