package gitsync

import (
	"bytes"
	"compress/zlib"
	"crypto"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// overlay is an object storer that keeps new objects in memory and reads
// every other object from base. A status commit of thousands of files is
// built in it and then written into the mirror as one pack: one file
// instead of one loose object file per blob, which is what made the first
// version slow (each loose object is a temp file, a write and a rename).
// The same pack is what the push sends (pushPack).
type overlay struct {
	base  storer.EncodedObjectStorer
	objs  map[plumbing.Hash]plumbing.EncodedObject
	order []plumbing.Hash
}

var _ storer.EncodedObjectStorer = (*overlay)(nil)

func newOverlay(base storer.EncodedObjectStorer) *overlay {
	return &overlay{base: base, objs: map[plumbing.Hash]plumbing.EncodedObject{}}
}

func (o *overlay) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (o *overlay) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	h := obj.Hash()
	if _, ok := o.objs[h]; !ok {
		o.objs[h] = obj
		o.order = append(o.order, h)
	}
	return h, nil
}

func (o *overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, ok := o.objs[h]; ok {
		if t != plumbing.AnyObject && obj.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return obj, nil
	}
	return o.base.EncodedObject(t, h)
}

func (o *overlay) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return o.base.IterEncodedObjects(t)
}

func (o *overlay) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := o.objs[h]; ok {
		return nil
	}
	return o.base.HasEncodedObject(h)
}

func (o *overlay) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if obj, ok := o.objs[h]; ok {
		return obj.Size(), nil
	}
	return o.base.EncodedObjectSize(h)
}

func (o *overlay) AddAlternate(remote string) error { return o.base.AddAlternate(remote) }

// flush writes the new objects into base as one pack and returns that pack
// (nil when there is nothing new) for the push to send as is. Objects base
// already holds may be written again; git tolerates duplicates across
// packs.
func (o *overlay) flush() (*encodedPack, error) {
	n := o.take()
	if n == nil {
		return nil, nil
	}
	if err := n.encode(); err != nil {
		return nil, err
	}
	if err := n.store(o.base); err != nil {
		return nil, err
	}
	return n.pack, nil
}

// newObjects are the objects an overlay took in, in order, and once
// encoded their pack: flush in steps, so that the compression, most of a
// status commit's CPU, runs without the mirror's lock (buildStatus).
type newObjects struct {
	objs []plumbing.EncodedObject
	pack *encodedPack
}

// take hands over the new objects (nil when there is none) and empties the
// overlay.
func (o *overlay) take() *newObjects {
	if len(o.order) == 0 {
		return nil
	}
	objs := make([]plumbing.EncodedObject, len(o.order))
	for i, h := range o.order {
		objs[i] = o.objs[h]
	}
	o.objs, o.order = map[plumbing.Hash]plumbing.EncodedObject{}, nil
	return &newObjects{objs: objs}
}

// encode compresses the objects into their pack; it touches no storage.
func (n *newObjects) encode() error {
	p, err := encodePack(n.objs, runtime.GOMAXPROCS(0))
	if err != nil {
		return fmt.Errorf("encode pack: %w", err)
	}
	n.pack = p
	return nil
}

// store writes the encoded pack into s.
func (n *newObjects) store(s storer.EncodedObjectStorer) error {
	return storePack(s, n.pack, n.objs)
}

// stage and install are store in two steps (stagePack, installPack): the
// first writes the files and may run without the mirror's lock.
func (n *newObjects) stage(s storer.EncodedObjectStorer) (*stagedPack, error) {
	return stagePack(s, n.pack, n.objs)
}

func (n *newObjects) install(s storer.EncodedObjectStorer, staged *stagedPack) error {
	return installPack(s, n.pack, n.objs, staged)
}

// encodedPack is a version 2 pack of whole (undeltified) objects with its
// index: written into the mirror and sent to the remote byte for byte.
type encodedPack struct {
	data   []byte        // the pack, trailing checksum included
	sum    plumbing.Hash // the trailing checksum, which names the pack files
	idx    *idxfile.MemoryIndex
	hashes []plumbing.Hash // the objects, in pack order
}

