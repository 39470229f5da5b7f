package schema

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"github.com/rs/zerolog"

	"github.com/fleetwave/fleetwave"
)

// schemaSource is the CUE schema of every object kind (package schema).
//
//go:embed cue/fleetwave.cue
var schemaSource []byte

// SchemaFile is the file name of the embedded schema, as Scaffold vendors it.
const SchemaFile = "fleetwave.cue"

// DefaultMaxFileSize is the largest object file Load accepts unless
// WithMaxFileSize says otherwise.
const DefaultMaxFileSize int64 = 1 << 20

// definitions names the CUE definition of each kind and the definition of
// its defaults (empty when the kind has none).
var definitions = map[fleetwave.Kind][2]string{
	fleetwave.KindConfig:       {"#Config", "defaults.config"},
	fleetwave.KindTrigger:      {"#Trigger", "defaults.trigger"},
	fleetwave.KindBlock:        {"#Block", "defaults.block"},
	fleetwave.KindNode:         {"#Node", ""},
	fleetwave.KindOrganization: {"#Organization", ""},
	fleetwave.KindWorkspace:    {"#Workspace", ""},
	fleetwave.KindRollout:      {"#Rollout", ""},
	fleetwave.KindApproval:     {"#Approval", ""},
}

type options struct {
	maxFileSize int64
	log         zerolog.Logger
	// cueOnly turns the fast path off: every file is evaluated by CUE
	// (tests compare both paths).
	cueOnly bool
}

// Option configures a Validator.
type Option func(*options)

// WithMaxFileSize sets the largest object file accepted, in bytes (default
// DefaultMaxFileSize). Larger files are reported as errors without being
// parsed. n <= 0 keeps the default.
func WithMaxFileSize(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxFileSize = n
		}
	}
}

// WithLogger sets the logger (default: a disabled logger).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) { o.log = l }
}

// Validator holds the embedded CUE definitions, compiled once, and the
// per-file results of its last Load (see the package documentation). It is
// safe for concurrent use: CUE values are immutable, each Load evaluates
// the data files in contexts of its own so memory does not grow with the
// number of loads, and cached results are never modified.
type Validator struct {
	opts     options
	defs     map[fleetwave.Kind]cue.Value
	defaults map[fleetwave.Kind]cue.Value
	shapes   map[fleetwave.Kind]shape // the fast path (fastpath.go); nil with cueOnly

	mu    sync.Mutex
	cache map[cacheKey]*fileResult // the files of the last Load; replaced, never mutated
}

