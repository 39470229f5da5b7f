package reconciler

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
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
//   - every for-loop body execution and every element range() returns is
//     charged to a per-render budget, so nested loops over large strings
//     or lists end with ErrTemplateBudget after a counted number of steps
//     (no clock is involved: the same template fails the same way on any
//     machine);
//   - so is the work of every step (MaxRenderWork, counted in units of
//     about a byte processed), where the sandbox intercepts it: each
//     filter, method and test call, each operand of a comparison or of in,
//     each argument of a function call and each slice target is charged
//     stepWork, plus a unit per byte of the strings and stepWork per
//     element of the lists and dicts it reads and produces (workOf: gonja
//     builds a value for each); a filter that iterates a string (sort,
//     batch...) stepWork per character; an operator (opFunc) stepWork and
//     a list or dict literal its size (deepSize: both handle elements in
//     Go); a for-loop 2*stepWork per item it materializes and, per body
//     execution, a price for the size of its body (priceLoops: nodeWork
//     per node, and per subscript the pairs of the largest dict literal);
//     every byte written to the output or captured by a {% set %} or
//     {% filter %} block one unit. A loop of 1000 upper() calls on a 1 MiB
//     string ends with ErrTemplateBudget after 32 of them. A charge comes
//     before the work where the inputs are known, and once a render failed
//     every charge fails, so a render out of budget stops at its next
//     step. The sandbox's names in the context (internalPrefix) cannot be
//     spelled by a template, which therefore can neither call nor shadow
//     them;
//   - the value of a {% set %} or {% filter %} block is bounded by
//     MaxRenderedSize like any other string (gonja captures it without
//     the output's limit), and recursive for-loops are refused (each level
//     recurses in Go and captures its output);
//   - the binary operators are rewritten after parsing into one guarded
//     function (opFunc) with Jinja2's meaning for lists, dicts and
//     repetition, which refuses results above MaxRenderedSize before
//     allocating them ("a" * 2**30 and [0] * 10**8 fail at once);
//   - list, tuple and dict literals are rewritten into a check of their
//     size, nested values included (a literal nesting a value in itself
//     doubles it per loop iteration);
//   - filters and methods come from an allow-list (no `random`: plans are
//     deterministic) and refuse size arguments and inputs above the limit.
//
// A bound that stops a render is recorded in its budget with where it
// happened, and is the render's error (ErrTemplateBudget or
// ErrTemplateSize, wrapped in ErrTemplate): gonja flattens the errors of
// functions and filters into text, so it cannot carry them.

var safeControls = sync.OnceValue(func() *exec.ControlStructureSet {
	m := map[string]parser.ControlStructureParser{}
	for _, n := range []string{"if", "set", "with", "filter", "raw", "autoescape", "break", "continue"} {
		if p, ok := builtins.ControlStructures.Get(n); ok {
			m[n] = p
		}
	}
	if p, ok := builtins.ControlStructures.Get("for"); ok {
		m["for"] = func(pp *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			at := args.Current() // the loop variable: errors point into the for tag
			cs, err := p(pp, args)
			if err != nil {
				return cs, err
			}
			if f, ok := cs.(*controlStructures.ForControlStructure); ok && f.BodyWrapper != nil {
				if at == nil {
					at = f.Position()
				}
				if f.Recursive {
					return nil, args.Error("recursive for-loops are not supported", at)
				}
				tick := &nodes.ControlStructureBlock{Location: f.Position(), Name: "loop_budget", ControlStructure: &loopTick{loc: at}}
				f.BodyWrapper.Nodes = append([]nodes.Node{tick}, f.BodyWrapper.Nodes...)
				if f.ObjectEvaluator != nil {
					// the work per item: 2*stepWork, plus the price of the if
					// clause (priceLoops)
					perItem := *at
					perItem.Type, perItem.Val = tokens.Integer, strconv.Itoa(2*stepWork)
					f.ObjectEvaluator = guardCall(at, workFuncName, &nodes.String{Location: at, Val: workLoop}, f.ObjectEvaluator,
						&nodes.Integer{Location: &perItem, Val: 2 * stepWork})
				}
			}
			return cs, nil
		}
	}
	for _, name := range []string{"set", "filter"} {
		p, ok := builtins.ControlStructures.Get(name)
		if !ok {
			continue
		}
		m[name] = func(pp *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			at := args.Current()
			cs, err := p(pp, args)
			if err != nil {
				return cs, err
			}
			body, ok := blockBody(cs)
			if !ok {
				return nil, fmt.Errorf("%s blocks are not supported by this sandbox", name)
			}
			if body != nil {
				if at == nil {
					at = cs.Position()
				}
				guard := &nodes.ControlStructureBlock{Location: cs.Position(), Name: "capture_budget", ControlStructure: &captureLimit{loc: at, what: name + " block"}}
				body.Nodes = append([]nodes.Node{guard}, body.Nodes...)
			}
			return cs, nil
		}
	}
	return exec.NewControlStructureSet(m)
})

