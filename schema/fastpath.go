package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/fleetwave/fleetwave"
)

// The fast path of the per-file checks (see "The fast path" in doc.go).
//
// It accepts a file only when all of these hold:
//
//   - its data is plain data of the simple forms plainFile (or, for JSON,
//     plainJSON) decodes: double-quoted strings, canonical integers,
//     booleans, structs and lists, ASCII labels, no duplicate fields; so
//     its values are exactly the ones CUE would compile;
//   - the shape of its kind accepts it, and its name matches the file;
//   - the Go checks (checkObject) find nothing.
//
// Anything else goes through the CUE path unchanged, which reports the
// errors: the fast path only ever says "valid", never what is wrong. The
// shape compiler refuses every construct of the schema it does not model
// exactly (defaults, embeddings, open structs, regular fields in
// definitions, builtins, ...): the kind then has no fast path.

// shape is a compiled CUE constraint: accepts reports whether a concrete
// plain value certainly satisfies it. A false answer means "not sure":
// the caller then asks CUE.
type shape interface {
	accepts(v any) bool
}

type (
	anyString  struct{}
	anyInt     struct{}
	anyNumber  struct{}
	anyBool    struct{}
	stringLit  string
	intLit     int64
	matchShape struct {
		re     *regexp.Regexp
		negate bool // !~
	}
	notString  string // != "..."
	boundShape struct {
		op    token.Token // >=, <=, >, <
		limit int64
	}
	allOf      []shape
	oneOf      []shape
	listShape  struct{ elem shape }
	fieldShape struct {
		shape    shape
		required bool
	}
	// structShape is a closed struct: the fields of the definition and an
	// optional [string] pattern that every field, declared or not, must
	// satisfy.
	structShape struct {
		fields  map[string]fieldShape
		pattern shape
	}
)

func (anyString) accepts(v any) bool { _, ok := v.(string); return ok }
func (anyInt) accepts(v any) bool    { _, ok := v.(int64); return ok }
func (anyNumber) accepts(v any) bool { _, ok := v.(int64); return ok }
func (anyBool) accepts(v any) bool   { _, ok := v.(bool); return ok }
func (s stringLit) accepts(v any) bool {
	x, ok := v.(string)
	return ok && x == string(s)
}
func (s intLit) accepts(v any) bool {
	x, ok := v.(int64)
	return ok && x == int64(s)
}
func (s matchShape) accepts(v any) bool {
	x, ok := v.(string)
	return ok && s.re.MatchString(x) != s.negate
}
func (s notString) accepts(v any) bool {
	x, ok := v.(string)
	return ok && x != string(s)
}
func (s boundShape) accepts(v any) bool {
	x, ok := v.(int64)
	if !ok {
		return false
	}
	switch s.op {
	case token.GEQ:
		return x >= s.limit
	case token.LEQ:
		return x <= s.limit
	case token.GTR:
		return x > s.limit
	case token.LSS:
		return x < s.limit
	}
	return false
}
func (s allOf) accepts(v any) bool {
	for _, c := range s {
		if !c.accepts(v) {
			return false
		}
	}
	return true
}
func (s oneOf) accepts(v any) bool {
	for _, c := range s {
		if c.accepts(v) {
			return true
		}
	}
	return false
}
func (s listShape) accepts(v any) bool {
	l, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range l {
		if !s.elem.accepts(e) {
			return false
		}
	}
	return true
}
func (s *structShape) accepts(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for name, f := range s.fields {
		if _, present := m[name]; f.required && !present {
			return false
		}
	}
	for k, x := range m {
		f, declared := s.fields[k]
		if !declared && s.pattern == nil {
			return false // closed
		}
		if declared && !f.shape.accepts(x) {
			return false
		}
		if s.pattern != nil && !s.pattern.accepts(x) {
			return false
		}
	}
	return true
}

// predeclared are the identifiers the shape compiler resolves to types.
var predeclared = map[string]bool{"string": true, "int": true, "number": true, "bool": true}

// errUnsupported marks a schema construct the shape compiler does not model.
var errUnsupported = errors.New("not modelled by the fast path")

