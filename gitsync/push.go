package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// errRemoteMoved reports that the remote branch is no longer the tip a
// status commit was built on (or exists although it was to be created).
var errRemoteMoved = errors.New("remote branch moved")

// pushPack sets branch on the remote to commit, sending p (which must hold
// every object of commit the remote may lack: those built on lease) as is.
// It is a compare-and-swap, never a force: the remote must have branch at
// lease, or no branch when lease is zero. That is checked against the
// advertisement first (errRemoteMoved, nothing sent) and again by the
// receiving side under its ref lock (a "failed to update ref" report).
//
// It replaces go-git's Push, which walks both trees to find the objects
// to send and then reads, delta-searches and recompresses each of them:
// seconds for a status commit of 10,000 files, where the pack already
// written into the mirror is exactly what the remote needs. The caller
// holds mu.
func (r *Repo) pushPack(ctx context.Context, branch plumbing.ReferenceName, lease, commit plumbing.Hash, p *encodedPack) (err error) {
	ep, err := transport.NewEndpoint(r.remote)
	if err != nil {
		return err
	}
	cl, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	sess, err := cl.NewReceivePackSession(ep, nil)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := sess.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return err
	}
	refs, err := ar.AllReferences()
	if err != nil {
		return err
	}
	cur, err := refs.Reference(branch)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		if !lease.IsZero() {
			return fmt.Errorf("%w: %s is gone, status built on %s", errRemoteMoved, branch, lease)
		}
	case err != nil:
		return err
	case cur.Hash() == commit:
		return nil // an earlier attempt got through
	case cur.Hash() != lease:
		if lease.IsZero() {
			return fmt.Errorf("%w: %s was created at %s meanwhile", errRemoteMoved, branch, cur.Hash())
		}
		return fmt.Errorf("%w: %s is at %s, status built on %s", errRemoteMoved, branch, cur.Hash(), lease)
	}
	if r.afterAdvertise != nil {
		r.afterAdvertise()
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: branch, Old: lease, New: commit}}
	if p != nil {
		req.Packfile = io.NopCloser(bytes.NewReader(p.data))
	}
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil {
		return err
	}
	if rs != nil {
		return rs.Error()
	}
	return nil
}
