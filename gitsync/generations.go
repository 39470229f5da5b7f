package gitsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// not modified: replay works on a clone, or on the newest state itself
// after removing it from the cache.
type genState struct {
	paths map[string]pathState
	objs  map[fleetwave.ObjectKey]objState
	// res is the generations of objs (result), kept up to date by a
	// replay that knows what it moved, nil when it must be built again
	res map[fleetwave.ObjectKey]int64
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
	if s.res != nil {
		c.res = maps.Clone(s.res)
	}
	return c
}

// result returns the generation of every object present, a map of the
// caller's: at 100,000 objects a copy of res is a tenth of building it.
func (s *genState) result() map[fleetwave.ObjectKey]int64 {
	if s.res == nil {
		s.res = make(map[fleetwave.ObjectKey]int64, len(s.objs))
		for k, o := range s.objs {
			if o.hash != absentObjectHash {
				s.res[k] = o.gen
			}
		}
	}
	return maps.Clone(s.res)
}

// moved brings res up to date with the objects keys, which a replay changed.
func (s *genState) moved(keys map[fleetwave.ObjectKey]bool) {
	if s.res == nil {
		return
	}
	for k := range keys {
		if o, ok := s.objs[k]; ok && o.hash != absentObjectHash {
			s.res[k] = o.gen
		} else {
			delete(s.res, k)
		}
	}
}

// mark is the highest generation returned for an object and the content
// hash it had then.
type mark struct {
	Gen  int64  `json:"gen"`
	Hash string `json:"hash,omitempty"`
}

// marks are the high-water marks and the commit they were last taken at.
type marks struct {
	// Seq is the number of the last save the file holds (see saveMarks).
	Seq     uint64                       `json:"seq,omitempty"`
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
	// version is the HighWaterChanges version of marks.Objects, a new one
	// at each change (setMark). changes logs the marks set since version
	// logFrom, with the version each one made (HighWaterChanges); a bulk
	// change (marksChanged) empties it.
	version uint64
	changes []markChange
	logFrom uint64
	// the journal of the marks (saveMarks): the marks changed since the
	// last save, the number of the last save, the journal's lines, and
	// whether the next save rewrites the base
	dirty        map[fleetwave.ObjectKey]bool
	seq          uint64
	journalLines int
	journalBytes int
	compact      bool
}

// markChange is one mark set, and the version it made.
type markChange struct {
	version uint64
	key     fleetwave.ObjectKey
}

// marksChanged gives marks.Objects a new version after a change of many
// of them: HighWaterChanges returns them whole to any earlier version.
func (g *genCache) marksChanged() {
	g.version = nextMarksVersion.Add(1)
	g.changes, g.logFrom = nil, g.version
}

// setMark sets the mark of k, to be saved by the next saveMarks.
func (g *genCache) setMark(k fleetwave.ObjectKey, m mark) {
	g.marks.Objects[k] = m
	g.dirty[k] = true
	if len(g.changes) >= max(maxMarkChanges, len(g.marks.Objects)) {
		g.marksChanged() // the log would outgrow a whole copy
		return
	}
	g.version = nextMarksVersion.Add(1)
	g.changes = append(g.changes, markChange{g.version, k})
}

// maxMarkChanges is the least number of changes the log of the marks
// keeps before it starts again from a whole copy.
const maxMarkChanges = 4096

