package schema

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"

	"cuelang.org/go/cue"

	"github.com/fleetwave/fleetwave"
)

// A Sequence loads the trees of one branch one after the other, as the hub
// follows its repository. A tree whose files are those of the last valid
// tree it loaded, but for the content of some node, BRC, rollout or
// approval files (or of files that hold no object), is loaded from that
// tree's snapshot: only the changed files are checked, only their objects
// and the objects that read them are checked against the others again,
// and the objects that did not change are shared between the two
// snapshots. At 100,000 nodes that is a few milliseconds where a Load
// takes over half a second. Any other tree, and any tree with an error, is
// loaded whole: the result is always what Load returns.
//
// Snapshots are read-only: two snapshots of a Sequence share their
// unchanged objects. A Sequence is safe for concurrent use.
type Sequence struct {
	v    *Validator
	mu   sync.Mutex
	last *loaded // the last tree loaded without error
	// followed counts the trees loaded from the last one
	followed int
}

// loaded is what a Sequence keeps of a valid tree.
type loaded struct {
	tag     string // the caller's name of the tree, "" for none
	files   map[string][]byte
	snap    *fleetwave.Snapshot // its maps and Config only: the caller sets Commit and Generations
	objs    []*object           // every object, in path order
	present map[fleetwave.ObjectKey]string
}

// Sequence returns a Sequence of v.
func (v *Validator) Sequence() *Sequence { return &Sequence{v: v} }

// Load validates a whole tree as Validator.Load does. The Sequence keeps
// the contents of files to compare the next tree with: they are not
// changed in place afterwards (the map itself may be).
func (s *Sequence) Load(files map[string][]byte) (*fleetwave.Snapshot, error) {
	return s.LoadChanged(maps.Clone(files), "", "", nil) // the caller may change its map
}

// LoadChanged is Load for the tree named tag (a commit), given the paths
// changed since the tree named base. When base is the last valid tree the
// Sequence loaded, only those paths are compared with it, not every file
// (a tenth of a sync at 100,000 nodes); otherwise, or with base "", every
// file is. The Sequence keeps files, the map too: the caller does not
// change it afterwards (a map of 100,000 files is not copied per commit).
func (s *Sequence) LoadChanged(files map[string][]byte, tag, base string, changed []string) (*fleetwave.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil {
		paths := changed
		if base == "" || base != s.last.tag {
			paths = nil
		}
		if snap, l := s.v.loadAfter(s.last, files, paths); snap != nil {
			l.tag = tag
			s.last = l
			s.followed++
			return snap, nil
		}
	}
	snap, l, err := s.v.load(files)
	if err != nil {
		return nil, err // the last valid tree stays the base of the next
	}
	if s.last != nil && base != "" && base == s.last.tag {
		// loaded whole (a file added or removed, a config changed), yet
		// what changed is known: every other object is as it was
		snap.ChangedSince, snap.Changed = base, objectKeys(changed)
	}
	l.files, l.tag = files, tag
	s.last = l
	return snap, nil
}

