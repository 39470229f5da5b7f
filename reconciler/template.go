package reconciler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/parser"
)

// Limits of the template sandbox.
const (
	MaxTemplateSize   = 64 << 10 // bytes of template source
	MaxRenderedSize   = 1 << 20  // bytes of rendered output
	MaxRangeBudget    = 100_000  // total range() elements per render
	maxErrorTextBytes = 300      // gonja errors embed the whole source: cut them
)

// ErrTemplate wraps every template failure (parse, render, limits); the item
// that needs the template is blocked until a new generation fixes it.
var ErrTemplate = errors.New("block_config_template")

// singleLoader serves exactly one in-memory template; include, import and
// extends are not even parsed (see safeControl), and any other name is refused.
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

// safeControl allows no include/import/from/extends/block (file access) and
// no macro/call (unbounded recursion crashes the process).
var safeControl = sync.OnceValue(func() *exec.ControlStructureSet {
	m := map[string]parser.ControlStructureParser{}
	for _, n := range []string{"if", "for", "set", "with", "filter", "raw", "autoescape", "break", "continue"} {
		if p, ok := builtins.ControlStructures.Get(n); ok {
			m[n] = p
		}
	}
	return exec.NewControlStructureSet(m)
})

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

// Render renders a block_config_template with vars in the sandbox: no file,
// include, environment or network access; bounded iteration and output.
// Errors wrap ErrTemplate and never contain the whole template source.
func Render(name, src string, vars map[string]any) (out string, err error) {
	if len(src) > MaxTemplateSize {
		return "", fmt.Errorf("%w: template is %d bytes, limit %d", ErrTemplate, len(src), MaxTemplateSize)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: render aborted: %s", ErrTemplate, cut(fmt.Sprint(r)))
		}
	}()
	cfg := config.New()
	cfg.StrictUndefined = true
	cfg.KeepTrailingNewline = true
	budget := int64(MaxRangeBudget)
	globals := map[string]any{
		"range": func(args *exec.VarArgs) ([]int, error) {
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
			if atomic.AddInt64(&budget, -int64(n)) < 0 {
				return nil, fmt.Errorf("iteration budget of %d exceeded", MaxRangeBudget)
			}
			out := make([]int, 0, n)
			for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
				out = append(out, i)
			}
			return out, nil
		},
		"backup_schedule_cron": BackupScheduleCron,
	}
	for _, n := range []string{"dict", "namespace", "cycler", "joiner"} {
		if f, ok := builtins.GlobalFunctions.Get(n); ok {
			globals[n] = f
		}
	}
	env := &exec.Environment{
		Context:           exec.NewContext(globals),
		Filters:           builtins.Filters,
		Tests:             builtins.Tests,
		ControlStructures: safeControl(),
		Methods:           builtins.Methods,
	}
	tpl, err := exec.NewTemplate(name, cfg, &singleLoader{name: name, src: []byte(src)}, env)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrTemplate, cut(err.Error()))
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&limitedWriter{w: &buf, n: MaxRenderedSize}, exec.NewContext(vars)); err != nil {
		return "", fmt.Errorf("%w: %s", ErrTemplate, cut(err.Error()))
	}
	return buf.String(), nil
}

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