func newGenCache(file string) *genCache {
	g := &genCache{file: file, states: map[plumbing.Hash]*genState{}, hashes: map[string]string{}, marks: marks{Objects: map[fleetwave.ObjectKey]mark{}},
		dirty: map[fleetwave.ObjectKey]bool{}}
	g.marksChanged()
	return g
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

// newest reports whether h is the commit whose state was cached last.
func (g *genCache) newest(h plumbing.Hash) bool {
	return len(g.order) > 0 && g.order[len(g.order)-1] == h
}

// drop removes the state of commit h from the cache.
func (g *genCache) drop(h plumbing.Hash) {
	delete(g.states, h)
	g.order = slices.DeleteFunc(g.order, func(x plumbing.Hash) bool { return x == h })
}

// The marks are kept in two files: a base (marksFile, every mark) and a
// journal beside it (journalSuffix). A save appends one line to the
// journal with the tip and the marks changed since the last save, and
// rewrites the base (then removes the journal) only when the journal has
// grown past its bounds or most marks changed. At 100,000 objects a whole
// save took about 100 ms, most of the sync of a one-file commit; a line
// takes microseconds. The base and each line carry the number of their
// save: a line at or below the base's is already in it (a crash between a
// rewrite and the journal's removal). A line cut short by a crash ends the
// replay, and the next save rewrites the base.
const (
	journalSuffix   = ".journal"
	maxJournalLines = 1000
	maxJournalBytes = 16 << 20
)

// journalLine is one save of the journal; Tip is written even when empty.
type journalLine struct {
	Seq     uint64                       `json:"seq"`
	Tip     string                       `json:"tip"`
	Objects map[fleetwave.ObjectKey]mark `json:"objects,omitempty"`
}

func (g *genCache) loadMarks() error {
	data, err := os.ReadFile(g.file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		var m marks
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(g.file), err)
		}
		if m.Objects == nil {
			m.Objects = map[fleetwave.ObjectKey]mark{}
		}
		g.marks, g.seq = m, m.Seq
	}
	journal, err := os.ReadFile(g.file + journalSuffix)
	if errors.Is(err, os.ErrNotExist) {
		g.marksChanged()
		return nil
	}
	if err != nil {
		return err
	}
	g.journalBytes = len(journal)
	for len(journal) > 0 {
		line, rest, complete := bytes.Cut(journal, []byte("\n"))
		var l journalLine
		if !complete || json.Unmarshal(line, &l) != nil {
			g.compact = true // cut short by a crash: rewritten at the next save
			break
		}
		journal = rest
		g.journalLines++
		if l.Seq <= g.marks.Seq {
			continue // already in the base
		}
		g.marks.Tip, g.seq = l.Tip, l.Seq
		for k, m := range l.Objects {
			g.marks.Objects[k] = m
		}
	}
	g.marksChanged()
	return nil
}

// saveMarks saves the marks changed since the last save: a line of the
// journal, or the whole marks when the journal is due to be folded in.
func (g *genCache) saveMarks() error {
	g.seq++
	if g.compact || g.journalLines >= maxJournalLines || g.journalBytes >= maxJournalBytes ||
		(len(g.dirty) > 64 && 4*len(g.dirty) > len(g.marks.Objects)) {
		return g.saveBase()
	}
	b := fmt.Appendf(make([]byte, 0, 128+len(g.dirty)*112), `{"seq":%d,"tip":`, g.seq)
	b = appendJSONString(b, g.marks.Tip)
	if len(g.dirty) > 0 {
		b = append(b, `,"objects":`...)
		b = appendMarkObjects(b, g.marks.Objects, g.dirty)
	}
	b = append(b, "}\n"...)
	f, err := os.OpenFile(g.file+journalSuffix, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		g.compact = true // the line may be cut short: never append after it
		return err
	}
	g.journalLines++
	g.journalBytes += len(b)
	clear(g.dirty)
	return nil
}