const (
	packHeaderLen = 12
	// packChunk objects are compressed by one worker in one go: small
	// enough to balance a few thousand objects over the workers, large
	// enough that handing out chunks costs nothing.
	packChunk = 128
	// packCompression trades a few percent of size for a several times
	// cheaper compressor: status files are small, and at the default level
	// compress/flate spends most of its time clearing 640 KiB of match
	// tables for every object. git writes loose objects at this level too
	// (core.looseCompression). The receiver keeps the pack as sent (git
	// index-pack --keep); objects a later repack leaves whole keep it.
	packCompression = zlib.BestSpeed
)

// encodePack compresses objs on up to workers goroutines into one pack in
// the given order; the bytes do not depend on workers. Objects are not
// deltified: finding bases means reading earlier versions back from the
// mirror's packs (what made go-git's push slow) to save little on small
// files, and git gc on the remote deltifies them later anyway.
func encodePack(objs []plumbing.EncodedObject, workers int) (*encodedPack, error) {
	type chunk struct {
		buf  []byte
		ends []int // end of each entry in buf
		crcs []uint32
		err  error
	}
	chunks := make([]chunk, (len(objs)+packChunk-1)/packChunk)
	workers = max(1, min(workers, len(chunks)))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var e entryEncoder
			e.init()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(chunks) {
					return
				}
				c := &chunks[i]
				part := objs[i*packChunk : min(len(objs), (i+1)*packChunk)]
				room := 0
				for _, obj := range part {
					room += int(obj.Size()) + 32 // deflate's worst case for small objects
				}
				e.buf = make([]byte, 0, room)
				c.ends, c.crcs = make([]int, 0, len(part)), make([]uint32, 0, len(part))
				for _, obj := range part {
					start := len(e.buf)
					if c.err = e.add(obj); c.err != nil {
						break
					}
					c.ends = append(c.ends, len(e.buf))
					c.crcs = append(c.crcs, crc32.ChecksumIEEE(e.buf[start:]))
				}
				c.buf = e.buf
			}
		})
	}
	wg.Wait()

	size := packHeaderLen + hash.Size
	for i := range chunks {
		if chunks[i].err != nil {
			return nil, chunks[i].err
		}
		size += len(chunks[i].buf)
	}
	p, iw, err := startPack(size, len(objs))
	if err != nil {
		return nil, err
	}
	p.hashes = make([]plumbing.Hash, len(objs))
	k := 0
	for i := range chunks {
		c := &chunks[i]
		base, start := len(p.data), 0
		for j, end := range c.ends {
			h := objs[k].Hash()
			p.hashes[k] = h
			if err := iw.OnInflatedObjectContent(h, int64(base+start), c.crcs[j], nil); err != nil {
				return nil, err
			}
			start = end
			k++
		}
		p.data = append(p.data, c.buf...)
	}
	return p, p.finish(iw)
}

// startPack returns a pack of count objects holding its header, with room
// for size bytes in all, and the writer of its index.
func startPack(size, count int) (*encodedPack, *idxfile.Writer, error) {
	p := &encodedPack{data: make([]byte, packHeaderLen, size)}
	copy(p.data, "PACK")
	binary.BigEndian.PutUint32(p.data[4:], 2)
	binary.BigEndian.PutUint32(p.data[8:], uint32(count))
	iw := new(idxfile.Writer)
	if err := iw.OnHeader(uint32(count)); err != nil {
		return nil, nil, err
	}
	return p, iw, nil
}

// finish appends the pack's checksum, which names it, and builds its
// index from iw, which has seen every entry.
func (p *encodedPack) finish(iw *idxfile.Writer) error {
	sh := hash.New(crypto.SHA1)
	_, _ = sh.Write(p.data)
	copy(p.sum[:], sh.Sum(nil))
	p.data = append(p.data, p.sum[:]...)
	if err := iw.OnFooter(p.sum); err != nil {
		return err
	}
	idx, err := iw.Index()
	if err != nil {
		return err
	}
	p.idx = idx
	return nil
}