// shapeCompiler compiles the definitions of the schema source into shapes.
type shapeCompiler struct {
	defs     map[string]ast.Expr // top-level definitions by name (#Node)
	done     map[string]shape
	visiting map[string]bool
}

// compileShapes returns the shape of each kind without defaults whose
// definition the compiler models completely.
func compileShapes(src []byte) (map[fleetwave.Kind]shape, error) {
	f, err := parser.ParseFile("schema/cue/"+SchemaFile, src)
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	c := &shapeCompiler{defs: map[string]ast.Expr{}, done: map[string]shape{}, visiting: map[string]bool{}}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok {
			if name, _, err := ast.LabelName(fd.Label); err == nil && predeclared[name] {
				// A field named string (or int, ...) shadows the type in
				// every definition below it.
				return map[fleetwave.Kind]shape{}, nil
			}
			if id, ok := fd.Label.(*ast.Ident); ok && strings.HasPrefix(id.Name, "#") {
				if _, dup := c.defs[id.Name]; dup {
					// Two declarations unify: not modelled.
					c.defs[id.Name] = nil
					continue
				}
				c.defs[id.Name] = fd.Value
			}
		}
	}
	out := map[fleetwave.Kind]shape{}
	for kind, names := range definitions {
		if names[1] != "" {
			continue // defaults are applied by CUE
		}
		s, err := c.def(names[0])
		if errors.Is(err, errUnsupported) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if _, ok := s.(*structShape); ok {
			out[kind] = s
		}
	}
	return out, nil
}

func (c *shapeCompiler) def(name string) (shape, error) {
	if s, ok := c.done[name]; ok {
		return s, nil
	}
	x, ok := c.defs[name]
	if !ok || x == nil || c.visiting[name] {
		return nil, fmt.Errorf("%s: %w", name, errUnsupported)
	}
	c.visiting[name] = true
	defer delete(c.visiting, name)
	s, err := c.expr(x)
	if err != nil {
		return nil, err
	}
	c.done[name] = s
	return s, nil
}

func unsupported(n ast.Node) error {
	return fmt.Errorf("%v: %T: %w", n.Pos(), n, errUnsupported)
}

// composite reports whether s constrains a struct or list (closedness and
// element checks do not distribute over & and | the way scalars do).
func composite(s shape) bool {
	switch s := s.(type) {
	case *structShape, listShape:
		return true
	case allOf:
		for _, x := range s {
			if composite(x) {
				return true
			}
		}
	case oneOf:
		for _, x := range s {
			if composite(x) {
				return true
			}
		}
	}
	return false
}

func (c *shapeCompiler) expr(x ast.Expr) (shape, error) {
	switch x := x.(type) {
	case *ast.ParenExpr:
		return c.expr(x.X)
	case *ast.Ident:
		switch x.Name {
		case "string":
			return anyString{}, nil
		case "int":
			return anyInt{}, nil
		case "number":
			return anyNumber{}, nil
		case "bool":
			return anyBool{}, nil
		}
		if strings.HasPrefix(x.Name, "#") {
			return c.def(x.Name)
		}
	case *ast.BasicLit:
		switch x.Kind {
		case token.STRING:
			if s, ok := plainString(x.Value); ok {
				return stringLit(s), nil
			}
		case token.INT:
			if n, ok := plainInt(x.Value); ok {
				return intLit(n), nil
			}
		}
	case *ast.UnaryExpr:
		lit, ok := x.X.(*ast.BasicLit)
		if !ok {
			break
		}
		switch x.Op {
		case token.MAT, token.NMAT:
			s, ok := plainString(lit.Value)
			if !ok || lit.Kind != token.STRING {
				break
			}
			re, err := regexp.Compile(s)
			if err != nil {
				break
			}
			return matchShape{re: re, negate: x.Op == token.NMAT}, nil
		case token.NEQ:
			if s, ok := plainString(lit.Value); ok && lit.Kind == token.STRING {
				return notString(s), nil
			}
		case token.GEQ, token.LEQ, token.GTR, token.LSS:
			if n, ok := plainInt(lit.Value); ok && lit.Kind == token.INT {
				return boundShape{op: x.Op, limit: n}, nil
			}
		}
	case *ast.BinaryExpr:
		l, err := c.expr(x.X)
		if err != nil {
			return nil, err
		}
		r, err := c.expr(x.Y)
		if err != nil {
			return nil, err
		}
		switch x.Op {
		case token.AND:
			if composite(l) && composite(r) {
				break
			}
			return allOf{l, r}, nil
		case token.OR:
			if composite(l) || composite(r) {
				break
			}
			return oneOf{l, r}, nil
		}
	case *ast.ListLit:
		if len(x.Elts) != 1 {
			break
		}
		if e, ok := x.Elts[0].(*ast.Ellipsis); ok && e.Type != nil {
			elem, err := c.expr(e.Type)
			if err != nil {
				return nil, err
			}
			return listShape{elem: elem}, nil
		}
	case *ast.StructLit:
		return c.structLit(x)
	}
	return nil, unsupported(x)
}

