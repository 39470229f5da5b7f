package reconciler

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/bounds"
)

// Limits of the template sandbox.
const (
	MaxTemplateSize   = 64 << 10 // bytes of template source
	MaxRenderedSize   = 1 << 20  // bytes of rendered output, and of any intermediate string or list
	MaxRangeBudget    = 100_000  // total range() elements per render
	MaxLoopIterations = 200_000  // total for-loop body executions per render
	MaxCredentialLen  = 256      // credential_get_or_create length bound
	MinCredentialLen  = 8
	maxErrorTextBytes = 300 // gonja errors embed the whole source: cut them
	// The sandbox's own names in a render's context start with
	// internalPrefix, which no template name can spell (":" ends a name):
	// a template can neither call them nor shadow them with a set.
	internalPrefix     = "fw:"
	budgetVar          = internalPrefix + "budget"
	opFuncName         = internalPrefix + "op"    // the binary operators (sandbox.go)
	sizedFuncName      = internalPrefix + "sized" // the size check of literals (sandbox.go)
	workFuncName       = internalPrefix + "work"  // the work charge of operands and iterables (sandbox.go)
	credentialFuncName = "credential_get_or_create"
)

// The work allowance of a render (see "The sandbox" in sandbox.go).
const (
	// MaxRenderWork bounds the work of one render, in units of about one
	// byte processed: every call (operator, filter, method, test), slice
	// target, comparison operand, for-loop iterable and literal is charged
	// stepWork or more, plus the bytes and elements it reads and produces
	// (stepWork per element gonja builds a value for, 2*stepWork per item
	// a for-loop materializes); every byte written to the output or
	// captured by a {% set %} or {% filter %} block counts one (see
	// sandbox.go). A config template uses a few hundred units per node
	// (TestOrdinaryTemplatesUseLittleWork); 64 Mi units is 64 MiB of
	// string processing or about a million calls or elements: a render
	// that exhausts it stops after a few seconds at most.
	MaxRenderWork = 64 << 20
	// stepWork is the work of a call or of a list or dict element: gonja
	// builds a value (or a scope) for each, which costs about as much as
	// processing 64 bytes of a string.
	stepWork = 64
)

// ErrTemplate wraps every template failure (parse, render, limits); the item
// that needs the template is blocked until a new generation fixes it.
var ErrTemplate = errors.New("block_config_template")

// ErrTemplateBudget is wrapped (with ErrTemplate) by a render that ran out
// of its budget: MaxLoopIterations for-loop iterations, MaxRangeBudget
// elements of range() or MaxRenderWork units of work. The budget is
// counted, never timed.
var ErrTemplateBudget = errors.New("iteration budget exceeded")

// ErrTemplateSize is wrapped (with ErrTemplate) by a render stopped at a
// value or an output above MaxRenderedSize, or at a filter or method
// argument that would produce one; the check comes before the allocation.
var ErrTemplateSize = errors.New("size limit exceeded")

// limitError is a render stopped by a bound of the sandbox; kind is
// ErrTemplateBudget or ErrTemplateSize.
type limitError struct {
	kind error
	msg  string
}

func (e *limitError) Error() string { return e.msg }
func (e *limitError) Unwrap() error { return e.kind }

// ErrConfigSchema wraps a rendered config that does not satisfy its block's
// config_schema; like ErrTemplate, it blocks the item until a new generation.
var ErrConfigSchema = errors.New("config_schema")

// ErrConfigNotMapping wraps a rendered config that is not one YAML mapping
// (see renderBlock); like ErrTemplate, it blocks the item with
// invalid_config until a new generation.
var ErrConfigNotMapping = errors.New("rendered config is not a YAML mapping")

// configShapeError is an ErrConfigNotMapping with its own text.
type configShapeError string

func (e configShapeError) Error() string        { return string(e) }
func (e configShapeError) Is(target error) bool { return target == ErrConfigNotMapping }