// entryEncoder appends pack entries to buf; one per worker, reused.
type entryEncoder struct {
	buf     []byte
	zw      *zlib.Writer
	copyBuf []byte
}

func (e *entryEncoder) init() {
	zw, err := zlib.NewWriterLevel(io.Discard, packCompression)
	if err != nil {
		panic(err) // only for an invalid level
	}
	e.zw, e.copyBuf = zw, make([]byte, 32<<10)
}

// Write appends p to buf: the zlib writer's output.
func (e *entryEncoder) Write(p []byte) (int, error) {
	e.buf = append(e.buf, p...)
	return len(p), nil
}

// add appends obj as a pack entry: the type and size header, then the
// zlib-compressed content.
func (e *entryEncoder) add(obj plumbing.EncodedObject) error {
	size := obj.Size()
	c := byte(obj.Type())<<4 | byte(size&0x0f)
	for size >>= 4; size != 0; size >>= 7 {
		e.buf = append(e.buf, c|0x80)
		c = byte(size & 0x7f)
	}
	e.buf = append(e.buf, c)
	e.zw.Reset(e)
	rd, err := obj.Reader()
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(e.zw, rd, e.copyBuf)
	_ = rd.Close()
	if err != nil {
		return err
	}
	if n != obj.Size() {
		return fmt.Errorf("object %s: %d bytes, header says %d", obj.Hash(), n, obj.Size())
	}
	return e.zw.Close()
}

// directPackMin is the number of objects, and directPackBytes their
// inflated size, from which storePack writes a pack into a filesystem
// storage itself. go-git's pack writer parses the pack it is given again
// (inflating and hashing every object: about 17 µs an object, 170 ms for a
// status commit of 10,000 files; a directory of 100,000 files is a tree of
// 4 MB, 10 ms to inflate and hash again), but registers it at no cost; a
// pack written beside it is registered through that writer's hook
// (registerPack).
const (
	directPackMin   = 2048
	directPackBytes = 1 << 20
)

// storePack makes p's objects (objs, in p's order) readable from s. A pack
// of at least directPackMin objects or directPackBytes inflated bytes
// going to a go-git filesystem storage
// whose objects live in its own directory (not a linked worktree's common
// one) is written next to the other packs with its index (each synced, then
// renamed into place, index first as go-git's own pack writer does, so
// neither git nor go-git sees half a pack), and its index is added to the
// storage's (registerPack). Smaller packs, and other storages, go through
// the storage's pack writer, or else object by object.
func storePack(s storer.EncodedObjectStorer, p *encodedPack, objs []plumbing.EncodedObject) error {
	staged, err := stagePack(s, p, objs)
	if err != nil {
		return err
	}
	return installPack(s, p, objs, staged)
}

// stagePack is the first half of storePack, which reads nothing of s and
// may run without the mirror's lock: a pack to be written directly has
// its files written (and synced) under temporary names in s's pack
// directory, which no reader looks at; nil for any other pack.
func stagePack(s storer.EncodedObjectStorer, p *encodedPack, objs []plumbing.EncodedObject) (*stagedPack, error) {
	_, dir, ok := packDir(s)
	if !ok || (len(objs) < directPackMin && inflatedSize(objs) < directPackBytes) {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write pack: %w", err)
	}
	staged, err := stagePackFiles(dir, p)
	if err != nil {
		return nil, fmt.Errorf("write pack: %w", err)
	}
	return staged, nil
}