// objectKeys returns the keys of the object files among paths, sorted,
// each once.
func objectKeys(paths []string) []fleetwave.ObjectKey {
	keys := make([]fleetwave.ObjectKey, 0, len(paths))
	for _, p := range paths {
		if k, ok := ObjectKeyForPath(p); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// followKinds are the kinds whose content may change in a tree loaded from
// the last one: the checks that read another object's content read only
// BRCs (a rollout's action), nodes (BRC scopes) and the kinds no object
// reads (rollouts, approvals). A changed config, block, workspace or
// organization is read by many objects: such a tree is loaded whole.
var followKinds = map[fleetwave.Kind]bool{
	fleetwave.KindNode: true, fleetwave.KindTrigger: true,
	fleetwave.KindRollout: true, fleetwave.KindApproval: true,
}

// loadAfter loads files from last, the last valid tree, given the paths
// that may differ from it (nil: every path may): the snapshot and what a
// Sequence keeps of it, or nil when files must be loaded whole (the set of
// paths differs, a file of another kind changed, or a changed file or a
// check has an error, which Load reports with all the others).
//
// Files added since last are loaded from it too when paths lists them and
// each is a new object of a kind no other object's check reads but BRCs
// (a BRC, a rollout request, an approval): a push that starts a rollout
// adds a BRC, and at 100,000 nodes a whole load took 1.2 s of the hub's
// sync. Any other file added, or one removed, is loaded whole.
func (v *Validator) loadAfter(last *loaded, files map[string][]byte, paths []string) (*fleetwave.Snapshot, *loaded) {
	if paths == nil && len(files) != len(last.files) {
		return nil, nil // a path added or removed, and not listed
	}
	var jobs []job
	kinds := map[fleetwave.Kind]bool{}
	var added map[fleetwave.ObjectKey]string // key -> path of each object added
	if paths == nil {
		paths = make([]string, 0, len(files))
		for p, data := range files {
			old, ok := last.files[p]
			if !ok {
				return nil, nil // a path added (and one removed)
			}
			if !bytes.Equal(old, data) {
				paths = append(paths, p)
			}
		}
	}
	for _, p := range paths {
		data, ok := files[p]
		old, had := last.files[p]
		if !ok {
			return nil, nil // a path removed (or listed and in neither tree)
		}
		if had && bytes.Equal(old, data) {
			continue
		}
		key, isObject := ObjectKeyForPath(p)
		if !had {
			if _, dup := last.present[key]; !isObject || !addKinds[key.Kind()] || dup || added[key] != "" {
				return nil, nil // Load tells a path outside the layout, a duplicate
			}
			if added == nil {
				added = map[fleetwave.ObjectKey]string{}
			}
			added[key] = p
		}
		if !isObject {
			continue // Load does not read it, and its path was valid
		}
		if !followKinds[key.Kind()] {
			return nil, nil
		}
		kinds[key.Kind()] = true
		jobs = append(jobs, job{path: p, key: key, data: data})
	}
	if len(files) != len(last.files)+len(added) {
		return nil, nil // a path removed that paths did not list
	}
	v.checkJobs(jobs, false) // the cache stays the last whole tree's

	prev := last.snap
	snap := &fleetwave.Snapshot{Config: prev.Config, Triggers: prev.Triggers, Blocks: prev.Blocks, Nodes: prev.Nodes,
		Organizations: prev.Organizations, Workspaces: prev.Workspaces, Rollouts: prev.Rollouts, Approvals: prev.Approvals,
		Objects: prev.Objects, NodeIDs: prev.NodeIDs}
	objs := last.objs
	if len(jobs) > 0 {
		snap.Objects, objs = maps.Clone(prev.Objects), slices.Clone(last.objs)
	}
	if kinds[fleetwave.KindNode] {
		snap.Nodes = maps.Clone(prev.Nodes)
	}
	if kinds[fleetwave.KindTrigger] {
		snap.Triggers = maps.Clone(prev.Triggers)
	}
	if kinds[fleetwave.KindRollout] {
		snap.Rollouts = maps.Clone(prev.Rollouts)
	}
	if kinds[fleetwave.KindApproval] {
		snap.Approvals = maps.Clone(prev.Approvals)
	}
	var recheck []*object
	for _, j := range jobs {
		r := j.result
		if len(r.errs) > 0 || r.obj == nil {
			return nil, nil
		}
		i, found := slices.BinarySearchFunc(objs, j.path, func(o *object, p string) int { return strings.Compare(o.path, p) })
		o := &object{path: j.path, key: r.key, obj: copyObject(r.obj), hash: r.hash}
		switch {
		case found:
			objs[i] = o
		case added[j.key] == j.path:
			objs = slices.Insert(objs, i, o)
		default:
			return nil, nil // not an object of the last tree: cannot be, as it was valid
		}
		recheck = append(recheck, o)
		place(snap, o) // a node, BRC, rollout or approval (followKinds): maps of snap's own
	}
	if kinds[fleetwave.KindTrigger] {
		// a rollout request reads its BRC's block: each is checked again
		for _, o := range objs {
			if _, ok := o.obj.(*fleetwave.RolloutRequest); ok && !slices.Contains(recheck, o) {
				recheck = append(recheck, o)
			}
		}
	}
	present := last.present
	if len(added) > 0 {
		present = maps.Clone(present)
		maps.Copy(present, added)
	}
	dataOf := func(p string) cue.Value { return v.buildData(p, files[p]) }
	if len(referenceErrors(snap, recheck, present, dataOf)) > 0 {
		return nil, nil
	}
	if (kinds[fleetwave.KindTrigger] || kinds[fleetwave.KindNode]) && len(ownerConflicts(snap, objs, dataOf)) > 0 {
		return nil, nil
	}
	if last.tag != "" { // every object but those of jobs is the named tree's
		snap.ChangedSince, snap.Changed = last.tag, make([]fleetwave.ObjectKey, len(jobs))
		for i, j := range jobs {
			snap.Changed[i] = j.key
		}
	}
	v.opts.log.Debug().Int("files", len(files)).Int("changed", len(jobs)).Msg("tree validated from the last one")
	return snap, &loaded{files: files, snap: snap, objs: objs, present: present}
}

// addKinds are the kinds of the objects a tree loaded from the last one
// may add: no check of another object reads whether one exists, but a
// rollout request's of its BRC, which every request runs again when a
// BRC changes.
var addKinds = map[fleetwave.Kind]bool{
	fleetwave.KindTrigger: true, fleetwave.KindRollout: true, fleetwave.KindApproval: true,
}
