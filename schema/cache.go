package schema

import (
	"crypto/sha256"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"cuelang.org/go/cue"

	"github.com/fleetwave/fleetwave"
)

// cacheKey identifies one file version: the result of the per-file checks
// depends only on the path (which gives the kind and name) and the content.
type cacheKey struct {
	path string
	sum  [sha256.Size]byte
}

// fileResult is the outcome of the per-file checks of one file version.
// It is shared by every Load that meets the same version and never
// modified after it is built: snapshots get copies of obj (copyObject).
type fileResult struct {
	key  fleetwave.ObjectKey
	obj  any    // nil when the file has errors
	hash string // Object.Hash
	errs []fleetwave.FileError
}

// job is one object file of a Load and, once checked, its result.
type job struct {
	path   string
	key    fleetwave.ObjectKey
	data   []byte
	sum    [sha256.Size]byte
	result *fileResult
}

// checkFiles runs the per-file checks of jobs on runtime.GOMAXPROCS(0)
// workers, taking the results of unchanged files from the cache of the
// previous Load, and makes the cache hold exactly the files of this Load.
// Each job gets its own result, so the outcome does not depend on the
// scheduling. It returns the number of files parsed.
func (v *Validator) checkFiles(jobs []job) int { return v.checkJobs(jobs, true) }

// checkJobs is checkFiles; the cache is replaced only when keep is true (a
// Load of a whole tree), and otherwise only read.
func (v *Validator) checkJobs(jobs []job, keep bool) int {
	v.mu.Lock()
	prev := v.cache
	v.mu.Unlock()

	var todo []int // indexes of jobs not in the cache
	for i := range jobs {
		j := &jobs[i]
		j.sum = sha256.Sum256(j.data)
		if r, ok := prev[cacheKey{j.path, j.sum}]; ok {
			j.result = r
		} else {
			todo = append(todo, i)
		}
	}

	workers := min(runtime.GOMAXPROCS(0), len(todo))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One CUE context per worker and Load: a context only grows, so
			// it must not outlive the Load.
			var ctx *cue.Context
			for {
				n := int(next.Add(1)) - 1
				if n >= len(todo) {
					return
				}
				if ctx == nil {
					ctx, _ = newContext()
				}
				j := &jobs[todo[n]]
				o, errs := v.checkFile(ctx, j.path, j.key, j.data)
				r := &fileResult{key: j.key, errs: errs}
				if o != nil {
					r.obj, r.hash = o.obj, o.hash
				}
				j.result = r
			}
		}()
	}
	wg.Wait()
	if !keep {
		return len(todo)
	}

	// Keep only the files of this Load: the cache is bounded by the tree.
	next2 := make(map[cacheKey]*fileResult, len(jobs))
	for i := range jobs {
		next2[cacheKey{jobs[i].path, jobs[i].sum}] = jobs[i].result
	}
	v.mu.Lock()
	v.cache = next2
	v.mu.Unlock()
	return len(todo)
}

// buildData parses one file that passed its per-file checks again and
// returns its data, for the positions of cross-object errors. It returns a
// value that does not exist when the file does not parse.
func (v *Validator) buildData(p string, data []byte) cue.Value {
	f, errs := parseFile(p, data, v.opts.maxFileSize)
	if len(errs) > 0 {
		return cue.Value{}
	}
	ctx, err := newContext()
	if err != nil {
		return cue.Value{}
	}
	return ctx.BuildFile(f)
}

// copyObject returns a deep copy of a decoded object, so that a snapshot
// shares no map, slice or pointer with the cache: a caller that modifies
// its snapshot cannot change a later one.
func copyObject(obj any) any {
	switch x := obj.(type) {
	case *fleetwave.Config:
		c := *x
		c.MaintenanceWindows = maps.Clone(x.MaintenanceWindows)
		c.PriorityOrder = slices.Clone(x.PriorityOrder)
		if x.Enablement != nil {
			e := fleetwave.Enablement{Lifecycle: copyScope(x.Enablement.Lifecycle), ConfigApply: copyScope(x.Enablement.ConfigApply)}
			c.Enablement = &e
		}
		return &c
	case *fleetwave.Trigger:
		c := *x
		c.TargetOrganizations = slices.Clone(x.TargetOrganizations)
		c.TargetWorkspaces = slices.Clone(x.TargetWorkspaces)
		c.Nodes = slices.Clone(x.Nodes)
		c.Selector = copySelector(x.Selector)
		return &c
	case *fleetwave.Block:
		c := *x
		if x.Actions != nil {
			c.Actions = make(map[string]fleetwave.BlockAction, len(x.Actions))
			for k, a := range x.Actions {
				a.Requires = slices.Clone(a.Requires)
				c.Actions[k] = a
			}
		}
		if x.Detect != nil {
			d := *x.Detect
			c.Detect = &d
		}
		return &c
	case *fleetwave.Node:
		c := *x
		c.Labels = maps.Clone(x.Labels)
		c.MaintenanceWindows = slices.Clone(x.MaintenanceWindows)
		c.Capabilities = slices.Clone(x.Capabilities)
		c.DataAddresses = maps.Clone(x.DataAddresses)
		return &c
	case *fleetwave.Organization:
		c := *x
		c.MaintenanceWindows = slices.Clone(x.MaintenanceWindows)
		return &c
	case *fleetwave.Workspace:
		c := *x
		c.MaintenanceWindows = slices.Clone(x.MaintenanceWindows)
		return &c
	case *fleetwave.RolloutRequest:
		c := *x
		c.Nodes = slices.Clone(x.Nodes)
		c.Selector = copySelector(x.Selector)
		return &c
	case *fleetwave.ApprovalRequest:
		c := *x
		c.Nodes = slices.Clone(x.Nodes)
		return &c
	}
	panic("schema: copyObject: unknown object type")
}

func copyScope(s *fleetwave.EnablementScope) *fleetwave.EnablementScope {
	if s == nil {
		return nil
	}
	return &fleetwave.EnablementScope{All: s.All, Nodes: slices.Clone(s.Nodes), Selector: copySelector(s.Selector)}
}

func copySelector(s *fleetwave.Selector) *fleetwave.Selector {
	if s == nil {
		return nil
	}
	c := &fleetwave.Selector{
		MatchLabels:      maps.Clone(s.MatchLabels),
		MatchExpressions: slices.Clone(s.MatchExpressions),
	}
	for i := range c.MatchExpressions {
		c.MatchExpressions[i].Values = slices.Clone(c.MatchExpressions[i].Values)
	}
	return c
}