var wrapperType = reflect.TypeOf(&nodes.Wrapper{})

// blockBody returns the body of a set or filter control structure, which
// gonja keeps in an unexported field (body, bodyWrapper): nil for a set
// with "=". ok is false for a structure of another shape (a gonja whose
// internals changed): the caller then refuses the block.
func blockBody(cs nodes.ControlStructure) (body *nodes.Wrapper, ok bool) {
	v := reflect.ValueOf(cs)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	for _, name := range []string{"body", "bodyWrapper"} {
		f := v.Elem().FieldByName(name)
		if !f.IsValid() || f.Type() != wrapperType || !f.CanAddr() {
			continue
		}
		// the tree is ours until it executes (see guarder.walk)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(*nodes.Wrapper), true
	}
	return nil, false
}

// captureLimit is an invisible first statement of the body of every
// {% set %} and {% filter %} block: gonja renders such a body into a
// buffer of its own, which the output's limit does not see. It bounds
// that buffer to MaxRenderedSize bytes, charged as work, like the output.
type captureLimit struct {
	loc  *tokens.Token
	what string
}

func (c *captureLimit) Position() *tokens.Token { return c.loc }
func (c *captureLimit) String() string          { return "capture_budget" }
func (c *captureLimit) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	// r renders the nodes of this body, and only them (ExecuteWrapper
	// inherits a renderer per body): the writer holds for the rest of it.
	r.Output = &limitedWriter{w: r.Output, n: MaxRenderedSize, b: budgetOf(r.Environment.Context), what: c.what, line: c.loc.Line, col: c.loc.Col}
	return nil
}

// loopTick is an invisible first statement of every for-loop body: it
// charges one iteration to the render's budget, and the work of the body
// (priceLoops) to its work allowance.
type loopTick struct {
	loc  *tokens.Token
	work int // charged per body execution (priceLoops)
}

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
		return b.fail(t.loc.Line, t.loc.Col, &limitError{kind: ErrTemplateBudget,
			msg: fmt.Sprintf("loop iteration budget of %d exceeded", MaxLoopIterations)})
	}
	return b.charge(t.loc.Line, t.loc.Col, "for-loop body", t.work)
}

// nodeWork is the work of evaluating one node of a template (a statement,
// an expression, a piece of text) once, beside what its calls are charged:
// about a quarter of a call.
const nodeWork = stepWork / 4

var (
	nodeIface    = reflect.TypeOf((*nodes.Node)(nil)).Elem()
	dictNodeType = reflect.TypeOf(&nodes.Dict{})
	forType      = reflect.TypeOf(&controlStructures.ForControlStructure{})
	lookupTypes  = map[reflect.Type]bool{reflect.TypeOf(&nodes.GetItem{}): true, reflect.TypeOf(&nodes.GetAttribute{}): true}
)

// priceLoops sets what every for-loop of a parsed (and guarded) template
// charges, so that the work of a render is bounded however big a loop
// body is: per body execution (its loopTick) stepWork, plus nodeWork per
// node of the body, plus for each subscript and attribute of the body the
// number of pairs of the template's largest dict literal (gonja looks a
// key of a dict literal up pair by pair; other values look keys up at
// once); per item the loop materializes (workFunc) 2*stepWork plus the
// same price of its if clause, which runs per item.
func priceLoops(root *nodes.Template) {
	maxPairs := 0
	visitTree(reflect.ValueOf(root), 0, func(v reflect.Value) {
		if v.Type() == dictNodeType {
			maxPairs = max(maxPairs, v.Elem().FieldByName("Pairs").Len())
		}
	})
	price := func(v reflect.Value) int {
		n, lookups := 0, 0
		visitTree(v, 0, func(x reflect.Value) {
			if x.Type().Implements(nodeIface) {
				n++
			}
			if lookupTypes[x.Type()] {
				lookups++
			}
		})
		return nodeWork*n + maxPairs*lookups
	}
	visitTree(reflect.ValueOf(root), 0, func(v reflect.Value) {
		if v.Type() != forType || !v.CanInterface() {
			return
		}
		f := v.Interface().(*controlStructures.ForControlStructure)
		if f.BodyWrapper != nil && len(f.BodyWrapper.Nodes) > 0 {
			if b, ok := f.BodyWrapper.Nodes[0].(*nodes.ControlStructureBlock); ok {
				if t, ok := b.ControlStructure.(*loopTick); ok {
					t.work = stepWork + price(reflect.ValueOf(f.BodyWrapper))
				}
			}
		}
		if c, ok := f.ObjectEvaluator.(*nodes.Call); ok && len(c.Args) == 5 && f.IfCondition != nil {
			if w, ok := c.Args[4].(*nodes.Integer); ok {
				w.Val += price(reflect.ValueOf(f.IfCondition))
			}
		}
	})
}