// configSchemaError is an ErrConfigSchema whose text is only the
// validator's (which already names config_schema and the fields).
type configSchemaError string

func (e configSchemaError) Error() string        { return string(e) }
func (e configSchemaError) Is(target error) bool { return target == ErrConfigSchema }

// singleLoader serves exactly one in-memory template; include, import and
// extends are not even parsed (see controls), and any other name is refused.
type singleLoader struct {
	name string
	src  []byte
}

func (l *singleLoader) Read(p string) (io.Reader, error) {
	if p != l.name {
		return nil, fmt.Errorf("template loading disabled (%q)", p)
	}
	return bytes.NewReader(l.src), nil
}

func (l *singleLoader) Resolve(p string) (string, error) {
	if p != l.name {
		return "", fmt.Errorf("template loading disabled (%q)", p)
	}
	return p, nil
}

func (l *singleLoader) Inherit(string) (loaders.Loader, error) { return l, nil }

// limitedWriter bounds what a render writes, to its output or into the
// value of a {% set %} or {% filter %} block (what names which), to
// MaxRenderedSize bytes, and charges the bytes as work.
type limitedWriter struct {
	w    io.Writer
	n    int64
	b    *budget
	what string // "rendered output", "set block", "filter block"
	line int    // of the block, 0 for the output
	col  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, l.b.fail(l.line, l.col, &limitError{kind: ErrTemplateSize, msg: fmt.Sprintf("%s exceeds %d bytes", l.what, MaxRenderedSize)})
	}
	if err := l.b.charge(l.line, l.col, l.what, len(p)); err != nil {
		return 0, err
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// budget is the state of one render: its allowances (range() elements,
// loop iterations and work units) and the first error a bound or an
// operator of the sandbox stopped it with, which is the render's error. A
// render runs on one goroutine, so plain fields suffice.
type budget struct {
	rangeLeft, loopLeft int
	workLeft            int
	err                 error
	line, col           int // where err happened in the template; 0 when unknown
}

// fail records err as the render's error, unless one is recorded already
// (the first one is the cause), and returns it.
func (b *budget) fail(line, col int, err error) error {
	if b.err == nil {
		b.err, b.line, b.col = err, line, col
	}
	return err
}

// Render renders a block_config_template with vars in the sandbox: no file,
// include, environment or network access; bounded iteration, string sizes
// and output. Errors wrap ErrTemplate and never contain the whole template
// source. credential_get_or_create is unavailable (see RenderWith).
func Render(name, src string, vars map[string]any) (string, error) {
	return newRenderer(Options{}).render(name, src, vars, "")
}

// RenderWith is Render with options: opts.Credential backs
// credential_get_or_create(name, length=32) for the credential scope scope
// (see CredentialScope).
func RenderWith(name, src string, vars map[string]any, opts Options, scope string) (string, error) {
	return newRenderer(opts).render(name, src, vars, scope)
}

// CredentialScope is the scope of the credentials a template asks for on
// node n: the node's workspace ("workspace/<name>"), else the node itself
// ("node/<id>"). Nodes of one workspace share credentials by name.
func CredentialScope(n *fleetwave.Node) string {
	if n.Workspace != "" {
		return "workspace/" + n.Workspace
	}
	return "node/" + n.ID
}

// renderer renders templates for one plan: each distinct source is parsed
// once (cached by name and source hash) and executed per node.
type renderer struct {
	opts  Options
	env   *exec.Environment
	cache map[[32]byte]*parsed
	cur   *budget // of the render running, for the methods (see safeMethods)
	// lastWork is the work the last render used (MaxRenderWork), for tests
	lastWork int
}

type parsed struct {
	tpl *exec.Template
	err error
}

// newRenderer returns a renderer for one plan. It renders one template at
// a time (its methods record into the render running).
func newRenderer(opts Options) *renderer {
	globals := map[string]any{
		"backup_schedule_cron": BackupScheduleCron,
	}
	for _, n := range []string{"dict", "namespace", "cycler", "joiner"} {
		if f, ok := builtins.GlobalFunctions.Get(n); ok {
			globals[n] = f
		}
	}
	r := &renderer{opts: opts, cache: map[[32]byte]*parsed{}}
	r.env = &exec.Environment{
		Context:           exec.NewContext(globals),
		Filters:           safeFilters(),
		Tests:             safeTests(),
		ControlStructures: safeControls(),
		Methods: safeMethods(func() *budget {
			if r.cur == nil {
				return &budget{}
			}
			return r.cur
		}),
	}
	return r
}

func (r *renderer) parse(name, src string) (*exec.Template, error) {
	key := sha256.Sum256([]byte(name + "\x00" + src))
	if p, ok := r.cache[key]; ok {
		return p.tpl, p.err
	}
	p := &parsed{}
	func() {
		defer func() {
			if rec := recover(); rec != nil {
				p.err = fmt.Errorf("%w: parse aborted: %s", ErrTemplate, cut(fmt.Sprint(rec)))
			}
		}()
		cfg := config.New()
		cfg.StrictUndefined = true
		cfg.KeepTrailingNewline = true
		tpl, err := exec.NewTemplate(name, cfg, &singleLoader{name: name, src: []byte(src)}, r.env)
		if err != nil {
			p.err = fmt.Errorf("%w: %s", ErrTemplate, cut(err.Error()))
			return
		}
		guardTemplate(tpl.Root())
		p.tpl = tpl
	}()
	r.cache[key] = p
	return p.tpl, p.err
}

// renderBlock renders a trigger's template for block b and checks the
// result: it must be one YAML mapping, the config file the agent hands to
// the block's commands, or else empty (whitespace and comments only, or a
// bare "---"), meaning "no config", but only when b has no config_schema:
// a block with a schema expects a config. A mapping is then checked
// against b's config_schema. Every failure blocks the item with
// invalid_config. Errors never carry rendered values.
func (r *renderer) renderBlock(b *fleetwave.Block, name, src string, vars map[string]any, scope string) (string, error) {
	out, err := r.render(name, src, vars, scope)
	if err != nil {
		return "", err
	}
	return r.checkRendered(b, out)
}

// renderNode is renderBlock of trigger t's template for node n of snap
// (TemplateVars, CredentialScope).
func (r *renderer) renderNode(snap *fleetwave.Snapshot, n *fleetwave.Node, b *fleetwave.Block, t *fleetwave.Trigger) (string, error) {
	out, err := r.renderVars(snap, n, b, t)
	if err != nil {
		return "", err
	}
	return r.checkRendered(b, out)
}

// renderVars renders trigger t's template for node n of snap, taken from
// opts.Renders when it holds that render of snap.
func (r *renderer) renderVars(snap *fleetwave.Snapshot, n *fleetwave.Node, b *fleetwave.Block, t *fleetwave.Trigger) (string, error) {
	if t.BlockConfigTemplate == "" {
		// what gonja renders of an empty template, without the node's
		// variables: a BRC without a template over 100,000 nodes spent
		// half its plan building them
		return "", nil
	}
	c := r.opts.Renders
	if c == nil || strings.Contains(t.BlockConfigTemplate, credentialFuncName) {
		// a credential is the credential store's, not the snapshot's
		return r.render(t.Name, t.BlockConfigTemplate, TemplateVars(snap, n, b, t), CredentialScope(n))
	}
	if out, ok := c.get(snap, t, n.ID); ok {
		return out, nil
	}
	out, err := r.render(t.Name, t.BlockConfigTemplate, TemplateVars(snap, n, b, t), CredentialScope(n))
	if err == nil {
		c.put(snap, t, n.ID, out)
	}
	return out, err
}

// RenderCache keeps the configs plans rendered, by trigger and node, for
// the snapshot last asked for: everything a render reads (the template,
// the node's labels and capabilities, its workspace and organization, the
// block, the trigger) is the snapshot's, so the next plan, and the drift
// a status commit computes, render only what a new snapshot changed. A
// snapshot whose commit changed only BRCs keeps the renders of the BRCs
// it did not change (at 100,000 nodes a push of one BRC otherwise
// rendered the whole fleet again); any other change drops them all.
// Renders that may ask for a credential and failed ones are not kept. A
// hub holds one for its plans; the zero value is ready.
type RenderCache struct {
	mu   sync.Mutex
	snap *fleetwave.Snapshot
	m    map[renderKey]string
}

// renderKey is a trigger of the cache's snapshot, by name, and a node.
type renderKey struct {
	trigger, node string
}

func (c *RenderCache) get(snap *fleetwave.Snapshot, t *fleetwave.Trigger, node string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != snap {
		c.switchTo(snap)
	}
	if snap.Triggers[t.Name] != t {
		return "", false // a changed copy (a manual request's)
	}
	out, ok := c.m[renderKey{t.Name, node}]
	return out, ok
}

func (c *RenderCache) put(snap *fleetwave.Snapshot, t *fleetwave.Trigger, node, out string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != snap {
		c.switchTo(snap)
	}
	if snap.Triggers[t.Name] == t {
		c.m[renderKey{t.Name, node}] = out
	}
}

// switchTo makes snap the cache's snapshot, keeping the renders of the
// triggers it has as the last one had them when nothing but triggers
// changed (a snapshot without objects tells nothing: all are dropped);
// c.mu held.
func (c *RenderCache) switchTo(snap *fleetwave.Snapshot) {
	var changed map[string]bool
	if c.snap != nil && len(c.snap.Objects) > 0 && len(snap.Objects) > 0 {
		changed = ChangedTriggers(c.snap, snap)
	}
	if changed == nil {
		c.m = map[renderKey]string{}
	} else {
		for k := range c.m {
			if changed[k.trigger] || snap.Triggers[k.trigger] == nil {
				delete(c.m, k)
			}
		}
	}
	c.snap = snap
}

// ChangedTriggers returns the triggers (BRCs of every type) of snap that
// prev did not have or had in another version, when they are all that
// changed from prev to snap (no node, block, label map or config: those
// change what every trigger renders and plans). Nil otherwise, and when
// prev is nil.
func ChangedTriggers(prev, snap *fleetwave.Snapshot) map[string]bool {
	if prev == nil {
		return nil
	}
	changed := map[string]bool{}
	// differs adds k's trigger when k is an object of snap that prev did
	// not have or had in another version, as the comparison of every
	// object below does; false: the change is more than triggers
	differs := func(k fleetwave.ObjectKey) bool {
		o, now := snap.Objects[k]
		p, was := prev.Objects[k]
		switch {
		case now && was && p.Hash == o.Hash:
			return true
		case !now: // removed (or in neither)
			return !was || k.Kind() == fleetwave.KindTrigger
		case k.Kind() != fleetwave.KindTrigger || snap.Triggers[k.Name()] == nil:
			return false
		}
		changed[k.Name()] = true
		return true
	}
	if keys, ok := snap.ChangedFrom(prev); ok {
		for _, k := range keys {
			if !differs(k) {
				return nil
			}
		}
		return changed
	}
	for k, o := range snap.Objects { // one lookup each: 100,000 take ms
		if p, ok := prev.Objects[k]; ok && p.Hash == o.Hash {
			continue
		}
		if k.Kind() != fleetwave.KindTrigger || snap.Triggers[k.Name()] == nil {
			return nil
		}
		changed[k.Name()] = true
	}
	for k := range prev.Objects {
		if _, ok := snap.Objects[k]; !ok && k.Kind() != fleetwave.KindTrigger {
			return nil
		}
	}
	return changed
}

// checkRendered is renderBlock's checks of a rendered config.
func (r *renderer) checkRendered(b *fleetwave.Block, out string) (string, error) {
	if err := checkConfigShape(b, out); err != nil {
		return "", err
	}
	if b != nil && b.ConfigSchema != "" && r.opts.ValidateConfig != nil {
		if err := r.opts.ValidateConfig(b.ConfigSchema, out); err != nil {
			return "", configSchemaError("block " + b.Name + ": " + cut(err.Error()))
		}
	}
	return out, nil
}

// shapes caches checkConfigShape's answers by what they depend on (the
// block's name, whether it has a config_schema, the rendered config): a
// plan renders every node's config of every BRC again, most of them as
// the last plan did, and parsing each as YAML to check its shape was
// half of rendering it. Cleared when full.
var shapes struct {
	sync.Mutex
	m map[[sha256.Size]byte]error
}

const shapesMax = 1 << 17

// checkConfigShape returns an ErrConfigNotMapping error unless rendered is
// one YAML mapping, or empty for a block without config_schema (see
// renderBlock). Its messages name the shape found, never a value; go-yaml's
// syntax messages name tokens, not content.
func checkConfigShape(b *fleetwave.Block, rendered string) error {
	// schema flag, name length, name, rendered: no two inputs alike
	h := sha256.New()
	var head [9]byte
	if b != nil {
		if b.ConfigSchema != "" {
			head[0] = 1
		}
		binary.BigEndian.PutUint64(head[1:], uint64(len(b.Name)))
		h.Write(head[:])
		h.Write([]byte(b.Name))
	} else {
		head[0] = 2
		h.Write(head[:])
	}
	h.Write([]byte(rendered))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	shapes.Lock()
	err, ok := shapes.m[key]
	shapes.Unlock()
	if ok {
		return err
	}
	err = parseConfigShape(b, rendered)
	shapes.Lock()
	if shapes.m == nil || len(shapes.m) >= shapesMax {
		shapes.m = map[[sha256.Size]byte]error{}
	}
	shapes.m[key] = err
	shapes.Unlock()
	return err
}

// parseConfigShape is checkConfigShape without the cache.
func parseConfigShape(b *fleetwave.Block, rendered string) error {
	block := ""
	if b != nil {
		block = "block " + b.Name + ": "
	}
	dec := yaml.NewDecoder(strings.NewReader(rendered))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// go-yaml's "line N: " is the line of the error's context, not
			// always of the error: only the problem is kept.
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			if rest, ok := strings.CutPrefix(msg, "line "); ok {
				if _, after, ok := strings.Cut(rest, ": "); ok {
					msg = after
				}
			}
			return configShapeError(block + "rendered config is not valid YAML: " + cut(msg))
		}
		docs = append(docs, &n)
	}
	if len(docs) == 1 && len(docs[0].Content) == 1 {
		if root := docs[0].Content[0]; root.Kind == yaml.ScalarNode && root.Tag == "!!null" && root.Value == "" {
			docs = nil // "---" and nothing else
		}
	}
	switch {
	case len(docs) == 0:
		if b != nil && b.ConfigSchema != "" {
			return configShapeError(block + "rendered config is empty, expected a YAML mapping (the block has a config_schema)")
		}
		return nil
	case len(docs) > 1:
		return configShapeError(fmt.Sprintf("%srendered config holds %d YAML documents, expected one mapping", block, len(docs)))
	}
	what := "nothing"
	if len(docs[0].Content) == 1 {
		switch root := docs[0].Content[0]; root.Kind {
		case yaml.MappingNode:
			return nil
		case yaml.SequenceNode:
			what = "a list"
		case yaml.ScalarNode:
			what = "a single value (" + strings.TrimPrefix(root.Tag, "!!") + ")"
		case yaml.AliasNode:
			what = "an alias"
		}
	}
	return configShapeError(block + "rendered config is " + what + ", expected a YAML mapping")
}

