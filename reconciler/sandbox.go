package reconciler

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The sandbox beyond gonja's defaults:
//   - no include/import/from/extends/block (file access) and no macro/call
//     (unbounded recursion is a fatal stack overflow, not a panic);
//   - every for-loop body execution is charged to a per-render budget, so
//     nested loops over large strings or lists end with an error;
//   - the operators *, + and ~ are rewritten after parsing into guarded
//     functions that refuse results above MaxRenderedSize before allocating
//     them ("a" * 2**30 fails at once instead of allocating 1 GiB);
//   - filters and methods come from an allow-list (no `random`: plans are
//     deterministic) and refuse size arguments and inputs above the limit.

var safeControls = sync.OnceValue(func() *exec.ControlStructureSet {
	m := map[string]parser.ControlStructureParser{}
	for _, n := range []string{"if", "set", "with", "filter", "raw", "autoescape", "break", "continue"} {
		if p, ok := builtins.ControlStructures.Get(n); ok {
			m[n] = p
		}
	}
	if p, ok := builtins.ControlStructures.Get("for"); ok {
		m["for"] = func(pp *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			cs, err := p(pp, args)
			if err != nil {
				return cs, err
			}
			if f, ok := cs.(*controlStructures.ForControlStructure); ok && f.BodyWrapper != nil {
				tick := &nodes.ControlStructureBlock{Location: f.Position(), Name: "loop_budget", ControlStructure: &loopTick{loc: f.Position()}}
				f.BodyWrapper.Nodes = append([]nodes.Node{tick}, f.BodyWrapper.Nodes...)
			}
			return cs, nil
		}
	}
	return exec.NewControlStructureSet(m)
})

// loopTick is an invisible first statement of every for-loop body: it
// charges one iteration to the render's budget.
type loopTick struct{ loc *tokens.Token }

func (t *loopTick) Position() *tokens.Token { return t.loc }
func (t *loopTick) String() string          { return "loop_budget" }
func (t *loopTick) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	v, _ := r.Environment.Context.Get(budgetVar)
	b, ok := v.(*budget)
	if !ok {
		return errors.New("loop budget missing")
	}
	b.loopLeft--
	if b.loopLeft < 0 {
		return fmt.Errorf("loop iteration budget of %d exceeded", MaxLoopIterations)
	}
	return nil
}

var (
	exprType = reflect.TypeOf((*nodes.Expression)(nil)).Elem()
	callType = reflect.TypeOf(&nodes.Call{})
	tokType  = reflect.TypeOf(&tokens.Token{})
)

