package gitsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/fleetwave/fleetwave"
)

// marksFile holds the generation high-water marks, inside the mirror
// directory (git ignores unknown files in a repository directory).
const marksFile = "fleetwave-generations.json"

const (
	maxCachedStates  = 8
	maxCachedHashes  = 1 << 18
	blobHashPrefix   = "blob:"
	absentObjectHash = ""
)

// objState is one object at one commit: its generation, the hash of its
// normalized content (absentObjectHash once deleted) and the paths holding
// it (normally one). paths is replaced, never modified in place, so states
// can share it.
type objState struct {
	gen   int64
	hash  string
	paths []string
}

type pathState struct {
	key  fleetwave.ObjectKey
	hash string
}

// genState is the generation state after one commit. Cached states are
// immutable; replay works on a clone.
type genState struct {
	paths map[string]pathState
	objs  map[fleetwave.ObjectKey]objState
}

func newGenState() *genState {
	return &genState{paths: map[string]pathState{}, objs: map[fleetwave.ObjectKey]objState{}}
}

func (s *genState) clone() *genState {
	c := &genState{paths: make(map[string]pathState, len(s.paths)), objs: make(map[fleetwave.ObjectKey]objState, len(s.objs))}
	for k, v := range s.paths {
		c.paths[k] = v
	}
	for k, v := range s.objs {
		c.objs[k] = v
	}
	return c
}

func (s *genState) result() map[fleetwave.ObjectKey]int64 {
	out := make(map[fleetwave.ObjectKey]int64, len(s.objs))
	for k, o := range s.objs {
		if o.hash != absentObjectHash {
			out[k] = o.gen
		}
	}
	return out
}

// mark is the highest generation returned for an object and the content
// hash it had then.
type mark struct {
	Gen  int64  `json:"gen"`
	Hash string `json:"hash,omitempty"`
}

// marks are the high-water marks and the commit they were last taken at.
type marks struct {
	Tip     string                       `json:"tip,omitempty"`
	Objects map[fleetwave.ObjectKey]mark `json:"objects,omitempty"`
}

// genCache holds recent generation states by commit, normalized content
// hashes by blob and path, and the high-water marks.
type genCache struct {
	file   string
	states map[plumbing.Hash]*genState
	order  []plumbing.Hash
	hashes map[string]string
	marks  marks
}

func newGenCache(file string) *genCache {
	return &genCache{file: file, states: map[plumbing.Hash]*genState{}, hashes: map[string]string{}, marks: marks{Objects: map[fleetwave.ObjectKey]mark{}}}
}

func (g *genCache) put(h plumbing.Hash, s *genState) {
	if _, ok := g.states[h]; !ok {
		g.order = append(g.order, h)
	}
	g.states[h] = s
	for len(g.order) > maxCachedStates {
		delete(g.states, g.order[0])
		g.order = g.order[1:]
	}
}

func (g *genCache) loadMarks() error {
	data, err := os.ReadFile(g.file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var m marks
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(g.file), err)
	}
	if m.Objects == nil {
		m.Objects = map[fleetwave.ObjectKey]mark{}
	}
	g.marks = m
	return nil
}

func (g *genCache) saveMarks() error {
	data, err := json.Marshal(g.marks)
	if err != nil {
		return err
	}
	tmp := g.file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, g.file)
}

// Generations returns the generation of every object present at commit.
//
// Walking the first-parent history from the root commit, an object's
// generation grows by one each time the hash of its normalized content
// changes; appearing counts as a change, a deleted object keeps its last
// generation and continues from it when it reappears. Commits that touch
// only status/ cost one top-level tree comparison. States are cached per
// commit, so a new commit on top of the last one costs only its own diff.
//
// Generations never decrease: the highest generation returned for each
// object is kept (in memory and in a file of the mirror directory). When the
// history was rewritten (force-push) and the recomputed generation is lower,
// an unchanged object keeps its returned generation and a changed one
// continues above it. Asking for an older commit of the same history returns
// that commit's generations and leaves the marks alone.
func (r *Repo) Generations(ctx context.Context, commit string) (map[fleetwave.ObjectKey]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return nil, err
	}
	c, err := r.commitObject(commit)
	if err != nil {
		return nil, err
	}
	g := r.gens
	tip := plumbing.ZeroHash
	if g.marks.Tip != "" && plumbing.IsHash(g.marks.Tip) {
		tip = plumbing.NewHash(g.marks.Tip)
	}

	// walk back along first parents to a cached state or the root
	var chain []*object.Commit
	var base *genState
	baseTree := plumbing.ZeroHash
	passedTip := false
	for cur := c; ; {
		if st, ok := g.states[cur.Hash]; ok {
			base, baseTree = st, cur.TreeHash
			passedTip = passedTip || cur.Hash == tip
			break
		}
		chain = append(chain, cur)
		passedTip = passedTip || cur.Hash == tip
		if len(cur.ParentHashes) == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := r.repo.CommitObject(cur.ParentHashes[0])
		if err != nil {
			return nil, fmt.Errorf("parent of %s: %w", cur.Hash, err)
		}
		cur = p
	}
	st := newGenState()
	if base != nil {
		st = base.clone()
	}
	prevTree := baseTree
	for i := len(chain) - 1; i >= 0; i-- {
		cm := chain[i]
		var changes []change
		if err := r.diffTrees(ctx, prevTree, cm.TreeHash, "", true, &changes); err != nil {
			return nil, err
		}
		if err := r.applyChanges(st, changes); err != nil {
			return nil, err
		}
		if cm.Hash == tip {
			g.raise(st)
		}
		prevTree = cm.TreeHash
	}

	older := false
	if !passedTip && !tip.IsZero() {
		older = r.isProperAncestor(c, tip)
	}
	if !older {
		if !passedTip {
			g.raise(st)
			r.opts.log.Info().Str("commit", c.Hash.String()).Str("previous", tip.String()).Msg("history rewritten: generations continue above returned ones")
		}
		if g.record(c.Hash, st) {
			if err := g.saveMarks(); err != nil {
				r.opts.log.Warn().Err(err).Msg("save generation marks")
			}
		}
	}
	g.put(c.Hash, st)
	r.opts.log.Debug().Str("commit", c.Hash.String()).Int("replayed", len(chain)).Msg("generations computed")
	return st.result(), nil
}