func (r *renderer) render(name, src string, vars map[string]any, scope string) (out string, err error) {
	if len(src) > MaxTemplateSize {
		return "", fmt.Errorf("%w: template is %d bytes, limit %d", ErrTemplate, len(src), MaxTemplateSize)
	}
	if d := bounds.NestingDepth(src); d > MaxNestingDepth {
		// the parser recurses per level: a deep enough template overflows
		// the goroutine stack, which no recover can catch
		return "", fmt.Errorf("%w: expressions nest %d deep, limit %d", ErrTemplate, d, MaxNestingDepth)
	}
	tpl, err := r.parse(name, src)
	if err != nil {
		return "", err
	}
	defer func() {
		if rec := recover(); rec != nil {
			out, err = "", fmt.Errorf("%w: render aborted: %s", ErrTemplate, cut(fmt.Sprint(rec)))
		}
	}()
	b := &budget{rangeLeft: MaxRangeBudget, loopLeft: MaxLoopIterations, workLeft: MaxRenderWork}
	r.cur = b
	defer func() { r.cur = nil }()
	data := make(map[string]any, len(vars)+5)
	for k, v := range vars {
		data[k] = v
	}
	data["range"] = b.rangeFunc
	data[budgetVar] = b
	data[opFuncName] = b.opFunc
	data[sizedFuncName] = b.sizedFunc
	data[workFuncName] = b.workFunc
	data[credentialFuncName] = r.credentialFunc(scope)
	var buf bytes.Buffer
	err = tpl.Execute(&limitedWriter{w: &buf, n: MaxRenderedSize, b: b, what: "rendered output"}, exec.NewContext(data))
	r.lastWork = MaxRenderWork - b.workLeft
	if b.err != nil {
		// A bound or an operator stopped the render (or failed where gonja
		// would carry on with an error value): that error, where it
		// happened, is the cause; gonja's text around it names internals.
		line, col := b.line, b.col
		if line == 0 && err != nil {
			line = gonjaLine(err.Error())
		}
		pos := ""
		if line > 0 {
			pos = "line " + strconv.Itoa(line)
			if col > 0 {
				pos += " col " + strconv.Itoa(col)
			}
			pos += ": "
		}
		return "", fmt.Errorf("%w: %s%w", ErrTemplate, pos, b.err)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrTemplate, cut(err.Error()))
	}
	return buf.String(), nil
}