// New compiles the embedded schema. An error means the binary itself is
// broken.
func New(opts ...Option) (*Validator, error) {
	o := options{maxFileSize: DefaultMaxFileSize, log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, err := newContext()
	if err != nil {
		return nil, err
	}
	s := ctx.CompileBytes(schemaSource, cue.Filename("schema/cue/"+SchemaFile))
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	v := &Validator{opts: o, defs: map[fleetwave.Kind]cue.Value{}, defaults: map[fleetwave.Kind]cue.Value{}}
	for k, names := range definitions {
		d := s.LookupPath(cue.ParsePath(names[0]))
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("schema definition %s: %w", names[0], err)
		}
		v.defs[k] = d
		if names[1] != "" {
			d := s.LookupPath(cue.ParsePath(names[1]))
			if err := d.Err(); err != nil {
				return nil, fmt.Errorf("schema definition %s: %w", names[1], err)
			}
			v.defaults[k] = d
		}
	}
	if !o.cueOnly {
		if v.shapes, err = compileShapes(schemaSource); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// object is one file's object after the per-file checks.
type object struct {
	path string
	key  fleetwave.ObjectKey
	obj  any // *fleetwave.Trigger, *fleetwave.Node, ...: the snapshot's copy
	hash string
}

// Load validates a whole tree, given as repository-relative slash paths ->
// contents, and returns the decoded snapshot with Objects filled (Path,
// Hash) and Commit and Generations left empty. Files that hold no object
// (see ObjectKeyForPath) are ignored, except object files outside the
// layout (see outsideLayout), which are errors; their content is not read
// and may be nil. On any problem it returns a nil
// snapshot and a *fleetwave.ValidationError listing every problem found,
// sorted by path, line and column.
//
// The per-file checks run on runtime.GOMAXPROCS(0) workers, and their
// results are cached by path and content hash: a file already checked by
// the previous Load is not parsed again (see the package documentation).
func (v *Validator) Load(files map[string][]byte) (*fleetwave.Snapshot, error) {
	snap, _, err := v.load(files)
	return snap, err
}

// load is Load; for a valid tree it also returns what a Sequence keeps of
// it.
func (v *Validator) load(files map[string][]byte) (*fleetwave.Snapshot, *loaded, error) {
	paths := make([]job, 0, len(files))
	var errs []fleetwave.FileError
	for p := range files {
		if key, ok := ObjectKeyForPath(p); ok {
			paths = append(paths, job{path: p, key: key})
		} else if outsideLayout(p) {
			errs = append(errs, fleetwave.FileError{Path: p, Msg: layoutMessage})
		}
	}
	slices.SortFunc(paths, func(a, b job) int { return strings.Compare(a.path, b.path) })

	present := make(map[fleetwave.ObjectKey]string, len(paths)) // every object file, valid or not
	jobs := make([]job, 0, len(paths))
	for _, pk := range paths {
		p, key := pk.path, pk.key
		if first, dup := present[key]; dup {
			errs = append(errs, fleetwave.FileError{Path: p, Line: 1, Col: 1,
				Msg: fmt.Sprintf("duplicate object %s: already defined in %s (one file per object)", key, first)})
			continue
		}
		present[key] = p
		jobs = append(jobs, job{path: p, key: key, data: files[p]})
	}
	parsed := v.checkFiles(jobs)

	var objs []*object
	for i := range jobs {
		r := jobs[i].result
		errs = append(errs, r.errs...)
		if r.obj != nil {
			objs = append(objs, &object{path: jobs[i].path, key: r.key, obj: copyObject(r.obj), hash: r.hash})
		}
	}
	snap := &fleetwave.Snapshot{
		Triggers:      map[string]*fleetwave.Trigger{},
		Blocks:        map[string]*fleetwave.Block{},
		Nodes:         make(map[string]*fleetwave.Node, len(objs)),
		Organizations: map[string]*fleetwave.Organization{},
		Workspaces:    map[string]*fleetwave.Workspace{},
		Rollouts:      map[string]*fleetwave.RolloutRequest{},
		Approvals:     map[string]*fleetwave.ApprovalRequest{},
		Objects:       make(map[fleetwave.ObjectKey]fleetwave.Object, len(objs)),
	}
	for _, o := range objs {
		place(snap, o)
	}
	snap.NodeIDs = make([]string, 0, len(snap.Nodes))
	for id := range snap.Nodes {
		snap.NodeIDs = append(snap.NodeIDs, id)
	}
	slices.Sort(snap.NodeIDs)
	// The cross-object checks position their errors in the referring file:
	// its data is built again only when it has such an error.
	dataOf := func(p string) cue.Value { return v.buildData(p, files[p]) }
	errs = append(errs, crossCheck(snap, objs, present, dataOf)...)
	v.opts.log.Debug().Int("files", len(paths)).Int("parsed", parsed).Int("objects", len(objs)).Int("errors", len(errs)).Msg("tree validated")
	if len(errs) > 0 {
		verr := &fleetwave.ValidationError{Errors: dedupe(errs)}
		verr.Sort()
		return nil, nil, verr
	}
	return snap, &loaded{files: files, snap: snap, objs: objs, present: present}, nil
}

func dedupe(errs []fleetwave.FileError) []fleetwave.FileError {
	seen := map[fleetwave.FileError]bool{}
	out := errs[:0]
	for _, e := range errs {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

// checkFile runs every per-file check of one object file. A panic anywhere
// below becomes a FileError: one hostile file must not take the hub down.
func (v *Validator) checkFile(ctx *cue.Context, p string, key fleetwave.ObjectKey, data []byte) (o *object, errs []fleetwave.FileError) {
	defer func() {
		if r := recover(); r != nil {
			o, errs = nil, []fleetwave.FileError{{Path: p, Msg: fmt.Sprintf("internal error while validating this file: %v", r)}}
		}
	}()
	if int64(len(data)) > v.opts.maxFileSize {
		return nil, []fleetwave.FileError{{Path: p, Msg: fmt.Sprintf("file is %d bytes, expected at most %d", len(data), v.opts.maxFileSize)}}
	}
	if v.shapes != nil {
		if plain, ok := plainData(p, data); ok {
			if o, ok := v.fastCheck(p, key, plain); ok {
				return o, nil
			}
		}
	}
	f, errs := parseFile(p, data, v.opts.maxFileSize)
	if len(errs) > 0 {
		return nil, errs
	}
	if v.shapes != nil {
		if plain, ok := plainFile(f); ok {
			if o, ok := v.fastCheck(p, key, plain); ok {
				return o, nil
			}
		}
	}
	dv := ctx.BuildFile(f)
	if err := dv.Err(); err != nil {
		return nil, cueErrors(p, dv, err)
	}
	kind := key.Kind()
	kv := dv.LookupPath(cue.MakePath(cue.Str("kind")))
	if !kv.Exists() {
		return nil, []fleetwave.FileError{{Path: p, Line: 1, Col: 1,
			Msg: fmt.Sprintf("kind: required field is missing, expected %q (the kind of files in %s)", kind, folderOf(kind))}}
	}
	if s, err := kv.String(); err != nil || s != string(kind) {
		return nil, []fleetwave.FileError{posError(p, valuePos(kv),
			fmt.Sprintf("kind: found %s, expected %q (the kind of files in %s)", describe(kv), kind, folderOf(kind)))}
	}
	u := v.defs[kind].Unify(dv)
	if err := u.Validate(cue.Concrete(true)); err != nil {
		return nil, cueErrors(p, dv, err)
	}
	nv := dv.LookupPath(cue.MakePath(cue.Str("name")))
	if name, _ := nv.String(); name != key.Name() {
		return nil, []fleetwave.FileError{posError(p, valuePos(nv),
			fmt.Sprintf("name: found %q, expected %q (the file name without its extension)", name, key.Name()))}
	}
	withDefaults := dv
	d, hasDefaults := v.defaults[kind]
	if hasDefaults {
		withDefaults = d.Unify(dv)
	}
	if !hasDefaults {
		// Without defaults the Go object is the file's JSON: decode that
		// instead of walking the CUE value a second time. Any failure takes
		// the general path below, which reports it as it always did.
		if o, ok := decodeJSON(p, key, dv); ok {
			return o, nil
		}
	}
	obj := newObject(kind)
	if err := withDefaults.Decode(obj); err != nil {
		return nil, cueErrors(p, dv, err)
	}
	if errs := checkObject(p, dv, obj); len(errs) > 0 {
		return nil, errs
	}
	raw, err := dv.MarshalJSON()
	if err != nil {
		return nil, cueErrors(p, dv, err)
	}
	canon, err := canonicalJSON(raw)
	if err != nil {
		return nil, []fleetwave.FileError{{Path: p, Msg: err.Error()}}
	}
	sum := sha256.Sum256(canon)
	return &object{path: p, key: key, obj: obj, hash: hex.EncodeToString(sum[:])}, nil
}

// decodeJSON decodes a validated object of a kind without defaults from
// its JSON form, which also gives its hash. ok is false when anything fails
// or the Go checks find a problem: the caller then runs the general path,
// which reports the problem.
func decodeJSON(p string, key fleetwave.ObjectKey, dv cue.Value) (o *object, ok bool) {
	raw, err := dv.MarshalJSON()
	if err != nil {
		return nil, false
	}
	obj := newObject(key.Kind())
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, false
	}
	if errs := checkObject(p, dv, obj); len(errs) > 0 {
		return nil, false
	}
	canon, err := canonicalJSON(raw)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(canon)
	return &object{path: p, key: key, obj: obj, hash: hex.EncodeToString(sum[:])}, true
}

func newObject(k fleetwave.Kind) any {
	switch k {
	case fleetwave.KindConfig:
		return &fleetwave.Config{}
	case fleetwave.KindTrigger:
		return &fleetwave.Trigger{}
	case fleetwave.KindBlock:
		return &fleetwave.Block{}
	case fleetwave.KindNode:
		return &fleetwave.Node{}
	case fleetwave.KindOrganization:
		return &fleetwave.Organization{}
	case fleetwave.KindWorkspace:
		return &fleetwave.Workspace{}
	case fleetwave.KindRollout:
		return &fleetwave.RolloutRequest{}
	case fleetwave.KindApproval:
		return &fleetwave.ApprovalRequest{}
	}
	panic("schema: unknown kind " + string(k))
}

// describe prints a data value for a message: CUE syntax for concrete
// scalars, its kind otherwise.
func describe(v cue.Value) string {
	switch v.IncompleteKind() {
	case cue.StructKind:
		return "a struct"
	case cue.ListKind:
		return "a list"
	}
	return fmt.Sprint(v)
}

var conflicting = regexp.MustCompile(`^conflicting values (.+?) and (.+?)(?: \(mismatched types .*\))?$`)

// cueErrors turns CUE errors into FileErrors positioned in the data file.
// Errors of one disjunction ("3 errors in empty disjunction" followed by
// one "conflicting values" per alternative) become one message listing the
// alternatives.
func cueErrors(p string, data cue.Value, err error) []fleetwave.FileError {
	type group struct {
		fe      fleetwave.FileError
		sel     []any
		disj    bool
		options []string
		msgs    []string
	}
	var order []string
	groups := map[string]*group{}
	for _, e := range cueerrors.Errors(err) {
		elems := e.Path()
		if len(elems) > 0 && strings.HasPrefix(elems[0], "#") {
			elems = elems[1:]
		}
		sel := make([]any, len(elems))
		for i, el := range elems {
			if n, err := strconv.Atoi(el); err == nil {
				sel[i] = n
			} else {
				sel[i] = el
			}
		}
		field := fieldName(sel)
		g := groups[field]
		if g == nil {
			g = &group{fe: fleetwave.FileError{Path: p}, sel: sel}
			groups[field] = g
			order = append(order, field)
		}
		if g.fe.Line == 0 {
			for _, pos := range cueerrors.Positions(e) {
				if pos.Filename() == p && pos.Line() > 0 {
					g.fe.Line, g.fe.Col = pos.Line(), pos.Column()
					break
				}
			}
		}
		msg := cueMsg(e)
		if strings.TrimSpace(msg) == "" {
			// Some errors (of Decode, say) carry their text only in Error().
			msg = strings.TrimPrefix(strings.TrimSpace(e.Error()), p+": ")
		}
		if msg == "" {
			msg = "invalid value"
		}
		switch {
		case strings.Contains(msg, "empty disjunction"):
			g.disj = true
		case msg == "field is required but not present":
			g.msgs = append(g.msgs, "required field is missing")
		default:
			if m := conflicting.FindStringSubmatch(msg); m != nil {
				g.options = append(g.options, m[1], m[2])
			}
			g.msgs = append(g.msgs, msg)
		}
	}
	var out []fleetwave.FileError
	for _, field := range order {
		g := groups[field]
		prefix := ""
		if field != "" {
			prefix = field + ": "
		}
		if g.fe.Line == 0 && field != "" {
			// e.g. a missing field: point at the struct that lacks it.
			if pv := lookup(data, g.sel[:len(g.sel)-1]); pv.Exists() && pv.Pos().Filename() == p {
				g.fe.Line, g.fe.Col = pv.Pos().Line(), pv.Pos().Column()
			}
		}
		if g.disj && len(g.options) > 0 {
			found := describe(lookup(data, g.sel))
			var alts []string
			for _, o := range g.options {
				if o != found && !contains(alts, o) {
					alts = append(alts, o)
				}
			}
			sort.Strings(alts)
			g.fe.Msg = prefix + fmt.Sprintf("invalid value %s, expected one of %s", found, strings.Join(alts, ", "))
			out = append(out, g.fe)
			continue
		}
		for _, m := range g.msgs {
			fe := g.fe
			fe.Msg = prefix + friendlier(m, describe(lookup(data, g.sel)))
			out = append(out, fe)
		}
	}
	return out
}

var (
	mismatched = regexp.MustCompile(`^conflicting values (.+?) and (.+?) \(mismatched types (\w+) and (\w+)\)$`)
	nameBound  = `(out of bound =~"` + nameRE.String() + `")`
)

// friendlier rewrites the CUE messages users meet most often in terms of
// the file: a type mismatch names the value found and the type expected, and
// a name that fails the #Name pattern says what a name is instead of
// quoting the regular expression.
func friendlier(msg, found string) string {
	if m := mismatched.FindStringSubmatch(msg); m != nil {
		switch found {
		case m[1]:
			return fmt.Sprintf("found %s (%s), expected %s", m[1], m[3], m[4])
		case m[2]:
			return fmt.Sprintf("found %s (%s), expected %s", m[2], m[4], m[3])
		case "a struct", "a list":
			// a composite value is not quoted: name its kind only
			switch kind := strings.TrimPrefix(found, "a "); kind {
			case m[3]:
				return fmt.Sprintf("found %s, expected %s", found, m[4])
			case m[4]:
				return fmt.Sprintf("found %s, expected %s", found, m[3])
			}
		}
	}
	if v, ok := strings.CutSuffix(msg, " "+nameBound); ok && strings.HasPrefix(v, "invalid value ") {
		return v + ", expected a DNS-label-like name (lowercase letters, digits and '-', 1-63 chars, starting and ending with a letter or digit)"
	}
	return msg
}

// lookup returns the value at a path of selectors (strings or ints).
func lookup(v cue.Value, sel []any) cue.Value {
	ss := make([]cue.Selector, 0, len(sel))
	for _, s := range sel {
		switch s := s.(type) {
		case string:
			ss = append(ss, cue.Str(s))
		case int:
			ss = append(ss, cue.Index(s))
		}
	}
	return v.LookupPath(cue.MakePath(ss...))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// skipDirs are the top-level folders LoadDir never reads.
var skipDirs = map[string]bool{".git": true, "status": true, "cue.mod": true}

// fileRead is one object file LoadDir reads.
type fileRead struct {
	rel, path string
	data      []byte
	tooBig    int64 // its size when above the limit
	err       error
}

// LoadDir reads the object files of a directory tree and calls Load. It
// skips .git, status/, cue.mod/ and other dot-folders and never reads files
// that hold no object; object files outside the layout are handed to Load
// by path only, which reports them. A symbolic link where an object file or
// folder would be is refused with a FileError (it could point outside the
// repository).
func (v *Validator) LoadDir(dir string) (*fleetwave.Snapshot, error) {
	files := map[string][]byte{}
	var errs []fleetwave.FileError
	// Read in parallel, while the walk goes on: a file read is a few
	// system calls, and 100,000 of them one after the other took longer
	// than validating them.
	var reads []*fileRead
	todo := make(chan *fileRead, 1024)
	var wg sync.WaitGroup
	for range max(8, 4*runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for r := range todo {
				r.data, r.tooBig, r.err = readLimited(r.path, v.opts.maxFileSize)
			}
		})
	}
	err := filepath.WalkDir(dir, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, rerr := filepath.Rel(dir, fp)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		top, _, nested := strings.Cut(rel, "/")
		if d.IsDir() {
			// Sub-folders of object folders are walked: object files in
			// them are outside the layout and reported.
			if (!nested && skipDirs[top]) || strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		_, isObject := ObjectKeyForPath(rel)
		if d.Type()&fs.ModeSymlink != 0 {
			if _, isFolder := folders[rel]; isObject || isFolder {
				errs = append(errs, fleetwave.FileError{Path: rel, Msg: "symbolic links are not allowed here, expected a regular file or folder"})
			} else if outsideLayout(rel) {
				files[rel] = nil
			}
			return nil
		}
		if !isObject {
			if outsideLayout(rel) {
				files[rel] = nil // Load reports it; its content does not matter
			}
			return nil
		}
		if !d.Type().IsRegular() {
			errs = append(errs, fleetwave.FileError{Path: rel, Msg: "not a regular file"})
			return nil
		}
		r := &fileRead{rel: rel, path: fp}
		reads = append(reads, r)
		todo <- r
		return nil
	})
	close(todo)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var readErrs []error
	for _, r := range reads {
		readErrs = append(readErrs, r.err)
	}
	if err := errors.Join(readErrs...); err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, r := range reads {
		if r.tooBig > 0 {
			errs = append(errs, fleetwave.FileError{Path: r.rel, Msg: fmt.Sprintf("file is %d bytes, expected at most %d", r.tooBig, v.opts.maxFileSize)})
			continue
		}
		files[r.rel] = r.data
	}
	snap, err := v.Load(files)
	if len(errs) == 0 {
		return snap, err
	}
	verr := &fleetwave.ValidationError{}
	if !errors.As(err, &verr) && err != nil {
		return nil, err
	}
	verr.Errors = append(verr.Errors, errs...)
	verr.Sort()
	return nil, verr
}

// place records o in snap: its entry in Objects and in its kind's map.
func place(snap *fleetwave.Snapshot, o *object) {
	snap.Objects[o.key] = fleetwave.Object{Key: o.key, Path: o.path, Hash: o.hash}
	name := o.key.Name()
	switch x := o.obj.(type) {
	case *fleetwave.Config:
		snap.Config = *x
	case *fleetwave.Trigger:
		snap.Triggers[name] = x
	case *fleetwave.Block:
		snap.Blocks[name] = x
	case *fleetwave.Node:
		snap.Nodes[name] = x
	case *fleetwave.Organization:
		snap.Organizations[name] = x
	case *fleetwave.Workspace:
		snap.Workspaces[name] = x
	case *fleetwave.RolloutRequest:
		snap.Rollouts[name] = x
	case *fleetwave.ApprovalRequest:
		snap.Approvals[name] = x
	}
}