// visitTree calls fn for every non-nil pointer reachable from v in a
// parsed template (Parent links and tokens excepted), unexported fields
// included, made usable (the tree is ours until it executes).
func visitTree(v reflect.Value, depth int, fn func(reflect.Value)) {
	if depth > 10_000 || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			visitTree(v.Elem(), depth+1, fn)
		}
	case reflect.Pointer:
		if v.IsNil() || v.Type() == tokType {
			return
		}
		fn(v)
		visitTree(v.Elem(), depth+1, fn)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if v.Type().Field(i).Name == "Parent" {
				continue
			}
			if !f.CanInterface() && f.CanAddr() {
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			visitTree(f, depth+1, fn)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			visitTree(v.Index(i), depth+1, fn)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			visitTree(it.Value(), depth+1, fn)
		}
	}
}

var (
	exprType = reflect.TypeOf((*nodes.Expression)(nil)).Elem()
	callType = reflect.TypeOf(&nodes.Call{})
	tokType  = reflect.TypeOf(&tokens.Token{})
)

// guarder rewrites a parsed template in place: every binary operator
// becomes a call of the render's opFuncName, and every list, tuple and
// dict literal a call of sizedFuncName (see the comment at the top of this
// file). wrapped holds the literals already wrapped: the walk continues
// into the new call, whose argument the literal is.
type guarder struct {
	wrapped map[nodes.Expression]bool
}

func guardTemplate(root *nodes.Template) {
	g := &guarder{wrapped: map[nodes.Expression]bool{}}
	g.walk(reflect.ValueOf(root), 0)
	priceLoops(root)
}

func (g *guarder) walk(v reflect.Value, depth int) {
	if depth > 10_000 || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() || v.Type() == tokType {
			return
		}
		g.walk(v.Elem(), depth+1)
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
			g.replace(f)
			g.walk(f, depth+1)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			g.replace(v.Index(i))
			g.walk(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.Type().Elem() != exprType {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(exprType).Elem()
			e.Set(v.MapIndex(k))
			g.replace(e)
			g.walk(e, depth+1)
			v.SetMapIndex(k, e)
		}
	}
}

// replace rewrites the expression in f, when f can hold a call.
func (g *guarder) replace(f reflect.Value) {
	if !f.CanSet() || f.Kind() != reflect.Interface || f.IsNil() || !callType.AssignableTo(f.Type()) {
		return
	}
	switch x := f.Interface().(type) {
	case *nodes.BinaryExpression:
		if x.Operator == nil || x.Operator.Token == nil {
			return
		}
		op := x.Operator.Token
		if scannedOps[op.Type] && !g.wrapped[x] {
			// gonja's meaning, each operand charged as it is scanned
			g.wrapped[x] = true
			x.Left, x.Right = workCall(op, workScan, x.Left), workCall(op, workScan, x.Right)
			return
		}
		if !guardedOps[op.Type] {
			return
		}
		f.Set(reflect.ValueOf(guardCall(op, opFuncName, &nodes.String{Location: op, Val: op.Val}, x.Left, x.Right)))
	case *nodes.Call:
		// a function of the template's values (loop.changed compares its
		// argument with the last one) reads its arguments
		if name, ok := x.Func.(*nodes.Name); ok && name.Name != nil && strings.HasPrefix(name.Name.Val, internalPrefix) {
			return // the sandbox's own
		}
		if g.wrapped[x] || x.Location == nil {
			return
		}
		g.wrapped[x] = true
		for i, a := range x.Args {
			x.Args[i] = workCall(x.Location, workScan, a)
		}
		for k, a := range x.Kwargs {
			x.Kwargs[k] = workCall(x.Location, workScan, a)
		}
	case *nodes.GetSlice:
		// slicing a string converts all of it to runes
		if target, ok := x.Node.(nodes.Expression); ok && !g.wrapped[x] && x.Location != nil {
			g.wrapped[x] = true
			x.Node = workCall(x.Location, workScan, target)
		}
	case *nodes.List, *nodes.Tuple, *nodes.Dict:
		lit := x.(nodes.Expression)
		if g.wrapped[lit] {
			return
		}
		g.wrapped[lit] = true
		f.Set(reflect.ValueOf(guardCall(lit.Position(), sizedFuncName, lit)))
	}
}

// guardedOps are the binary operators the sandbox evaluates itself.
var guardedOps = map[tokens.Type]bool{
	tokens.Addition: true, tokens.Subtraction: true, tokens.Multiply: true, tokens.Division: true,
	tokens.FloorDivision: true, tokens.Modulo: true, tokens.Power: true, tokens.Tilde: true,
}

// scannedOps are the binary operators gonja evaluates by scanning its
// operands (string and list comparisons, in): their operands are charged
// as work (workFunc), the operators keep gonja's meaning.
var scannedOps = map[tokens.Type]bool{
	tokens.Equals: true, tokens.Ne: true, tokens.LowerThan: true, tokens.LowerThanOrEqual: true,
	tokens.GreaterThan: true, tokens.GreaterThanOrEqual: true, tokens.In: true,
}