// gonjaLineRE finds the template line in gonja's error texts ("... at line
// 3: ...", "SetControlStructure(Line=3 Col=7)").
var gonjaLineRE = regexp.MustCompile(`(?:at line |Line=)(\d+)`)

func gonjaLine(msg string) int {
	if m := gonjaLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

func (b *budget) rangeFunc(args *exec.VarArgs) ([]int, error) {
	start, stop, step := 0, 0, 1
	switch len(args.Args) {
	case 1:
		stop = args.Args[0].Integer()
	case 2:
		start, stop = args.Args[0].Integer(), args.Args[1].Integer()
	case 3:
		start, stop, step = args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2].Integer()
	default:
		return nil, errors.New("range: expected 1 to 3 arguments")
	}
	if step == 0 {
		return nil, errors.New("range: step must not be 0")
	}
	n, ok := rangeLen(start, stop, step)
	if !ok || b.rangeLeft < 0 || n > uint64(b.rangeLeft) {
		b.rangeLeft = -1
		return nil, b.fail(0, 0, &limitError{kind: ErrTemplateBudget, msg: fmt.Sprintf("range() iteration budget of %d exceeded", MaxRangeBudget)})
	}
	b.rangeLeft -= int(n)
	out := make([]int, n)
	for k := range out {
		// start + k*step lies between start and stop, so it is an int
		// even where k*step alone is not: the wrapped arithmetic of
		// int gives it exactly.
		out[k] = start + k*step
	}
	return out, nil
}

