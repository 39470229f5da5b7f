package gitsync

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// overlay is an object storer that keeps new objects in memory and reads
// every other object from base. A status commit of thousands of files is
// built in it and then written into the mirror as one pack: one file
// instead of one loose object file per blob, which is what made the first
// version slow (each loose object is a temp file, a write and a rename).
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

// flush writes the new objects into base: as one pack when base takes packs
// (filesystem storage), one by one otherwise. Objects base already holds
// may be written again; git tolerates duplicates across packs.
func (o *overlay) flush() error {
	if len(o.order) == 0 {
		return nil
	}
	pw, ok := o.base.(storer.PackfileWriter)
	if !ok {
		for _, h := range o.order {
			if _, err := o.base.SetEncodedObject(o.objs[h]); err != nil {
				return err
			}
		}
		return nil
	}
	w, err := pw.PackfileWriter()
	if err != nil {
		return fmt.Errorf("open pack: %w", err)
	}
	mem := &overlay{base: o.base, objs: o.objs}
	// window 0: no delta search, status files are small and compress well
	if _, err := packfile.NewEncoder(w, mem, false).Encode(o.order, 0); err != nil {
		_ = w.Close()
		return fmt.Errorf("write pack: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("close pack: %w", err)
	}
	o.objs, o.order = map[plumbing.Hash]plumbing.EncodedObject{}, nil
	return nil
}
