package reconciler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"reflect"
	"regexp"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/fleetwave/fleetwave"
	"github.com/fleetwave/fleetwave/internal/bounds"
)

// Limits of the template sandbox.
const (
	MaxTemplateSize    = 64 << 10 // bytes of template source
	MaxRenderedSize    = 1 << 20  // bytes of rendered output, and of any intermediate string or list
	MaxRangeBudget     = 100_000  // total range() elements per render
	MaxLoopIterations  = 200_000  // total for-loop body executions per render
	MaxCredentialLen   = 256      // credential_get_or_create length bound
	MinCredentialLen   = 8
	maxErrorTextBytes  = 300 // gonja errors embed the whole source: cut them
	budgetVar          = "_fw_budget"
	credentialFuncName = "credential_get_or_create"
)

// ErrTemplate wraps every template failure (parse, render, limits); the item
// that needs the template is blocked until a new generation fixes it.
var ErrTemplate = errors.New("block_config_template")

// ErrConfigSchema wraps a rendered config that does not satisfy its block's
// config_schema; like ErrTemplate, it blocks the item until a new generation.
var ErrConfigSchema = errors.New("config_schema")

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

type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, fmt.Errorf("rendered output exceeds %d bytes", MaxRenderedSize)
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// budget is the per-render work allowance: range() elements and loop
// iterations. A render runs on one goroutine, so plain counters suffice.
type budget struct {
	rangeLeft, loopLeft int
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
}

type parsed struct {
	tpl *exec.Template
	err error
}

func newRenderer(opts Options) *renderer {
	globals := map[string]any{
		"backup_schedule_cron": BackupScheduleCron,
		"_fw_mul":              guardedMul,
		"_fw_add":              guardedAdd,
		"_fw_cat":              guardedCat,
	}
	for _, n := range []string{"dict", "namespace", "cycler", "joiner"} {
		if f, ok := builtins.GlobalFunctions.Get(n); ok {
			globals[n] = f
		}
	}
	return &renderer{
		opts: opts,
		env: &exec.Environment{
			Context:           exec.NewContext(globals),
			Filters:           safeFilters(),
			Tests:             builtins.Tests,
			ControlStructures: safeControls(),
			Methods:           safeMethods(),
		},
		cache: map[[32]byte]*parsed{},
	}
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
		guardExpressions(reflect.ValueOf(tpl.Root()), 0)
		p.tpl = tpl
	}()
	r.cache[key] = p
	return p.tpl, p.err
}

// renderBlock renders a trigger's template for block b and checks the
// result against b's config_schema. Errors never carry rendered values.
func (r *renderer) renderBlock(b *fleetwave.Block, name, src string, vars map[string]any, scope string) (string, error) {
	out, err := r.render(name, src, vars, scope)
	if err != nil {
		return "", err
	}
	if b != nil && b.ConfigSchema != "" && r.opts.ValidateConfig != nil {
		if err := r.opts.ValidateConfig(b.ConfigSchema, out); err != nil {
			return "", configSchemaError("block " + b.Name + ": " + cut(err.Error()))
		}
	}
	return out, nil
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
	b := &budget{rangeLeft: MaxRangeBudget, loopLeft: MaxLoopIterations}
	data := make(map[string]any, len(vars)+3)
	for k, v := range vars {
		data[k] = v
	}
	data["range"] = b.rangeFunc
	data[budgetVar] = b
	data[credentialFuncName] = r.credentialFunc(scope)
	var buf bytes.Buffer
	if err := tpl.Execute(&limitedWriter{w: &buf, n: MaxRenderedSize}, exec.NewContext(data)); err != nil {
		return "", fmt.Errorf("%w: %s", ErrTemplate, cut(err.Error()))
	}
	return buf.String(), nil
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
	n := 0
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	b.rangeLeft -= n
	if n < 0 || b.rangeLeft < 0 {
		return nil, fmt.Errorf("iteration budget of %d exceeded", MaxRangeBudget)
	}
	out := make([]int, 0, n)
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, i)
	}
	return out, nil
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