// rangeLen is the number of elements of Python's range(start, stop, step)
// (step != 0), computed without overflow: the distance between two ints
// always fits in a uint64. ok is false when the count does not fit in an
// int (it is then far above any budget).
func rangeLen(start, stop, step int) (n uint64, ok bool) {
	var dist, stride uint64
	switch {
	case step > 0 && stop > start:
		dist, stride = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && stop < start:
		dist, stride = uint64(start)-uint64(stop), -uint64(step)
	default:
		return 0, true
	}
	n = (dist-1)/stride + 1
	return n, n <= math.MaxInt
}

var credentialNameRE = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]{0,61}[a-z0-9])?$`)

// credentialFunc is credential_get_or_create(name, length=32) bound to scope.
// Its errors name the credential, never its value.
func (r *renderer) credentialFunc(scope string) func(*exec.VarArgs) (string, error) {
	return func(args *exec.VarArgs) (string, error) {
		if len(args.Args) < 1 || !args.Args[0].IsString() {
			return "", errors.New("credential_get_or_create: a credential name is required")
		}
		name := args.Args[0].String()
		if !credentialNameRE.MatchString(name) {
			return "", fmt.Errorf("credential_get_or_create: name %q must be 1-63 of [a-z0-9_-]", cutName(name))
		}
		length := 32
		if len(args.Args) >= 2 {
			length = args.Args[1].Integer()
		}
		if v, ok := args.KwArgs["length"]; ok {
			length = v.Integer()
		}
		if length < MinCredentialLen || length > MaxCredentialLen {
			return "", fmt.Errorf("credential_get_or_create: length %d is not within %d-%d", length, MinCredentialLen, MaxCredentialLen)
		}
		if r.opts.Credential == nil {
			return "", fmt.Errorf("credential_get_or_create(%q): no credential store is configured", name)
		}
		v, err := r.opts.Credential(scope, name, length)
		if err != nil {
			return "", fmt.Errorf("credential_get_or_create(%q): %w", name, err)
		}
		return v, nil
	}
}

func cutName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// MaxNestingDepth bounds brackets nesting in a template.
const MaxNestingDepth = 100

// cut keeps error texts short: gonja embeds the whole template source in
// parse errors, and a template may hold values nobody wants in a log line.
func cut(s string) string {
	if i := strings.Index(s, "failed to parse template '"); i >= 0 {
		if j := strings.LastIndex(s, "': "); j > i {
			s = s[:i] + "parse error: " + s[j+3:]
		}
	}
	if len(s) > maxErrorTextBytes {
		s = s[:maxErrorTextBytes] + "..."
	}
	return s
}

// BackupScheduleCron returns a daily cron expression spread over the hours
// [startHour, endHour) by a stable hash of key (a workspace name), so that a
// fleet's backups do not all start at once; the same key always gives the
// same expression. Defaults: window 1-5 h.
func BackupScheduleCron(args *exec.VarArgs) (string, error) {
	if len(args.Args) < 1 {
		return "", errors.New("backup_schedule_cron: a key (e.g. the workspace) is required")
	}
	key := args.Args[0].String()
	start, end := 1, 5
	if len(args.Args) >= 3 {
		start, end = args.Args[1].Integer(), args.Args[2].Integer()
	}
	if v, ok := args.KwArgs["start_hour"]; ok {
		start = v.Integer()
	}
	if v, ok := args.KwArgs["end_hour"]; ok {
		end = v.Integer()
	}
	if start < 0 || end > 24 || end <= start {
		return "", fmt.Errorf("backup_schedule_cron: window %d-%d is not within 0-24", start, end)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	slot := h.Sum64() % uint64((end-start)*60)
	return fmt.Sprintf("%d %d * * *", slot%60, start+int(slot/60)), nil
}

// ConfigHash is the hex sha256 of a rendered config: the only form of a
// config that may appear in status, plans, logs and the API.
func ConfigHash(rendered string) string {
	sum := sha256.Sum256([]byte(rendered))
	return hex.EncodeToString(sum[:])
}
