package gitsync

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// compactAt is the number of packs in the mirror from which compact merges
// them. Every fetch and every status commit adds a pack, and go-git looks
// for an object in every pack's index (one after the other), so an
// unattended hub would slow down with each commit.
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
// after it in the new pack. Nothing is pruned.
//
// Called without r.mu: it takes it to find the packs and to put the new
// one in place, not while it reads and merges them (seconds at 100,000
// nodes, while a sync would wait); only compaction removes packs, one at
// a time (compactMu). Returns the number of packs merged (0 when nothing
// was done, or the mirror was closed meanwhile).
func (r *Repo) compact() (int, error) {
	r.compactMu.Lock()
	defer r.compactMu.Unlock()
	return r.compactHeld()
}

// compactHeld is compact, compactMu held.
func (r *Repo) compactHeld() (int, error) {
	s, err := r.storage("compact: list packs")
	if err != nil {
		return 0, nil // closed
	}
	_, dir, ok := packDir(s)
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
	if r.duringCompaction != nil {
		r.duringCompaction()
	}
	p, err := r.mergePacks(merge)
	if err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	staged, err := stagePackFiles(dir, p)
	if err != nil {
		return 0, fmt.Errorf("compact: write pack: %w", err)
	}
	defer r.lock("compact: install")()
	if r.usable() != nil {
		staged.discard()
		return 0, nil // closed meanwhile: nothing put in place
	}
	fs, now, ok := packDir(r.repo.Storer)
	if !ok || now != dir {
		staged.discard()
		return 0, nil // another mirror now (opened again): its packs are its own
	}
	if err := staged.install(); err != nil {
		return 0, fmt.Errorf("compact: write pack: %w", err)
	}
	fs.Reindex()
	var kept []plumbing.Hash
	written, err := readPackIndex(filepath.Join(dir, "pack-"+p.sum.String()+".idx"))
	if err == nil {
		kept = written.hashes
	}
	if err != nil || len(kept) != len(p.hashes) {
		return 0, fmt.Errorf("compact: new pack %s holds %d of %d objects (%v)", p.sum, len(kept), len(p.hashes), err)
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
	r.warmIndexes()
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("compact: %w", err)
	}
	return len(merge), nil
}

// warmIndexes reads the tips the next operation reads (the tracked
// branch's commit and trees, the status branch's commit), so that the
// storage loads every pack's index again, and builds the offsets of the
// packs those objects are in, while the compaction holds mu. The next
// sync, fetch or status write would otherwise do it under mu itself
// (about 0.1 s on an idle machine at 100,000 nodes, seconds on a busy
// hub: a sync's read of a pushed commit held the lock for 2.3 s right
// after a compaction). A read that fails leaves the work to the next
// reader, as before. The caller holds mu.
func (r *Repo) warmIndexes() {
	s := r.repo.Storer
	if c, err := object.GetCommit(s, r.lastHead); err == nil {
		if t, err := c.Tree(); err == nil {
			for _, e := range t.Entries {
				if e.Mode == filemode.Dir {
					_, _ = object.GetTree(s, e.Hash)
				}
			}
		}
	}
	if r.opts.statusBranch != "" {
		if ref, err := r.repo.Reference(r.statusRef(), true); err == nil {
			_, _ = object.GetCommit(s, ref.Hash())
		}
	}
}

// mergePacks returns one pack holding every object of packs. A whole
// object (not a delta) is copied as its pack holds it, compressed, after
// its CRC-32 is checked against the index: our own packs hold only whole
// objects, and a compaction that inflated and compressed each again took
// 5 s for 31 status commits of a directory of 100,000 files. A delta
// (from a fetched pack) is read through the mirror, resolved, and
// compressed again as a whole object, its content hashed against its id.
func (r *Repo) mergePacks(packs []packFile) (*encodedPack, error) {
	seen := map[plumbing.Hash]bool{}
	var srcs []rawPack
	var deltas []plumbing.Hash
	for _, p := range packs {
		src, err := readRawPack(p.base)
		if err != nil {
			return nil, err
		}
		whole := src.entries[:0]
		for _, e := range src.entries {
			if seen[e.Hash] {
				continue
			}
			seen[e.Hash] = true
			if t := plumbing.ObjectType(src.data[e.Offset] >> 4 & 7); t.IsDelta() {
				deltas = append(deltas, e.Hash)
				continue
			}
			whole = append(whole, e)
		}
		src.entries = whole
		srcs = append(srcs, src)
	}
	if len(deltas) > 0 {
		objs, err := r.resolveDeltas(deltas)
		if err != nil {
			return nil, err
		}
		p, err := encodePack(objs, runtime.GOMAXPROCS(0))
		if err != nil {
			return nil, err
		}
		src, err := rawPackOf("the resolved deltas", p.data, p.idx)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, src)
	}
	return concatPacks(srcs)
}

// resolveDeltas reads the objects stored as deltas through the mirror,
// each under a hold of mu of its own (a compaction resolving the deltas of
// a large fetched pack under one hold held it 0.8 s at 100,000 nodes), as
// whole objects whose content is checked against their ids.
func (r *Repo) resolveDeltas(deltas []plumbing.Hash) ([]plumbing.EncodedObject, error) {
	read := lockedObjects{r: r, op: "compact: read delta"}
	objs := make([]plumbing.EncodedObject, 0, len(deltas))
	for _, h := range deltas {
		mem, err := read.EncodedObject(plumbing.AnyObject, h)
		if err == nil && mem.Hash() != h {
			err = fmt.Errorf("content hashes to %s", mem.Hash())
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h, err)
		}
		objs = append(objs, mem)
	}
	return objs, nil
}

