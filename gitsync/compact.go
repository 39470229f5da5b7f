package gitsync

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// compactAt is the number of packs in the mirror from which compact merges
// them. Every fetch and every status commit adds a pack, and go-git looks
// for an object in every pack's index (and reloads them all after a status
// commit written beside them), so an unattended hub would slow down with
// each commit: a thousand status commits cost 0.25 s per Reindex alone.
const compactAt = 32

// compactInput bounds the bytes of the packs one compaction merges (the
// objects are held in memory meanwhile); the largest packs are left alone.
const compactInput = 256 << 20

// packFile is one pack of the mirror.
type packFile struct {
	base string // path without extension
	size int64
}

// compact merges the mirror's packs into one when there are compactAt or
// more, git repack's job done without git: every pack but the largest (the
// clone's, as a rule), those kept by a .keep file and those geometricCut
// leaves, smallest first, up to compactInput bytes, is read object by object (deltas resolved) and
// written again as one pack of whole objects (encodePack) beside the
// others; the storage reloads its indexes, checks the new pack holds every
// object, and only then are the merged packs removed. A crash at any point
// leaves every object readable: before the removal objects are in both,
// after it in the new pack. Nothing is pruned. Called with r.mu held;
// returns the number of packs merged (0 when nothing was done).
func (r *Repo) compact() (int, error) {
	fs, dir, ok := packDir(r.repo.Storer)
	if !ok {
		return 0, nil
	}
	packs, err := listPacks(dir)
	if err != nil || len(packs) < compactAt {
		return 0, err
	}
	sort.Slice(packs, func(i, j int) bool { return packs[i].size < packs[j].size })
	cand := packs[:geometricCut(packs[:len(packs)-1])] // the largest stays
	var merge []packFile
	var total int64
	for _, p := range cand {
		if total+p.size > compactInput && len(merge) > 1 {
			break
		}
		merge = append(merge, p)
		total += p.size
	}
	if len(merge) < 2 {
		return 0, nil
	}
	seen := map[plumbing.Hash]bool{}
	var objs []plumbing.EncodedObject
	for _, p := range merge {
		hashes, err := packHashes(p.base + ".idx")
		if err != nil {
			return 0, err
		}
		for _, h := range hashes {
			if seen[h] {
				continue
			}
			seen[h] = true
			obj, err := r.repo.Storer.EncodedObject(plumbing.AnyObject, h)
			if err != nil {
				return 0, fmt.Errorf("compact: read %s: %w", h, err)
			}
			mem, err := inMemory(obj)
			if err == nil && mem.Hash() != h {
				err = fmt.Errorf("content hashes to %s", mem.Hash())
			}
			if err != nil {
				return 0, fmt.Errorf("compact: read %s: %w", h, err)
			}
			objs = append(objs, mem)
		}
	}
	p, err := encodePack(objs, runtime.GOMAXPROCS(0))
	if err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	if err := writePackFiles(dir, p); err != nil {
		return 0, fmt.Errorf("compact: write pack: %w", err)
	}
	fs.Reindex()
	kept, err := packHashes(filepath.Join(dir, "pack-"+p.sum.String()+".idx"))
	if err != nil || len(kept) != len(objs) {
		return 0, fmt.Errorf("compact: new pack %s holds %d of %d objects (%v)", p.sum, len(kept), len(objs), err)
	}
	for _, old := range merge {
		if old.base == filepath.Join(dir, "pack-"+p.sum.String()) {
			continue // the same content as the new pack: already in place
		}
		for _, ext := range []string{".pack", ".idx", ".rev", ".bitmap", ".mtimes"} {
			if err := os.Remove(old.base + ext); err != nil && !os.IsNotExist(err) {
				fs.Reindex()
				return 0, fmt.Errorf("compact: remove %s: %w", filepath.Base(old.base+ext), err)
			}
		}
	}
	fs.Reindex()
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	return len(merge), nil
}

// geometricCut returns how many of packs (sorted by size, smallest
// first) to merge: those below the largest packs that are each at least
// twice the size of all smaller packs together, which stay. So a pack a
// compaction wrote is merged again only once the packs written beside it
// add up to half its size, and each object is rewritten a logarithmic
// number of times (git repack --geometric=2 does the same). Merging every
// pack but the largest rewrote the mirror's status history at every
// compaction: at 100,000 nodes, 60% of a status commit's CPU.
func geometricCut(packs []packFile) int {
	var below int64
	for _, p := range packs {
		below += p.size
	}
	k := len(packs)
	for k > 0 {
		below -= packs[k-1].size
		if packs[k-1].size < 2*below {
			break
		}
		k--
	}
	return k
}

// maybeCompact compacts the mirror when it holds compactAt packs or more;
// a failure is logged, never returned: the mirror stays readable and the
// next fetch or status commit tries again. Called with r.mu held.
func (r *Repo) maybeCompact() {
	start := time.Now()
	n, err := r.compact()
	switch {
	case err != nil:
		r.opts.log.Warn().Err(err).Msg("mirror packs not compacted")
	case n > 0:
		r.opts.log.Info().Int("packs", n).Int64("took_ms", time.Since(start).Milliseconds()).Msg("mirror packs compacted")
	}
}

// listPacks returns the packs of dir that have an index and no .keep file.
func listPacks(dir string) ([]packFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list packs: %w", err)
	}
	var out []packFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") || !strings.HasSuffix(name, ".pack") {
			continue
		}
		base := filepath.Join(dir, strings.TrimSuffix(name, ".pack"))
		if !regularFile(base+".idx") || regularFile(base+".keep") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, packFile{base: base, size: info.Size()})
	}
	return out, nil
}

// packHashes returns the object ids an index file lists.
func packHashes(path string) ([]plumbing.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Base(path), err)
	}
	it, err := idx.Entries()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []plumbing.Hash
	for {
		e, err := it.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e.Hash)
	}
}

// inMemory copies obj into a MemoryObject, so encodePack's workers never
// share a pack reader.
func inMemory(obj plumbing.EncodedObject) (plumbing.EncodedObject, error) {
	rd, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	mem := &plumbing.MemoryObject{}
	mem.SetType(obj.Type())
	mem.SetSize(obj.Size())
	if _, err := io.Copy(mem, rd); err != nil {
		return nil, err
	}
	return mem, nil
}