// isProperAncestor reports whether c is an ancestor of tip (and not tip).
func (r *Repo) isProperAncestor(c *object.Commit, tip plumbing.Hash) bool {
	if c.Hash == tip {
		return false
	}
	tc, err := r.repo.CommitObject(tip)
	if err != nil {
		return false
	}
	ok, err := c.IsAncestor(tc)
	return err == nil && ok
}

// raise lifts st to the high-water marks: an object with the content it had
// when its mark was taken keeps at least that generation; a different
// content (or a reappearance) gets a generation above it; an object the new
// history lacks remembers the mark for when it appears.
func (g *genCache) raise(st *genState) {
	for k, m := range g.marks.Objects {
		o, ok := st.objs[k]
		switch {
		case !ok:
			st.objs[k] = objState{gen: m.Gen, hash: absentObjectHash}
		case m.Hash == seededMarkHash:
			// content unknown (SeedHighWater): a pure generation below the
			// mark means the history was rewritten, so the content may
			// differ from what was returned: continue above the mark
			if o.hash != absentObjectHash && o.gen < m.Gen {
				o.gen = m.Gen + 1
			} else {
				o.gen = max(o.gen, m.Gen)
			}
			st.objs[k] = o
		case o.hash == m.Hash || o.hash == absentObjectHash:
			o.gen = max(o.gen, m.Gen)
			st.objs[k] = o
		case o.gen <= m.Gen:
			o.gen = m.Gen + 1
			st.objs[k] = o
		}
	}
}

// record makes st at commit the new high-water marks; it reports whether
// anything changed.
func (g *genCache) record(commit plumbing.Hash, st *genState) bool {
	changed := g.marks.Tip != commit.String()
	g.marks.Tip = commit.String()
	for k, o := range st.objs {
		m := mark{Gen: o.gen, Hash: o.hash}
		if old, ok := g.marks.Objects[k]; !ok || old != m {
			g.marks.Objects[k] = m
			changed = true
		}
	}
	return changed
}

// applyChanges replays one commit's changes onto st.
func (r *Repo) applyChanges(st *genState, changes []change) error {
	touched := map[fleetwave.ObjectKey]bool{}
	for _, ch := range changes {
		if ps, ok := st.paths[ch.path]; ok {
			delete(st.paths, ch.path)
			o := st.objs[ps.key]
			o.paths = slices.DeleteFunc(slices.Clone(o.paths), func(p string) bool { return p == ch.path })
			st.objs[ps.key] = o
			touched[ps.key] = true
		}
		if ch.to.Hash.IsZero() || !regular(ch.to.Mode) {
			continue
		}
		key, ok := r.opts.norm.ObjectKey(ch.path)
		if !ok {
			continue
		}
		h, err := r.contentHash(ch.path, ch.to.Hash)
		if err != nil {
			return err
		}
		st.paths[ch.path] = pathState{key: key, hash: h}
		o := st.objs[key]
		o.paths = append(slices.Clone(o.paths), ch.path)
		slices.Sort(o.paths)
		st.objs[key] = o
		touched[key] = true
	}
	for k := range touched {
		o := st.objs[k]
		nh := combinedHash(st, o.paths)
		if nh != o.hash {
			o.hash = nh
			if nh != absentObjectHash {
				o.gen++
			}
		}
		st.objs[k] = o
	}
	return nil
}

func regular(m filemode.FileMode) bool {
	return m == filemode.Regular || m == filemode.Executable || m == filemode.Deprecated
}

// combinedHash is the content hash of an object held by paths: the hash of
// its single file, or a hash over the sorted hashes of several (an invalid
// tree the schema rejects, but generations must still be defined).
func combinedHash(st *genState, paths []string) string {
	switch len(paths) {
	case 0:
		return absentObjectHash
	case 1:
		return st.paths[paths[0]].hash
	}
	hs := make([]string, len(paths))
	for i, p := range paths {
		hs[i] = st.paths[p].hash
	}
	slices.Sort(hs)
	sum := sha256.Sum256([]byte(strings.Join(hs, "\n")))
	return hex.EncodeToString(sum[:])
}

// contentHash returns the hash of the normalized content of blob h at path,
// cached by blob and path. Files over the size limit are not read: their
// git object id stands for their content.
func (r *Repo) contentHash(p string, h plumbing.Hash) (string, error) {
	g := r.gens
	ck := h.String() + "\x00" + p
	if v, ok := g.hashes[ck]; ok {
		return v, nil
	}
	size, err := r.repo.Storer.EncodedObjectSize(h)
	if err != nil {
		return "", fmt.Errorf("blob %s of %s: %w", h, p, err)
	}
	var v string
	if size > r.opts.maxFileSize {
		v = blobHashPrefix + h.String()
	} else {
		data, err := readBlob(r, h)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		if norm, err := r.opts.norm.Normalize(p, data); err == nil {
			data = norm
		}
		sum := sha256.Sum256(data)
		v = hex.EncodeToString(sum[:])
	}
	if len(g.hashes) >= maxCachedHashes {
		clear(g.hashes)
	}
	g.hashes[ck] = v
	return v, nil
}