// saveBase rewrites the base with every mark and removes the journal.
func (g *genCache) saveBase() error {
	g.marks.Seq = g.seq
	data := appendMarks(make([]byte, 0, 64+len(g.marks.Objects)*112), &g.marks)
	tmp := g.file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, g.file); err != nil {
		return err
	}
	// a journal left here by a crash holds lines at or below the base's
	if err := os.Remove(g.file + journalSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	g.journalLines, g.journalBytes, g.compact = 0, 0, false
	clear(g.dirty)
	return nil
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
	defer r.lock("Generations")()
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
	baseHash, baseTree := plumbing.ZeroHash, plumbing.ZeroHash
	passedTip, baseIsTip := false, false
	for cur := c; ; {
		if st, ok := g.states[cur.Hash]; ok {
			base, baseHash, baseTree = st, cur.Hash, cur.TreeHash
			baseIsTip = cur.Hash == tip
			passedTip = passedTip || baseIsTip
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
	switch {
	case base == nil:
	case len(chain) > 0 && g.newest(baseHash):
		// the usual step, a new commit on top of the last one: take the
		// newest state over instead of copying every object (an older
		// commit asked for later replays from an older state)
		g.drop(baseHash)
		st = base
	default:
		st = base.clone()
	}
	// The state cached at the marks' commit is the one recorded there
	// (record then put, and SeedHighWater drops cached states), so from it
	// only the objects the replay touches can move the marks.
	var touched map[fleetwave.ObjectKey]bool
	if baseIsTip {
		touched = map[fleetwave.ObjectKey]bool{}
	}
	prevTree := baseTree
	for i := len(chain) - 1; i >= 0; i-- {
		cm := chain[i]
		var changes []change
		if err := r.diffTrees(ctx, prevTree, cm.TreeHash, "", true, &changes); err != nil {
			return nil, err
		}
		moved := map[fleetwave.ObjectKey]bool{}
		if err := r.applyChanges(st, changes, moved); err != nil {
			st.res = nil // the replay stopped amid its changes
			return nil, err
		}
		st.moved(moved)
		if touched != nil {
			maps.Copy(touched, moved)
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
		if g.record(c.Hash, st, touched) {
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
	st.res = nil // any object may move
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
// anything changed. When only is non-nil, st differs from the recorded
// marks in those objects only, and only they are compared.
func (g *genCache) record(commit plumbing.Hash, st *genState, only map[fleetwave.ObjectKey]bool) bool {
	changed := g.marks.Tip != commit.String()
	g.marks.Tip = commit.String()
	set := func(k fleetwave.ObjectKey, o objState) {
		m := mark{Gen: o.gen, Hash: o.hash}
		if old, ok := g.marks.Objects[k]; !ok || old != m {
			g.setMark(k, m)
			changed = true
		}
	}
	if only != nil {
		for k := range only {
			if o, ok := st.objs[k]; ok {
				set(k, o)
			}
		}
		return changed
	}
	for k, o := range st.objs {
		set(k, o)
	}
	return changed
}

// applyChanges replays one commit's changes onto st and adds the objects
// it touches to all (when non-nil).
func (r *Repo) applyChanges(st *genState, changes []change, all map[fleetwave.ObjectKey]bool) error {
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
		if all != nil {
			all[k] = true
		}
	}
	return nil
}

// appendMarks appends m as the JSON that encoding/json writes for it, the
// objects in map order (readers do not care): at 100,000 objects this is
// several times cheaper than json.Marshal, and it runs on every commit.
func appendMarks(b []byte, m *marks) []byte {
	b = append(b, '{')
	sep := false
	if m.Seq != 0 {
		b = append(b, `"seq":`...)
		b = strconv.AppendUint(b, m.Seq, 10)
		sep = true
	}
	if m.Tip != "" {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"tip":`...)
		b = appendJSONString(b, m.Tip)
		sep = true
	}
	if len(m.Objects) > 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"objects":`...)
		b = appendMarkObjects(b, m.Objects, nil)
	}
	return append(b, '}')
}

// appendMarkObjects appends the JSON object of the marks of objs, all of
// them, or those of only when it is not nil.
func appendMarkObjects(b []byte, objs map[fleetwave.ObjectKey]mark, only map[fleetwave.ObjectKey]bool) []byte {
	b = append(b, '{')
	first := true
	add := func(k fleetwave.ObjectKey, o mark) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, string(k))
		b = append(b, `:{"gen":`...)
		b = strconv.AppendInt(b, o.Gen, 10)
		if o.Hash != "" {
			b = append(b, `,"hash":`...)
			b = appendJSONString(b, o.Hash)
		}
		b = append(b, '}')
	}
	if only == nil {
		for k, o := range objs {
			add(k, o)
		}
	} else {
		for k := range only {
			if o, ok := objs[k]; ok {
				add(k, o)
			}
		}
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
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
	data, cached := r.cachedBlob(h) // within the size limit when cached
	over := false
	if !cached {
		// its size and content from one look-up (see fileEntry)
		obj, err := r.repo.Storer.EncodedObject(plumbing.BlobObject, h)
		if err != nil {
			return "", fmt.Errorf("blob %s of %s: %w", h, p, err)
		}
		if over = obj.Size() > r.opts.maxFileSize; !over {
			if data, err = readObject(obj, r.opts.maxFileSize); err != nil {
				return "", fmt.Errorf("read %s: %w", p, err)
			}
		}
	}
	var v string
	if over {
		v = blobHashPrefix + h.String()
	} else {
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