// guardExpressions rewrites, in place, every binary *, + and ~ of the tree
// into a call of the guarded function of the same meaning.
func guardExpressions(v reflect.Value, depth int) {
	if depth > 10_000 || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() || v.Type() == tokType {
			return
		}
		guardExpressions(v.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if v.Type().Field(i).Name == "Parent" {
				continue
			}
			if !f.CanSet() && f.CanAddr() {
				// gonja keeps the expressions of set/with/filter in
				// unexported fields; the tree is ours until it executes.
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			if !f.CanSet() {
				continue
			}
			replaceBinary(f)
			guardExpressions(f, depth+1)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			replaceBinary(v.Index(i))
			guardExpressions(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.Type().Elem() != exprType {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(exprType).Elem()
			e.Set(v.MapIndex(k))
			replaceBinary(e)
			guardExpressions(e, depth+1)
			v.SetMapIndex(k, e)
		}
	}
}

func replaceBinary(f reflect.Value) {
	if !f.CanSet() || f.Kind() != reflect.Interface || f.IsNil() || !callType.AssignableTo(f.Type()) {
		return
	}
	be, ok := f.Interface().(*nodes.BinaryExpression)
	if !ok || be.Operator == nil || be.Operator.Token == nil {
		return
	}
	var fn string
	switch be.Operator.Token.Type {
	case tokens.Multiply:
		fn = "_fw_mul"
	case tokens.Addition:
		fn = "_fw_add"
	case tokens.Tilde:
		fn = "_fw_cat"
	default:
		return
	}
	tok := *be.Operator.Token
	tok.Type, tok.Val = tokens.Name, fn
	f.Set(reflect.ValueOf(&nodes.Call{
		Location: be.Operator.Token,
		Func:     &nodes.Name{Name: &tok},
		Args:     []nodes.Expression{be.Left, be.Right},
		Kwargs:   map[string]nodes.Expression{},
	}))
}

func errTooLarge(what string, n int) error {
	return fmt.Errorf("%s would be %d bytes, limit %d", what, n, MaxRenderedSize)
}

func twoArgs(args *exec.VarArgs) (*exec.Value, *exec.Value, error) {
	if len(args.Args) != 2 {
		return nil, nil, errors.New("operator needs two operands")
	}
	return args.Args[0], args.Args[1], nil
}

// guardedMul is `*` with gonja's semantics and a size bound.
func guardedMul(args *exec.VarArgs) (*exec.Value, error) {
	l, r, err := twoArgs(args)
	if err != nil {
		return nil, err
	}
	switch {
	case l.IsFloat() || r.IsFloat():
		return exec.AsValue(l.Float() * r.Float()), nil
	case l.IsString():
		n := r.Integer()
		if n <= 0 {
			return exec.AsValue(""), nil
		}
		if len(l.String()) > 0 && n > MaxRenderedSize/len(l.String()) {
			return nil, errTooLarge("string repetition", len(l.String())*min(n, 1<<40/max(1, len(l.String()))))
		}
		return exec.AsValue(strings.Repeat(l.String(), n)), nil
	}
	return exec.AsValue(l.Integer() * r.Integer()), nil
}

// guardedAdd is `+` with gonja's semantics and a size bound.
func guardedAdd(args *exec.VarArgs) (*exec.Value, error) {
	l, r, err := twoArgs(args)
	if err != nil {
		return nil, err
	}
	switch {
	case l.IsList():
		if !r.IsList() {
			return nil, errors.New("unable to concatenate a list and a non-list")
		}
		if n := l.Len() + r.Len(); n > MaxRenderedSize {
			return nil, errTooLarge("list", n)
		}
		out := make([]any, 0, l.Len()+r.Len())
		for _, side := range []*exec.Value{l, r} {
			side.Iterate(func(_, _ int, key, _ *exec.Value) bool {
				out = append(out, key.Interface())
				return true
			}, func() {})
		}
		return exec.AsValue(out), nil
	case l.IsFloat() || r.IsFloat():
		return exec.AsValue(l.Float() + r.Float()), nil
	case l.IsString() || r.IsString():
		return guardedCat(args)
	}
	return exec.AsValue(l.Integer() + r.Integer()), nil
}

// guardedCat is `~` (string concatenation) with a size bound.
func guardedCat(args *exec.VarArgs) (*exec.Value, error) {
	l, r, err := twoArgs(args)
	if err != nil {
		return nil, err
	}
	a, b := l.String(), r.String()
	if len(a)+len(b) > MaxRenderedSize {
		return nil, errTooLarge("string", len(a)+len(b))
	}
	return exec.AsValue(a + b), nil
}

// sizeOf estimates the bytes a value stands for: a string's length; a list's
// element count plus the lengths of its string elements.
func sizeOf(v *exec.Value) int {
	switch {
	case v == nil:
		return 0
	case v.IsString():
		return len(v.String())
	case v.IsList():
		n := v.Len()
		v.Iterate(func(_, _ int, key, _ *exec.Value) bool {
			if key.IsString() {
				n += len(key.String())
			}
			return n <= MaxRenderedSize
		}, func() {})
		return n
	}
	return 0
}

var bigWidthRE = regexp.MustCompile(`[0-9]{7,}`)

// checkCall refuses a filter or method call whose input or arguments are
// above the size limit, or whose result is known to be.
func checkCall(name string, in *exec.Value, params *exec.VarArgs) error {
	if n := sizeOf(in); n > MaxRenderedSize {
		return errTooLarge(name+" input", n)
	}
	var all []*exec.Value
	all = append(all, params.Args...)
	for _, v := range params.KwArgs {
		all = append(all, v)
	}
	for _, a := range all {
		if a.IsInteger() && (a.Integer() > MaxRenderedSize || a.Integer() < -MaxRenderedSize) {
			return fmt.Errorf("%s: argument %d is above the limit %d", name, a.Integer(), MaxRenderedSize)
		}
		if n := sizeOf(a); n > MaxRenderedSize {
			return errTooLarge(name+" argument", n)
		}
	}
	arg := func(i int) string {
		if i < len(params.Args) {
			return params.Args[i].String()
		}
		return ""
	}
	switch name {
	case "replace":
		s, old, repl := in.String(), arg(0), arg(1)
		count := len(s) + 1
		if old != "" {
			count = strings.Count(s, old)
		}
		if n := len(s) + count*(len(repl)-len(old)); n > MaxRenderedSize {
			return errTooLarge("replace result", n)
		}
	case "join":
		sep := arg(0)
		if in.IsString() { // str.join(list): the separator is the receiver
			sep = in.String()
			if len(params.Args) > 0 {
				in = params.Args[0]
			}
		}
		if n := sizeOf(in) + len(sep)*max(in.Len(), 0); n > MaxRenderedSize {
			return errTooLarge("join result", n)
		}
	case "indent", "expandtabs":
		width := 4
		if name == "expandtabs" {
			width = 8
		}
		if len(params.Args) > 0 {
			width = params.Args[0].Integer()
		}
		if v, ok := params.KwArgs["width"]; ok {
			width = v.Integer()
		}
		if n := len(in.String()) + (strings.Count(in.String(), "\n")+strings.Count(in.String(), "\t")+1)*width; n > MaxRenderedSize {
			return errTooLarge(name+" result", n)
		}
	case "format", "format_map":
		if bigWidthRE.MatchString(in.String()) {
			return fmt.Errorf("%s: field widths above 6 digits are refused", name)
		}
	case "tojson":
		for _, a := range all {
			if a.IsInteger() && a.Integer() > 16 {
				return errors.New("tojson: indent above 16 is refused")
			}
		}
	}
	return nil
}

var allowedFilters = []string{
	"abs", "attr", "batch", "capitalize", "center", "default", "d", "dictsort", "e", "escape", "filesizeformat",
	"first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "items", "last", "length",
	"count", "list", "lower", "map", "max", "min", "pprint", "rejectattr", "reject", "replace", "reverse",
	"round", "safe", "selectattr", "select", "slice", "sort", "string", "striptags", "sum", "title", "tojson",
	"trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
}

var safeFilters = sync.OnceValue(func() *exec.FilterSet {
	m := map[string]exec.FilterFunction{}
	for _, name := range allowedFilters {
		f, ok := builtins.Filters.Get(name)
		if !ok {
			continue
		}
		m[name] = func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
			if err := checkCall(name, in, params); err != nil {
				return exec.AsValue(err)
			}
			out := f(e, in, params)
			if n := sizeOf(out); n > MaxRenderedSize {
				return exec.AsValue(errTooLarge(name+" result", n))
			}
			return out
		}
	}
	return exec.NewFilterSet(m)
})

var allowedStrMethods = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
	"format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isprintable",
	"isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix",
	"replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
	"swapcase", "title", "upper", "zfill",
}