// What workFunc charges for its value.
const (
	workScan = "scan" // an operand or a slice target: its bytes and elements
	workLoop = "loop" // a for-loop iterable: the work per item it yields
)

// workCall wraps x in the work charge of kind, unless x is a literal
// scalar (nothing to scan).
func workCall(tok *tokens.Token, kind string, x nodes.Expression) nodes.Expression {
	switch x.(type) {
	case nil, *nodes.String, *nodes.Integer, *nodes.Float, *nodes.Bool, *nodes.None:
		return x
	}
	return guardCall(tok, workFuncName, &nodes.String{Location: tok, Val: kind}, x)
}

// guardCall returns the call fn(line, col, args...) positioned at tok, so
// that an error names where in the template it happened.
func guardCall(tok *tokens.Token, fn string, args ...nodes.Expression) *nodes.Call {
	name := *tok
	name.Type, name.Val = tokens.Name, fn
	pos := func(n int) nodes.Expression {
		t := *tok
		t.Type, t.Val = tokens.Integer, strconv.Itoa(n)
		return &nodes.Integer{Location: &t, Val: n}
	}
	return &nodes.Call{
		Location: tok,
		Func:     &nodes.Name{Name: &name},
		Args:     append([]nodes.Expression{pos(tok.Line), pos(tok.Col)}, args...),
		Kwargs:   map[string]nodes.Expression{},
	}
}

func errTooLarge(what string, n int) error {
	return &limitError{kind: ErrTemplateSize, msg: fmt.Sprintf("%s would be %d bytes, limit %d", what, n, MaxRenderedSize)}
}