// installPack is the second half of storePack: a staged pack is renamed
// into place and registered, any other goes through s's pack writer, or
// else object by object. A staged pack whose directory is not s's (the
// mirror opened again meanwhile), or that was found in place and is gone
// (merged by a compaction meanwhile), is removed and the objects stored
// the other way.
func installPack(s storer.EncodedObjectStorer, p *encodedPack, objs []plumbing.EncodedObject, staged *stagedPack) error {
	if staged != nil {
		if fs, dir, ok := packDir(s); ok && dir == staged.dir && staged.intact() {
			return installStaged(fs, p, staged)
		}
		staged.discard()
	}
	if pw, ok := s.(storer.PackfileWriter); ok {
		w, err := pw.PackfileWriter()
		if err != nil {
			return fmt.Errorf("open pack: %w", err)
		}
		if _, err := w.Write(p.data); err != nil {
			_ = w.Close()
			return fmt.Errorf("write pack: %w", err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("close pack: %w", err)
		}
		return nil
	}
	for _, obj := range objs {
		if _, err := s.SetEncodedObject(obj); err != nil {
			return err
		}
	}
	return nil
}

// registerPack makes fs read the pack p written beside its others. go-git
// adds the index of a pack its own writer wrote through the writer's
// Notify hook; Reindex, the only other way, makes it reload every pack
// index of the mirror at its next read: a third of a status commit's CPU
// at 100,000 nodes (BenchmarkWriteStatus/100k). So a writer is opened and
// closed empty (its temporary file removed, nothing registered) for its
// hook, which then gets p's index. Opening the writer also drops the pack
// list go-git caches under ExclusiveAccess, so the new pack is listed.
// Where the hook cannot be had (another writer type, a writer that fails),
// the storage is reindexed as before: slower, as correct.
func registerPack(fs *filesystem.Storage, p *encodedPack) error {
	var notify func(plumbing.Hash, *idxfile.Writer)
	if w, err := fs.PackfileWriter(); err == nil {
		if pw, ok := w.(*dotgit.PackWriter); ok {
			notify, pw.Notify = pw.Notify, nil
		}
		if err := w.Close(); err != nil {
			notify = nil
		}
	}
	if notify == nil {
		fs.Reindex()
		return nil
	}
	iw := new(idxfile.Writer)
	if err := iw.OnHeader(uint32(len(p.hashes))); err != nil {
		return err
	}
	entries, err := p.idx.Entries()
	if err != nil {
		return err
	}
	defer entries.Close()
	for {
		e, err := entries.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := iw.OnInflatedObjectContent(e.Hash, int64(e.Offset), e.CRC32, nil); err != nil {
			return err
		}
	}
	if err := iw.OnFooter(p.sum); err != nil {
		return err
	}
	notify(p.sum, iw)
	return nil
}

// inflatedSize is the size of objs' contents.
func inflatedSize(objs []plumbing.EncodedObject) int64 {
	var n int64
	for _, o := range objs {
		n += o.Size()
	}
	return n
}

// packDir returns s as a go-git filesystem storage and its pack directory,
// false unless its objects live in its own directory (a linked worktree's
// are in the common one).
func packDir(s storer.EncodedObjectStorer) (*filesystem.Storage, string, bool) {
	fs, ok := s.(*filesystem.Storage)
	if !ok {
		return nil, "", false
	}
	objects := filepath.Join(fs.Filesystem().Root(), "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return nil, "", false
	}
	return fs, filepath.Join(objects, "pack"), true
}

// writePackFiles writes pack-<sum>.pack and .idx into dir. Packs are named
// by their content, so existing files are kept.
func writePackFiles(dir string, p *encodedPack) error {
	s, err := stagePackFiles(dir, p)
	if err != nil {
		return err
	}
	return s.install()
}

// stagedPack is a pack written to temporary files of its directory (which
// the storage does not read: their names are not pack-*), to be put in
// place by install or removed by discard.
type stagedPack struct {
	dir, base, tmpIdx, tmpPack string // tmp* "" when the pack was there already
}

// stagePackFiles writes p and its index to temporary files of dir, synced.
func stagePackFiles(dir string, p *encodedPack) (*stagedPack, error) {
	s := &stagedPack{dir: dir, base: filepath.Join(dir, "pack-"+p.sum.String())}
	if regularFile(s.base+".pack") && regularFile(s.base+".idx") {
		return s, nil
	}
	var idx bytes.Buffer
	if _, err := idxfile.NewEncoder(&idx).Encode(p.idx); err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	var err error
	if s.tmpIdx, err = writeTemp(dir, "tmp_idx_", idx.Bytes()); err != nil {
		return nil, err
	}
	if s.tmpPack, err = writeTemp(dir, "tmp_pack_", p.data); err != nil {
		_ = os.Remove(s.tmpIdx)
		return nil, err
	}
	return s, nil
}

// install renames the staged files into place, the index first.
func (s *stagedPack) install() error {
	if s.tmpIdx == "" {
		return nil
	}
	if err := os.Rename(s.tmpIdx, s.base+".idx"); err != nil {
		s.discard()
		return err
	}
	if err := os.Rename(s.tmpPack, s.base+".pack"); err != nil {
		_ = os.Remove(s.tmpPack)
		return err
	}
	return syncDir(s.dir)
}

// installStaged renames p's staged files into fs's pack directory and
// registers its index.
func installStaged(fs *filesystem.Storage, p *encodedPack, staged *stagedPack) error {
	if err := staged.install(); err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	if err := registerPack(fs, p); err != nil {
		return fmt.Errorf("register pack %s: %w", p.sum, err)
	}
	// make sure the pack is seen rather than point a ref at nothing
	if err := fs.HasEncodedObject(p.hashes[len(p.hashes)-1]); err != nil {
		return fmt.Errorf("pack %s written but not visible: %w", p.sum, err)
	}
	return nil
}

// intact says whether a pack found in place when it was staged still is.
func (s *stagedPack) intact() bool {
	return s.tmpIdx != "" || regularFile(s.base+".pack") && regularFile(s.base+".idx")
}

// discard removes the staged files (none: nil).
func (s *stagedPack) discard() {
	if s != nil && s.tmpIdx != "" {
		_ = os.Remove(s.tmpIdx)
		_ = os.Remove(s.tmpPack)
	}
}

// writeTemp writes data to a new read-only file in dir and syncs it.
func writeTemp(dir, prefix string, data []byte) (name string, err error) {
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	if err := f.Chmod(0o444); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return f.Name(), f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func regularFile(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// lockedObjects reads the mirror's objects for work done without mu (a
// status commit's trees, a compaction's deltas): each read takes mu, as
// op, and returns the object whole, in memory, since go-git's objects
// read their pack lazily. It stores nothing.
type lockedObjects struct {
	r  *Repo
	op string
}

var _ storer.EncodedObjectStorer = lockedObjects{}

func (l lockedObjects) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (l lockedObjects) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errors.New("the mirror is read without its lock here: objects are written to an overlay")
}

// storer returns the mirror's object store; the caller holds mu.
func (l lockedObjects) storer() (storer.EncodedObjectStorer, error) {
	if err := l.r.usable(); err != nil {
		return nil, err
	}
	return l.r.repo.Storer, nil
}

func (l lockedObjects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	defer l.r.lock(l.op)()
	s, err := l.storer()
	if err != nil {
		return nil, err
	}
	obj, err := s.EncodedObject(t, h)
	if err != nil {
		return nil, err
	}
	return inMemory(obj)
}

func (l lockedObjects) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("the mirror's objects are not iterated without its lock")
}

func (l lockedObjects) HasEncodedObject(h plumbing.Hash) error {
	defer l.r.lock(l.op)()
	s, err := l.storer()
	if err != nil {
		return err
	}
	return s.HasEncodedObject(h)
}

func (l lockedObjects) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	defer l.r.lock(l.op)()
	s, err := l.storer()
	if err != nil {
		return 0, err
	}
	return s.EncodedObjectSize(h)
}

func (l lockedObjects) AddAlternate(string) error {
	return errors.New("the mirror's alternates are not changed without its lock")
}