func guardMethods[I any](set *exec.MethodSet[I], names []string) *exec.MethodSet[I] {
	m := map[string]exec.Method[I]{}
	for _, name := range names {
		f, ok := set.Get(name)
		if !ok {
			continue
		}
		m[name] = func(self I, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			if err := checkCall(name, selfValue, args); err != nil {
				return nil, err
			}
			out, err := f(self, selfValue, args)
			if s, ok := out.(string); ok && len(s) > MaxRenderedSize {
				return nil, errTooLarge(name+" result", len(s))
			}
			return out, err
		}
	}
	return exec.NewMethodSet(m)
}

var safeMethods = sync.OnceValue(func() exec.Methods {
	bm := builtins.Methods
	return exec.Methods{
		Bool:  guardMethods(bm.Bool, []string{"string", "int", "bit_length", "bit_count", "as_integer_ratio"}),
		Int:   guardMethods(bm.Int, []string{"is_integer", "bit_length", "bit_count", "as_integer_ratio"}),
		Float: guardMethods(bm.Float, []string{"is_integer", "as_integer_ratio", "hex"}),
		Str:   guardMethods(bm.Str, allowedStrMethods),
		Dict:  guardMethods(bm.Dict, []string{"keys", "values", "items", "get", "pop", "setdefault", "update", "copy", "clear"}),
		List:  guardMethods(bm.List, []string{"append", "reverse", "copy"}),
	}
})