// opFunc is the render's implementation of the binary operators, with
// Jinja2's meaning where gonja's differs for lists, dicts and sequence
// repetition, and gonja's for numbers and strings otherwise:
//
//   - list + list concatenates; a list with anything else is an error;
//   - list * int and int * list repeat the list, str * int and int * str
//     the string (a count <= 0 gives an empty one); any other product with
//     a list, dict or string is an error;
//   - -, /, //, % and ** with a list, a dict or none are errors, a zero
//     divisor is an error, and "..." % x (Python string formatting) is
//     refused with a pointer to the format filter; numbers keep gonja's
//     meaning, bools count as 0 and 1 (as in Jinja2), and a string is read
//     as a number (gonja's meaning, where Jinja2 refuses: label values are
//     strings, and templates do arithmetic with them);
//   - + with a string concatenates (gonja's meaning: Jinja2 would refuse
//     "a" + 1), ~ always does;
//   - a result above MaxRenderedSize (strings by bytes, lists and dicts by
//     their elements and strings, nested ones included) is refused before
//     it is built: [0] * 100000000 fails at once, allocating nothing.
//
// Errors are recorded in the budget with the operator's position: the
// render fails with them even where gonja would carry on.
func (b *budget) opFunc(args *exec.VarArgs) (*exec.Value, error) {
	if len(args.Args) != 5 {
		return nil, errors.New("operator needs two operands")
	}
	line, col, op, l, r := args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2].String(), args.Args[3], args.Args[4]
	// the operators handle lists in Go, without a value per element: their
	// size (bytes and elements, one unit each) is their work
	what := "operator " + op
	if err := b.charge(line, col, what, stepWork+sizeWork(l)+sizeWork(r)); err != nil {
		return nil, err
	}
	out, err := binaryOp(op, l, r)
	if err != nil {
		return nil, b.fail(line, col, err)
	}
	if err := b.charge(line, col, what, sizeWork(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// charge takes n units of work from the render's allowance (see
// MaxRenderWork) for what, at line and col of the template (0 when
// unknown). Once the render has failed, every charge fails: a render that
// carries on past an error value does no more work.
func (b *budget) charge(line, col int, what string, n int) error {
	if b.err != nil {
		return b.err
	}
	b.workLeft -= n
	if b.workLeft < 0 {
		return b.fail(line, col, &limitError{kind: ErrTemplateBudget,
			msg: fmt.Sprintf("work budget of %d exceeded (%s: bytes and elements processed)", MaxRenderWork, what)})
	}
	return nil
}

// workOf is the work of reading or producing a value: a unit per byte of
// its strings and stepWork per element of its lists and dicts, nested ones
// included (see deepCount). Counting costs less than the count, which is
// charged.
func workOf(v *exec.Value) int {
	bytes, elems := deepCount(v, MaxRenderedSize)
	if bytes+elems > MaxRenderedSize {
		// counting stopped part way, where depends on the order of a
		// map: charge a fixed amount, so that renders are deterministic
		return stepWork * (MaxRenderedSize + 1)
	}
	return bytes + stepWork*elems
}

// sizeWork is the work of an operand of an operator: its size (deepSize),
// a fixed amount above MaxRenderedSize (see workOf).
func sizeWork(v *exec.Value) int {
	return min(deepSize(v, MaxRenderedSize), MaxRenderedSize+1)
}

// workFunc charges the work of a value the template goes on to scan, and
// returns it unchanged: a comparison operand or a slice target (workScan:
// workOf) or a for-loop iterable (workLoop: its 5th argument per item the
// loop materializes, as gonja builds a scope per item and runs the if
// clause before the body runs, the items the clause skips included).
func (b *budget) workFunc(args *exec.VarArgs) (*exec.Value, error) {
	if len(args.Args) < 4 {
		return nil, errors.New("work charge needs a value")
	}
	line, col, kind, v := args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2].String(), args.Args[3]
	n, what := stepWork+workOf(v), "operand"
	if kind == workLoop && len(args.Args) == 5 {
		// gonja builds a scope and a pair per item before the body runs
		// (about twice the cost of a value) and runs the if clause
		perItem := args.Args[4].Integer()
		n, what = stepWork+perItem*min(itemsOf(v), MaxRenderWork), "for-loop items"
	}
	if err := b.charge(line, col, what, n); err != nil {
		return nil, err
	}
	return v, nil
}

// itemsOf is the number of items a for-loop over v materializes: the
// bytes of a string (gonja iterates bytes), the elements of a list, the
// pairs of a dict.
func itemsOf(v *exec.Value) int {
	if v == nil || !v.Val.IsValid() {
		return 0
	}
	x := resolve(v.Val)
	switch {
	case !x.IsValid():
		return 0
	case x.Kind() == reflect.String, x.Kind() == reflect.Slice, x.Kind() == reflect.Array, x.Kind() == reflect.Map:
		return x.Len()
	case x.Type() == dictType && x.CanInterface():
		return len(x.Interface().(exec.Dict).Pairs)
	}
	return 0
}

// operand kinds, named as Jinja2 (Python) names them in its errors.
func kindOf(v *exec.Value) string {
	switch {
	case v == nil || v.IsNil():
		return "NoneType"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsBool():
		return "bool"
	case v.IsInteger():
		return "int"
	case v.IsFloat():
		return "float"
	}
	return "object"
}

// arithmetic reports whether a kind takes part in arithmetic: numbers,
// bools, and strings read as numbers (see opFunc).
func arithmetic(k string) bool { return k == "int" || k == "float" || k == "bool" || k == "str" }

// intOf returns v as an int (a bool as 0 or 1).
func intOf(v *exec.Value) int {
	if v.IsBool() {
		if v.Bool() {
			return 1
		}
		return 0
	}
	return v.Integer()
}

func floatOf(v *exec.Value) float64 {
	if v.IsBool() {
		return float64(intOf(v))
	}
	return v.Float()
}

func unsupported(op, lk, rk string) error {
	return fmt.Errorf("unsupported operand types for %s: '%s' and '%s'", op, lk, rk)
}

func binaryOp(op string, l, r *exec.Value) (*exec.Value, error) {
	lk, rk := kindOf(l), kindOf(r)
	switch op {
	case "~":
		a, b := l.String(), r.String()
		if len(a)+len(b) > MaxRenderedSize {
			return nil, errTooLarge("string", len(a)+len(b))
		}
		return exec.AsValue(a + b), nil
	case "+":
		switch {
		case lk == "list" && rk == "list":
			n := deepSize(l, MaxRenderedSize) + deepSize(r, MaxRenderedSize)
			if n > MaxRenderedSize {
				return nil, errTooLarge("list", n)
			}
			return exec.AsValue(append(listItems(l), listItems(r)...)), nil
		case lk == "list" || rk == "list":
			return nil, fmt.Errorf("can only concatenate list (not '%s') to list", map[bool]string{true: rk, false: lk}[lk == "list"])
		case lk == "dict" || rk == "dict" || lk == "NoneType" || rk == "NoneType":
			return nil, unsupported(op, lk, rk)
		case lk == "str" || rk == "str":
			return binaryOp("~", l, r)
		}
	case "*":
		switch {
		case (lk == "str" || lk == "list") && (rk == "int" || rk == "bool"):
			return repeat(l, intOf(r))
		case (rk == "str" || rk == "list") && (lk == "int" || lk == "bool"):
			return repeat(r, intOf(l))
		case lk == "str" || lk == "list" || rk == "str" || rk == "list":
			seq, other := lk, rk
			if seq != "str" && seq != "list" {
				seq, other = rk, lk
			}
			return nil, fmt.Errorf("can't multiply sequence (%s) by non-int of type '%s'", seq, other)
		}
	case "%":
		if lk == "str" {
			return nil, errors.New(`string formatting with % is not supported, use the format filter ("%s" | format(x))`)
		}
	}
	if !arithmetic(lk) || !arithmetic(rk) {
		return nil, unsupported(op, lk, rk)
	}
	float := lk == "float" || rk == "float"
	switch op {
	case "+":
		if float {
			return exec.AsValue(floatOf(l) + floatOf(r)), nil
		}
		return exec.AsValue(intOf(l) + intOf(r)), nil
	case "-":
		if float {
			return exec.AsValue(floatOf(l) - floatOf(r)), nil
		}
		return exec.AsValue(intOf(l) - intOf(r)), nil
	case "*":
		if float {
			return exec.AsValue(floatOf(l) * floatOf(r)), nil
		}
		return exec.AsValue(intOf(l) * intOf(r)), nil
	case "**":
		return exec.AsValue(math.Pow(floatOf(l), floatOf(r))), nil
	}
	// /, // and %: gonja's meaning, with Jinja2's error for a zero divisor
	// (gonja gives +Inf, a garbage integer or a runtime panic).
	if floatOf(r) == 0 {
		return nil, errors.New("division by zero")
	}
	switch op {
	case "/":
		return exec.AsValue(floatOf(l) / floatOf(r)), nil
	case "//":
		return exec.AsValue(int(floatOf(l) / floatOf(r))), nil
	case "%":
		if intOf(r) == 0 { // a fractional divisor truncates to 0
			return nil, errors.New("division by zero")
		}
		return exec.AsValue(intOf(l) % intOf(r)), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// repeat is seq * n for a string or a list, refused above MaxRenderedSize
// before anything is allocated.
func repeat(seq *exec.Value, n int) (*exec.Value, error) {
	if seq.IsString() {
		s := seq.String()
		if n <= 0 || s == "" {
			return exec.AsValue(""), nil
		}
		if n > MaxRenderedSize/len(s) {
			return nil, errTooLarge("string repetition", len(s)*min(n, 1<<40/len(s)))
		}
		return exec.AsValue(strings.Repeat(s, n)), nil
	}
	size := deepSize(seq, MaxRenderedSize)
	if n <= 0 || seq.Len() == 0 {
		return exec.AsValue([]any{}), nil
	}
	if n > MaxRenderedSize/max(size, 1) {
		return nil, errTooLarge("list repetition", max(size, 1)*min(n, 1<<40/max(size, 1)))
	}
	items := listItems(seq)
	out := make([]any, 0, len(items)*n)
	for range n {
		out = append(out, items...)
	}
	return exec.AsValue(out), nil
}

// sizedFunc checks a list, tuple or dict literal once it is evaluated:
// literals nest values (a namespace doubling [ns.l, ns.l] in a loop), and a
// value above MaxRenderedSize would be spelled out in full by the next
// output, filter or string conversion before any other bound applies.
func (b *budget) sizedFunc(args *exec.VarArgs) (*exec.Value, error) {
	if len(args.Args) != 3 {
		return nil, errors.New("literal check needs a value")
	}
	line, col, v := args.Args[0].Integer(), args.Args[1].Integer(), args.Args[2]
	what := "list"
	if v.IsDict() {
		what = "dict"
	}
	n := deepSize(v, MaxRenderedSize)
	if n > MaxRenderedSize {
		return nil, b.fail(line, col, errTooLarge(what, n))
	}
	if err := b.charge(line, col, what+" literal", stepWork+n); err != nil {
		return nil, err
	}
	return v, nil
}

var (
	valueType = reflect.TypeOf(&exec.Value{})
	dictType  = reflect.TypeOf(exec.Dict{})
)

// deepSize estimates the bytes a value stands for when it is spelled out:
// the length of every string and one per element of every list and dict,
// nested ones included and shared ones counted each time they appear. It
// stops counting once the total is above limit, so it costs at most about
// limit steps whatever the value.
func deepSize(v *exec.Value, limit int) int {
	bytes, elems := deepCount(v, limit)
	return bytes + elems
}

// deepCount is deepSize in two parts: the bytes of the strings and the
// elements of the lists and dicts.
func deepCount(v *exec.Value, limit int) (bytes, elems int) {
	if v == nil {
		return 0, 0
	}
	var stack []reflect.Value // containers still to count
	// count adds a value: a string's length now, a container later.
	count := func(x reflect.Value) {
		x = resolve(x)
		switch {
		case !x.IsValid():
		case x.Kind() == reflect.String:
			bytes += x.Len()
		case x.Type() == dictType, x.Kind() == reflect.Map:
			stack = append(stack, x)
		case x.Kind() == reflect.Slice || x.Kind() == reflect.Array:
			if x.Type().Elem().Kind() == reflect.Uint8 {
				bytes += x.Len()
			} else if x.Len() > 0 {
				stack = append(stack, x)
			}
		}
	}
	count(v.Val)
	for len(stack) > 0 && bytes+elems <= limit {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case x.Type() == dictType:
			if !x.CanInterface() {
				continue // not reachable from a template's values
			}
			pairs := x.Interface().(exec.Dict).Pairs
			elems += len(pairs)
			for i := 0; i < len(pairs) && bytes+elems <= limit; i++ {
				if p := pairs[i]; p != nil {
					count(reflect.ValueOf(p.Key))
					count(reflect.ValueOf(p.Value))
				}
			}
		case x.Kind() == reflect.Map:
			elems += x.Len()
			it := x.MapRange()
			for bytes+elems <= limit && it.Next() {
				count(it.Key())
				count(it.Value())
			}
		default: // a list
			elems += x.Len()
			if l, ok := anySlice(x); ok { // the common case, without reflection per element
				for i := 0; i < len(l) && bytes+elems <= limit; i++ {
					switch e := l[i].(type) {
					case int, int64, float64, bool, nil:
					case string:
						bytes += len(e)
					default:
						count(x.Index(i))
					}
				}
				continue
			}
			for i := 0; i < x.Len() && bytes+elems <= limit; i++ {
				count(x.Index(i))
			}
		}
	}
	return bytes, elems
}

// resolve follows the interfaces, pointers and *exec.Values around a value.
func resolve(x reflect.Value) reflect.Value {
	for x.IsValid() && (x.Kind() == reflect.Interface || x.Kind() == reflect.Pointer) && !x.IsNil() {
		if x.Type() == valueType && x.CanInterface() {
			x = x.Interface().(*exec.Value).Val
		} else {
			x = x.Elem()
		}
	}
	return x
}

func anySlice(x reflect.Value) ([]any, bool) {
	if !x.CanInterface() {
		return nil, false
	}
	l, ok := x.Interface().([]any)
	return l, ok
}

// listItems returns the elements of a list value, as gonja's iteration
// gives them, without building a Value per element for a []any.
func listItems(v *exec.Value) []any {
	if v.Val.IsValid() && v.Val.CanInterface() {
		if l, ok := v.Interface().([]any); ok {
			return slices.Clone(l)
		}
	}
	items := make([]any, 0, v.Len())
	v.Iterate(func(_, _ int, key, _ *exec.Value) bool {
		items = append(items, key.Interface())
		return true
	}, func() {})
	return items
}

// sizeOf estimates the bytes a value stands for: a string's length; a list's
// element count plus the lengths of its string elements. It stops counting
// above MaxRenderedSize and builds no value per element.
func sizeOf(v *exec.Value) int {
	switch {
	case v == nil:
		return 0
	case v.IsString():
		return len(v.String())
	case v.IsList():
		x := resolve(v.Val)
		if !x.IsValid() || (x.Kind() != reflect.Slice && x.Kind() != reflect.Array) {
			return v.Len()
		}
		n := x.Len()
		if x.Type().Elem().Kind() == reflect.String {
			for i := 0; i < x.Len() && n <= MaxRenderedSize; i++ {
				n += x.Index(i).Len()
			}
			return n
		}
		if x.Type().Elem().Kind() != reflect.Interface && x.Type().Elem().Kind() != reflect.Pointer {
			return n // no element is a string
		}
		for i := 0; i < x.Len() && n <= MaxRenderedSize; i++ {
			if e := resolve(x.Index(i)); e.IsValid() && e.Kind() == reflect.String {
				n += e.Len()
			}
		}
		return n
	}
	return 0
}

var bigWidthRE = regexp.MustCompile(`[0-9]{7,}`)

func sizeErrorf(format string, args ...any) error {
	return &limitError{kind: ErrTemplateSize, msg: fmt.Sprintf(format, args...)}
}

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
			return sizeErrorf("%s: argument %d is above the limit %d", name, a.Integer(), MaxRenderedSize)
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
			return sizeErrorf("%s: field widths above 6 digits are refused", name)
		}
	case "tojson":
		for _, a := range all {
			if a.IsInteger() && a.Integer() > 16 {
				return sizeErrorf("tojson: indent above 16 is refused")
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

// safeFilters wraps the allowed filters with the size checks. A refusal is
// recorded in the render's budget (found in the evaluator's context), so
// the render fails with it, whatever gonja makes of the error value.
var safeFilters = sync.OnceValue(func() *exec.FilterSet {
	m := map[string]exec.FilterFunction{}
	for _, name := range allowedFilters {
		f, ok := builtins.Filters.Get(name)
		if !ok {
			continue
		}
		m[name] = func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
			b := budgetOf(e.Environment.Context)
			if err := checkCall(name, in, params); err != nil {
				return exec.AsValue(b.fail(0, 0, err))
			}
			what := "filter " + name
			n := stepWork + workOf(in) + argsWork(params)
			if seqFilters[name] && in.IsString() {
				n += stepWork * len(in.String()) // one value per character
			}
			if err := b.charge(0, 0, what, n); err != nil {
				return exec.AsValue(err)
			}
			out := f(e, in, params)
			if n := sizeOf(out); n > MaxRenderedSize {
				return exec.AsValue(b.fail(0, 0, errTooLarge(name+" result", n)))
			}
			if err := b.charge(0, 0, what, workOf(out)); err != nil {
				return exec.AsValue(err)
			}
			return out
		}
	}
	return exec.NewFilterSet(m)
})

// seqFilters iterate their input item by item, building a value per
// item: a string's per character.
var seqFilters = map[string]bool{
	"batch": true, "dictsort": true, "groupby": true, "items": true, "join": true, "list": true,
	"map": true, "max": true, "min": true, "reject": true, "rejectattr": true, "reverse": true,
	"select": true, "selectattr": true, "slice": true, "sort": true, "sum": true, "unique": true,
}

// argsWork is the work of reading the arguments of a call.
func argsWork(params *exec.VarArgs) int {
	if params == nil {
		return 0
	}
	n := 0
	for _, a := range params.Args {
		n += workOf(a)
	}
	for _, a := range params.KwArgs {
		n += workOf(a)
	}
	return n
}

// allowedTests are gonja's tests; all of them read their input only.
var allowedTests = []string{
	"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
	"filter", "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=",
	"lower", "lt", "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas",
	"sequence", "string", "test", "true", "undefined", "upper",
}

// safeTests wraps gonja's tests with the work charge of their input and
// arguments (x is lower scans x; x is in y scans y).
var safeTests = sync.OnceValue(func() *exec.TestSet {
	m := map[string]exec.TestFunction{}
	for _, name := range allowedTests {
		t, ok := builtins.Tests.Get(name)
		if !ok {
			continue
		}
		var call func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) (bool, error)
		switch t := t.(type) {
		case func(*exec.Context, *exec.Value, *exec.VarArgs) (bool, error):
			call = func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) (bool, error) {
				return t(e.Environment.Context, in, params)
			}
		case func(*exec.Evaluator, *exec.Value, *exec.VarArgs) (bool, error):
			call = t
		default:
			continue // a test of another form: not available
		}
		m[name] = func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) (bool, error) {
			if err := budgetOf(e.Environment.Context).charge(0, 0, "test "+name, stepWork+workOf(in)+argsWork(params)); err != nil {
				return false, err
			}
			return call(e, in, params)
		}
	}
	return exec.NewTestSet(m)
})