func (c *shapeCompiler) structLit(x *ast.StructLit) (shape, error) {
	s := &structShape{fields: map[string]fieldShape{}}
	for _, d := range x.Elts {
		if _, ok := d.(*ast.CommentGroup); ok {
			continue
		}
		f, ok := d.(*ast.Field)
		if !ok || f.Alias != nil || len(f.Attrs) > 0 {
			return nil, unsupported(d)
		}
		if l, ok := f.Label.(*ast.ListLit); ok {
			// [string]: X, the only pattern modelled.
			if s.pattern != nil || len(l.Elts) != 1 || f.Constraint != token.ILLEGAL {
				return nil, unsupported(d)
			}
			if id, ok := l.Elts[0].(*ast.Ident); !ok || id.Name != "string" {
				return nil, unsupported(d)
			}
			p, err := c.expr(f.Value)
			if err != nil {
				return nil, err
			}
			s.pattern = p
			continue
		}
		name, ok := plainLabel(f.Label)
		// A regular field of a definition exists even when the data lacks
		// it: not modelled, nor are duplicate declarations, nor fields that
		// shadow a predeclared type.
		if _, dup := s.fields[name]; !ok || dup || predeclared[name] || f.Constraint == token.ILLEGAL {
			return nil, unsupported(d)
		}
		fs, err := c.expr(f.Value)
		if err != nil {
			return nil, err
		}
		s.fields[name] = fieldShape{shape: fs, required: f.Constraint == token.NOT}
	}
	return s, nil
}

// plainString returns the value of a double-quoted CUE string literal, as
// CUE's compiler decodes it (cue/literal, like internal/core/compile).
func plainString(lit string) (string, bool) {
	q, n, _, err := literal.ParseQuotes(lit, lit)
	if err != nil || !q.IsDouble() {
		return "", false
	}
	s, err := q.Unquote(lit[n:])
	if err != nil || !utf8.ValidString(s) {
		return "", false
	}
	return s, true
}