// rawPack is a pack's bytes and the entries to take from it, with the end
// of every entry of the pack by offset (ends).
type rawPack struct {
	name    string
	data    []byte
	entries []idxfile.Entry
	ends    map[uint64]uint64
}

// readRawPack reads the pack at base (.pack and .idx) and its entries in
// offset order.
func readRawPack(base string) (rawPack, error) {
	name := filepath.Base(base)
	f, err := os.Open(base + ".idx")
	if err != nil {
		return rawPack{}, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return rawPack{}, fmt.Errorf("read %s.idx: %w", name, err)
	}
	data, err := os.ReadFile(base + ".pack")
	if err != nil {
		return rawPack{}, err
	}
	return rawPackOf(name+".pack", data, idx)
}

// rawPackOf is the pack data (named name in errors) with its entries in
// offset order, read from its index.
func rawPackOf(name string, data []byte, idx *idxfile.MemoryIndex) (rawPack, error) {
	if len(data) < packHeaderLen+hash.Size || string(data[:4]) != "PACK" {
		return rawPack{}, fmt.Errorf("%s: not a pack", name)
	}
	it, err := idx.EntriesByOffset()
	if err != nil {
		return rawPack{}, err
	}
	defer it.Close()
	src := rawPack{name: name, data: data}
	for {
		e, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return rawPack{}, fmt.Errorf("index of %s: %w", name, err)
		}
		if e.Offset < packHeaderLen || e.Offset >= uint64(len(data)-hash.Size) {
			return rawPack{}, fmt.Errorf("%s: object %s at offset %d, outside the pack", src.name, e.Hash, e.Offset)
		}
		src.entries = append(src.entries, *e)
	}
	src.ends = entryEnds(src.entries, len(data))
	return src, nil
}

// entryEnds maps the offset of each entry (entries in offset order) to
// the offset where it ends: the next entry's, or the trailing checksum's.
func entryEnds(entries []idxfile.Entry, size int) map[uint64]uint64 {
	ends := make(map[uint64]uint64, len(entries))
	for i, e := range entries {
		end := uint64(size - hash.Size)
		if i+1 < len(entries) {
			end = entries[i+1].Offset
		}
		ends[e.Offset] = end
	}
	return ends
}

// concatPacks writes the entries of srcs, as they are, into one pack with
// its index.
func concatPacks(srcs []rawPack) (*encodedPack, error) {
	size, count := packHeaderLen+hash.Size, 0
	for _, src := range srcs {
		for _, e := range src.entries {
			size += int(src.ends[e.Offset] - e.Offset)
			count++
		}
	}
	p, iw, err := startPack(size, count)
	if err != nil {
		return nil, err
	}
	p.hashes = make([]plumbing.Hash, 0, count)
	for _, src := range srcs {
		for _, e := range src.entries {
			entry := src.data[e.Offset:src.ends[e.Offset]]
			if crc := crc32.ChecksumIEEE(entry); crc != e.CRC32 {
				return nil, fmt.Errorf("%s: object %s at offset %d: CRC-32 %08x, index says %08x", src.name, e.Hash, e.Offset, crc, e.CRC32)
			}
			if err := iw.OnInflatedObjectContent(e.Hash, int64(len(p.data)), e.CRC32, nil); err != nil {
				return nil, err
			}
			p.data = append(p.data, entry...)
			p.hashes = append(p.hashes, e.Hash)
		}
	}
	return p, p.finish(iw)
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

// maybeCompact starts a compaction in the background when none runs; it
// merges when the mirror holds compactAt packs or more. A failure is
// logged, never returned: the mirror stays readable and the next fetch or
// status commit tries again. Called without r.mu, once the operation that
// added a pack is done, which does not wait for it: at 100,000 nodes a
// compaction takes about a second, and a sync's fetch that ran it made
// the pushed commit wait that long for its snapshot.
func (r *Repo) maybeCompact() {
	if !r.compactMu.TryLock() {
		return // one runs: it merges what it found, the next operation tries again
	}
	r.compacting.Add(1)
	go func() {
		defer r.compacting.Done()
		defer r.compactMu.Unlock()
		start := time.Now()
		n, err := r.compactHeld()
		switch {
		case err != nil:
			r.opts.log.Warn().Err(err).Msg("mirror packs not compacted")
		case n > 0:
			r.opts.log.Info().Int("packs", n).Int64("took_ms", time.Since(start).Milliseconds()).Msg("mirror packs compacted")
		}
	}()
}

// packCount is the number of packs in the mirror (0 for one in memory).
// The caller holds mu.
func (r *Repo) packCount() int {
	_, dir, ok := packDir(r.repo.Storer)
	if !ok {
		return 0
	}
	packs, _ := listPacks(dir)
	return len(packs)
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

// readPackIndex reads the pack index file path: the index, the pack's
// checksum and the object ids it lists (no pack data).
func readPackIndex(path string) (*encodedPack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Base(path), err)
	}
	p := &encodedPack{idx: idx}
	copy(p.sum[:], idx.PackfileChecksum[:])
	it, err := idx.Entries()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for {
		e, err := it.Next()
		if err == io.EOF {
			return p, nil
		}
		if err != nil {
			return nil, err
		}
		p.hashes = append(p.hashes, e.Hash)
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