// budgetOf returns the budget of the render a context belongs to; a
// budget of its own when there is none (it records, and nobody reads it).
func budgetOf(ctx *exec.Context) *budget {
	if ctx != nil {
		if v, ok := ctx.Get(budgetVar); ok {
			if b, ok := v.(*budget); ok {
				return b
			}
		}
	}
	return &budget{}
}

var allowedStrMethods = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
	"format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isprintable",
	"isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix",
	"replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
	"swapcase", "title", "upper", "zfill",
}

// guardMethods wraps the allowed methods with the size checks. Methods see
// no context: cur returns the budget of the render running (a renderer
// renders one template at a time), where refusals are recorded.
func guardMethods[I any](set *exec.MethodSet[I], names []string, cur func() *budget) *exec.MethodSet[I] {
	m := map[string]exec.Method[I]{}
	for _, name := range names {
		f, ok := set.Get(name)
		if !ok {
			continue
		}
		m[name] = func(self I, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			if err := checkCall(name, selfValue, args); err != nil {
				return nil, cur().fail(0, 0, err)
			}
			// gonja converted a dict or list receiver to Go values
			// already, which costs about its size: charged here
			what := "method " + name
			if err := cur().charge(0, 0, what, stepWork+workOf(selfValue)+argsWork(args)); err != nil {
				return nil, err
			}
			out, err := f(self, selfValue, args)
			if s, ok := out.(string); ok && len(s) > MaxRenderedSize {
				return nil, cur().fail(0, 0, errTooLarge(name+" result", len(s)))
			}
			if out != nil {
				if err := cur().charge(0, 0, what, workOf(exec.AsValue(out))); err != nil {
					return nil, err
				}
			}
			return out, err
		}
	}
	return exec.NewMethodSet(m)
}

// safeMethods returns the allowed methods, recording into cur().
func safeMethods(cur func() *budget) exec.Methods {
	bm := builtins.Methods
	return exec.Methods{
		Bool:  guardMethods(bm.Bool, []string{"string", "int", "bit_length", "bit_count", "as_integer_ratio"}, cur),
		Int:   guardMethods(bm.Int, []string{"is_integer", "bit_length", "bit_count", "as_integer_ratio"}, cur),
		Float: guardMethods(bm.Float, []string{"is_integer", "as_integer_ratio", "hex"}, cur),
		Str:   guardMethods(bm.Str, allowedStrMethods, cur),
		Dict:  guardMethods(bm.Dict, []string{"keys", "values", "items", "get", "pop", "setdefault", "update", "copy", "clear"}, cur),
		List:  guardMethods(bm.List, []string{"append", "reverse", "copy"}, cur),
	}
}