// plainInt returns the value of a decimal integer literal written in its
// canonical form (no sign, no leading zeros, underscores or multipliers),
// which is also how CUE writes it back in JSON.
func plainInt(lit string) (int64, bool) {
	if lit == "" || len(lit) > 18 || (lit[0] == '0' && len(lit) > 1) {
		return 0, false
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] < '0' || lit[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	return n, err == nil
}

// plainLabel returns the name of a regular field label: an identifier
// that is neither hidden nor a definition, or a double-quoted string. Only
// ASCII names are taken: CUE normalizes string labels to NFC, which ASCII
// already is.
func plainLabel(l ast.Label) (string, bool) {
	var name string
	switch l := l.(type) {
	case *ast.Ident:
		name = l.Name
		if !ast.IsValidIdent(name) || strings.HasPrefix(name, "_") || strings.HasPrefix(name, "#") {
			return "", false
		}
	case *ast.BasicLit:
		if l.Kind != token.STRING {
			return "", false
		}
		s, ok := plainString(l.Value)
		if !ok {
			return "", false
		}
		name = s
	default:
		return "", false
	}
	return name, isASCII(name)
}

// plainFile returns the data of a parsed object file as plain Go values:
// map[string]any, []any, string, int64 and bool. ok is false for every
// form it does not decode exactly as CUE does (floats, null, bytes,
// non-canonical numbers, attributes, duplicate fields, which CUE unifies,
// ...).
func plainFile(f *ast.File) (map[string]any, bool) {
	return plainStruct(f.Decls)
}

func plainStruct(decls []ast.Decl) (map[string]any, bool) {
	m := make(map[string]any, len(decls))
	for _, d := range decls {
		switch d := d.(type) {
		case *ast.CommentGroup, *ast.Package:
			continue
		case *ast.Field:
			if d.Alias != nil || d.Constraint != token.ILLEGAL || len(d.Attrs) > 0 {
				return nil, false
			}
			name, ok := plainLabel(d.Label)
			if !ok {
				return nil, false
			}
			if _, dup := m[name]; dup {
				return nil, false
			}
			v, ok := plainExpr(d.Value)
			if !ok {
				return nil, false
			}
			m[name] = v
		default:
			return nil, false
		}
	}
	return m, true
}

func plainExpr(x ast.Expr) (any, bool) {
	switch x := x.(type) {
	case *ast.BasicLit:
		switch x.Kind {
		case token.STRING:
			return plainString(x.Value)
		case token.INT:
			return plainInt(x.Value)
		case token.TRUE:
			return true, true
		case token.FALSE:
			return false, true
		}
	case *ast.UnaryExpr:
		if lit, ok := x.X.(*ast.BasicLit); ok && x.Op == token.SUB && lit.Kind == token.INT && lit.Value != "0" {
			if n, ok := plainInt(lit.Value); ok {
				return -n, true
			}
		}
	case *ast.StructLit:
		return plainStruct(x.Elts)
	case *ast.ListLit:
		l := make([]any, 0, len(x.Elts))
		for _, e := range x.Elts {
			v, ok := plainExpr(e)
			if !ok {
				return nil, false
			}
			l = append(l, v)
		}
		return l, true
	}
	return nil, false
}

// fastCheck runs the fast path on the plain data of a file: it returns
// the object when the file is certainly valid, ok=false when CUE must
// decide.
func (v *Validator) fastCheck(p string, key fleetwave.ObjectKey, data map[string]any) (o *object, ok bool) {
	s := v.shapes[key.Kind()]
	if s == nil || !s.accepts(data) {
		return nil, false
	}
	if k, _ := data["kind"].(string); k != string(key.Kind()) {
		return nil, false
	}
	if name, _ := data["name"].(string); name != key.Name() {
		return nil, false
	}
	canon, ok := appendCanonical(make([]byte, 0, 512), data)
	if !ok {
		return nil, false
	}
	var obj any
	if key.Kind() == fleetwave.KindNode {
		if n, ok := nodeOf(data); ok {
			obj = n
		}
	}
	if obj == nil {
		obj = newObject(key.Kind())
		if err := json.Unmarshal(canon, obj); err != nil {
			return nil, false
		}
	}
	if errs := checkObject(p, cue.Value{}, obj); len(errs) > 0 {
		return nil, false
	}
	sum := sha256.Sum256(canon)
	return &object{path: p, key: key, obj: obj, hash: hex.EncodeToString(sum[:])}, true
}

// nodeOf is the Node that json.Unmarshal decodes from data's canonical
// JSON, built from data itself: nodes are nearly every file of a large
// tree, and decoding their JSON again took a tenth of the CPU of
// validating 100,000 of them. ok is false for a field or a value it does
// not take as Unmarshal would (the caller then decodes the JSON).
// TestNodeOfMatchesUnmarshal holds it to that.
func nodeOf(data map[string]any) (n *fleetwave.Node, ok bool) {
	n = &fleetwave.Node{}
	for k, v := range data {
		switch k {
		case "kind":
			_, ok = utf8String(v) // not a field of Node
		case "name":
			n.ID, ok = utf8String(v)
		case "organization":
			n.Organization, ok = utf8String(v)
		case "workspace":
			n.Workspace, ok = utf8String(v)
		case "criticality":
			var c string
			c, ok = utf8String(v)
			n.Criticality = fleetwave.Criticality(c)
		case "labels":
			n.Labels, ok = stringMap(v)
		case "data_addresses":
			n.DataAddresses, ok = stringMap(v)
		case "maintenance_windows":
			n.MaintenanceWindows, ok = stringList(v)
		case "capabilities":
			n.Capabilities, ok = stringList(v)
		case "drain":
			n.Drain, ok = v.(bool)
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
	}
	return n, true
}

// stringMap is a plain object of strings as json.Unmarshal decodes it
// into a map[string]string (never nil).
func stringMap(v any) (map[string]string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		s, ok := utf8String(x)
		if !ok || !utf8.ValidString(k) {
			return nil, false
		}
		out[k] = s
	}
	return out, true
}

// stringList is a plain list of strings as json.Unmarshal decodes it into
// a []string (never nil).
func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := utf8String(x)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// utf8String is v when it is a string that json.Unmarshal decodes from
// its canonical JSON unchanged (valid UTF-8; the plain decoders take no
// other).
func utf8String(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok && utf8.ValidString(s)
}

// maxPlainJSONDepth bounds the nesting plainJSON decodes: each level
// counts at most twice in checkTokenDepth (the bracket and the field
// label), so a file within it is within MaxNestingDepth too.
const maxPlainJSONDepth = MaxNestingDepth / 2

// plainJSON decodes a JSON object file straight from its bytes, without
// CUE's parser, when it uses only the forms whose CUE value is obvious:
// strings without escapes, canonical integers, booleans, objects with
// ASCII keys and no duplicates, arrays. ok is false for anything else,
// valid JSON or not; the file then takes the general path (parseFile).
func plainJSON(data []byte) (m map[string]any, ok bool) {
	d := jsonScanner{data: data}
	d.space()
	if d.peek() != '{' {
		return nil, false
	}
	m, ok = d.object(1)
	d.space()
	return m, ok && d.i == len(d.data)
}

type jsonScanner struct {
	data []byte
	i    int
}

func (d *jsonScanner) peek() byte {
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

func (d *jsonScanner) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonScanner) value(depth int) (any, bool) {
	switch c := d.peek(); {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.int()
	}
	return nil, false
}

func (d *jsonScanner) word(w string) bool {
	if !bytes.HasPrefix(d.data[d.i:], []byte(w)) {
		return false
	}
	d.i += len(w)
	return true
}

func (d *jsonScanner) int() (any, bool) {
	start := d.i
	if d.peek() == '-' {
		d.i++
	}
	digits := d.i
	for c := d.peek(); c >= '0' && c <= '9'; c = d.peek() {
		d.i++
	}
	n, ok := plainInt(string(d.data[digits:d.i]))
	switch {
	case !ok:
		return nil, false
	case digits > start: // negative
		return -n, n != 0
	}
	return n, true
}

// str decodes a string without escapes or control characters.
func (d *jsonScanner) str() (string, bool) {
	d.i++ // "
	start := d.i
	for d.i < len(d.data) {
		switch c := d.data[d.i]; {
		case c == '"':
			s := d.data[start:d.i]
			d.i++
			return string(s), utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return "", false
		}
		d.i++
	}
	return "", false
}

func (d *jsonScanner) object(depth int) (map[string]any, bool) {
	if depth > maxPlainJSONDepth {
		return nil, false
	}
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.peek() == '}' {
		d.i++
		return m, true
	}
	for {
		if d.peek() != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok || !isASCII(k) {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		d.space()
		if d.peek() != ':' {
			return nil, false
		}
		d.i++
		d.space()
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		m[k] = v
		d.space()
		switch d.peek() {
		case ',':
			d.i++
			d.space()
		case '}':
			d.i++
			return m, true
		default:
			return nil, false
		}
	}
}

func (d *jsonScanner) array(depth int) ([]any, bool) {
	if depth > maxPlainJSONDepth {
		return nil, false
	}
	d.i++ // [
	l := []any{}
	d.space()
	if d.peek() == ']' {
		d.i++
		return l, true
	}
	for {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		l = append(l, v)
		d.space()
		switch d.peek() {
		case ',':
			d.i++
			d.space()
		case ']':
			d.i++
			return l, true
		default:
			return nil, false
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
