package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	cuejson "cuelang.org/go/encoding/json"
	cueyaml "cuelang.org/go/encoding/yaml"

	"github.com/fleetwave/fleetwave"
)

// newContext returns a fresh CUE context.
func newContext() (*cue.Context, error) {
	return cuecontext.New(), nil
}

// parseFile parses one object file into a CUE file of plain data. It returns
// FileErrors (never a plain error) for syntax errors and for CUE that is not
// plain data.
//
// Parsing is bounded: nesting deeper than MaxNestingDepth is refused (before
// the recursive CUE parser runs, for CUE and JSON), and so is a YAML file
// whose aliases expand to more than maxSize bytes of data. A file that is
// not UTF-8 is refused at its first invalid byte, and a YAML file with a
// carriage return outside a CRLF at that character. A YAML mapping key that
// YAML reads as a number, a boolean or null (0123, 1.5, true, ~) is refused
// with a hint to quote it: CUE would make another string of it (0o123,
// null), a label or a name nobody wrote (yamlKeyErrors). Every error is
// positioned at the offending token (see "Positions" in doc.go).
func parseFile(p string, data []byte, maxSize int64) (*ast.File, []fleetwave.FileError) {
	if errs := checkUTF8(p, data); len(errs) > 0 {
		return nil, errs
	}
	switch path.Ext(p) {
	case ".cue":
		if errs := checkTokenDepth(p, data); len(errs) > 0 {
			return nil, errs
		}
		f, err := parser.ParseFile(p, data)
		if err != nil {
			return nil, syntaxErrors(p, "CUE", data, err)
		}
		if errs := checkPlainData(p, f); len(errs) > 0 {
			return nil, errs
		}
		return f, nil
	case ".yaml", ".yml":
		if fe, ok := yamlLoneCR(p, data); ok {
			return nil, []fleetwave.FileError{fe}
		}
		// CUE's decoder copies every alias into a fresh subtree: measure the
		// expanded size first, without expanding, when the file has aliases.
		if bytes.IndexByte(data, '*') >= 0 && bytes.IndexByte(data, '&') >= 0 {
			if size, ok := yamlExpandedSize(data); ok && size > maxSize {
				return nil, []fleetwave.FileError{{Path: p, Line: 1, Col: 1, Msg: fmt.Sprintf("YAML aliases expand this file to about %d bytes, expected at most %d (the file size limit)", size, maxSize)}}
			}
		}
		f, err := cueyaml.Extract(p, data)
		if err != nil && strings.Contains(err.Error(), "invalid label") {
			// a negative number as a key: say so as for the other
			// numbers (yamlKeyErrors)
			if errs := yamlKeyErrors(p, data, nil); len(errs) > 0 {
				return nil, errs
			}
		}
		if err != nil {
			// go-yaml's syntax errors reach us as text without a usable
			// position; CUE's own errors (after go-yaml parsed) have one.
			if !hasPosition(p, err) {
				if fe, ok := yamlSyntaxError(p, data); ok {
					return nil, []fleetwave.FileError{fe}
				}
				if fe, ok := yamlConversionError(p, data, err); ok {
					return nil, []fleetwave.FileError{fe}
				}
			}
			return nil, syntaxErrors(p, "YAML", data, err)
		}
		if errs := checkTree(p, f, maxSize); len(errs) > 0 {
			return nil, errs
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, []fleetwave.FileError{{Path: p, Line: 1, Col: 1, Msg: "empty file, expected one object (a mapping with kind and name)"}}
		}
		if len(f.Decls) == 1 {
			if e, ok := f.Decls[0].(*ast.EmbedDecl); ok {
				if emptyYAML(e.Expr) {
					return nil, []fleetwave.FileError{{Path: p, Line: 1, Col: 1, Msg: "empty file (comments only), expected one object (a mapping with kind and name)"}}
				}
				// CUE's decoder returns a stream of several documents as a
				// list without brackets; a YAML sequence has its bracket.
				if l, ok := e.Expr.(*ast.ListLit); ok && !l.Lbrack.IsValid() && len(l.Elts) > 1 {
					// at the second document: the first may well be the
					// object; at its "---" when it is empty
					pos := l.Elts[1].Pos()
					fe := posError(p, pos, "found "+strconv.Itoa(len(l.Elts))+" YAML documents, expected one object (a mapping with kind and name)")
					if start := pos.Offset() - (fe.Col - 1); fe.Line > 0 && start >= 0 && bytes.HasPrefix(data[start:], []byte("---")) {
						fe.Col = 1
					}
					return nil, []fleetwave.FileError{fe}
				}
				what := "a single value"
				if _, ok := e.Expr.(*ast.ListLit); ok {
					what = "a list"
				}
				return nil, []fleetwave.FileError{posError(p, e.Pos(), "found "+what+", expected one object (a mapping with kind and name)")}
			}
		}
		if errs := yamlKeyErrors(p, data, f); len(errs) > 0 {
			return nil, errs
		}
		return f, nil
	case ".json":
		if errs := checkTokenDepth(p, data); len(errs) > 0 {
			return nil, errs
		}
		x, err := cuejson.Extract(p, data)
		if err != nil {
			return nil, syntaxErrors(p, "JSON", data, err)
		}
		s, ok := x.(*ast.StructLit)
		if !ok {
			return nil, []fleetwave.FileError{posError(p, x.Pos(), "found a JSON value that is not an object, expected one object with kind and name")}
		}
		quoteLabels(s, data)
		return &ast.File{Filename: p, Decls: s.Elts}, nil
	}
	return nil, []fleetwave.FileError{{Path: p, Msg: "unsupported file extension, expected .cue, .yaml, .yml or .json"}}
}

// quoteLabels moves the position of every JSON field name written as a CUE
// identifier back to its opening quote: CUE's JSON decoder turns "kind"
// into the identifier kind positioned at its first letter, one column
// right of where the token starts, while string values (and the quoted
// names YAML and CUE files keep) are positioned at their quote. The tree
// is at most MaxNestingDepth deep (checkTokenDepth ran first).
func quoteLabels(n ast.Node, data []byte) {
	ast.Walk(n, func(n ast.Node) bool {
		if f, ok := n.(*ast.Field); ok {
			if id, ok := f.Label.(*ast.Ident); ok && id.NamePos.IsValid() {
				if off := id.NamePos.Offset(); off > 0 && off <= len(data) && data[off-1] == '"' {
					id.NamePos = id.NamePos.Add(-1)
				}
			}
		}
		return true
	}, nil)
}

// lineInMsg matches the "file:line: " prefix YAML syntax errors carry in
// their message instead of a position.
var lineInMsg = regexp.MustCompile(`^[^:]*:(\d+):(?:(\d+):)? ?`)

// emptyYAML reports whether x is what CUE's YAML decoder returns for a
// stream without a document (comments only): *null | _.
func emptyYAML(x ast.Expr) bool {
	b, ok := x.(*ast.BinaryExpr)
	if !ok || b.Op != token.OR {
		return false
	}
	u, ok := b.X.(*ast.UnaryExpr)
	if !ok || u.Op != token.MUL {
		return false
	}
	lit, ok := u.X.(*ast.BasicLit)
	return ok && lit.Kind == token.NULL
}

// hasPosition reports whether a CUE error has a position in file p.
func hasPosition(p string, err error) bool {
	for _, e := range cueerrors.Errors(err) {
		for _, pos := range cueerrors.Positions(e) {
			if pos.Filename() == p && pos.Line() > 0 {
				return true
			}
		}
	}
	return false
}

// syntaxErrors converts the syntax errors of CUE's decoders for file p
// (data) into FileErrors of format ("CUE", "YAML", "JSON").
func syntaxErrors(p, format string, data []byte, err error) []fleetwave.FileError {
	var out []fleetwave.FileError
	for _, e := range cueerrors.Errors(err) {
		msg := cueMsg(e)
		if strings.TrimSpace(msg) == "" || strings.HasPrefix(msg, "invalid JSON for file") {
			msg = e.Error()
		}
		fe := fleetwave.FileError{Path: p}
		for _, pos := range cueerrors.Positions(e) {
			if pos.Filename() == p && pos.Line() > 0 {
				fe.Line, fe.Col = pos.Line(), pos.Column()
				if format != "YAML" && pos.Offset() == len(data) {
					// At the end of the file ("found 'EOF'"). CUE's
					// scanner records no line starting at the end of the
					// file, so after a final '\n' it reports the last
					// line, one column past that newline; the end of such
					// a file is the start of the next line.
					fe.Line, fe.Col = lineCol(data, len(data))
				}
				break
			}
		}
		msg = strings.TrimPrefix(msg, "invalid JSON for file \""+p+"\": ")
		if m := lineInMsg.FindStringSubmatch(msg); m != nil && strings.HasPrefix(msg, p+":") {
			if fe.Line == 0 {
				fe.Line, _ = strconv.Atoi(m[1])
				if m[2] != "" {
					fe.Col, _ = strconv.Atoi(m[2])
				}
			}
			msg = msg[len(m[0]):]
		}
		// go-yaml's errors without a line name the file in their text
		msg = strings.TrimPrefix(msg, p+": ")
		fe.Msg = "invalid " + format + ": " + msg
		out = append(out, fe)
	}
	if len(out) == 0 {
		out = append(out, fleetwave.FileError{Path: p, Msg: "invalid " + format + ": " + err.Error()})
	}
	return out
}

func cueMsg(e cueerrors.Error) string {
	format, args := e.Msg()
	return fmt.Sprintf(format, args...)
}

func posError(p string, pos token.Pos, msg string) fleetwave.FileError {
	fe := fleetwave.FileError{Path: p, Msg: msg}
	if pos.IsValid() && pos.Filename() == p {
		fe.Line, fe.Col = pos.Line(), pos.Column()
	}
	return fe
}

// checkPlainData accepts CUE files made of fields, structs, lists and
// literals only. References, comprehensions, imports, interpolations and
// operators are refused: an object file is data, and refusing expressions
// keeps evaluation bounded by the file size (a chain of references or
// interpolations can grow exponentially).
func checkPlainData(p string, f *ast.File) []fleetwave.FileError {
	var errs []fleetwave.FileError
	refuse := func(n ast.Node, what string) {
		errs = append(errs, posError(p, n.Pos(), "found "+what+", expected plain data (fields, structs, lists, literals)"))
	}
	var expr func(x ast.Expr)
	var decls func(ds []ast.Decl)
	decls = func(ds []ast.Decl) {
		for _, d := range ds {
			switch d := d.(type) {
			case *ast.Package, *ast.CommentGroup, *ast.Attribute:
			case *ast.Field:
				switch l := d.Label.(type) {
				case *ast.Ident:
				case *ast.BasicLit:
					if l.Kind != token.STRING {
						refuse(l, "a non-string label")
					}
				default:
					refuse(d.Label, "a computed or aliased label")
					continue
				}
				if d.Constraint != token.ILLEGAL {
					refuse(d, "an optional or required field marker")
				}
				expr(d.Value)
			case *ast.ImportDecl:
				refuse(d, "an import")
			case *ast.EmbedDecl:
				refuse(d, "an embedded value")
			case *ast.Comprehension:
				refuse(d, "a comprehension")
			default:
				refuse(d, "a declaration that is not a field")
			}
		}
	}
	expr = func(x ast.Expr) {
		switch x := x.(type) {
		case *ast.BasicLit:
		case *ast.StructLit:
			decls(x.Elts)
		case *ast.ListLit:
			for _, e := range x.Elts {
				expr(e)
			}
		case *ast.UnaryExpr:
			if _, ok := x.X.(*ast.BasicLit); !ok || (x.Op != token.SUB && x.Op != token.ADD) {
				refuse(x, "an expression")
			}
		case *ast.ParenExpr:
			expr(x.X)
		case *ast.Ident:
			refuse(x, "a reference ("+x.Name+")")
		case *ast.Interpolation:
			refuse(x, "a string interpolation")
		case *ast.Comprehension:
			refuse(x, "a comprehension")
		default:
			refuse(x, "an expression")
		}
	}
	decls(f.Decls)
	return errs
}

// Normalize returns the canonical form of one object file: JSON with sorted
// keys and no defaults applied, so that two files meaning the same thing
// (a YAML file and its JSON or CUE twin, or the same file reformatted) give
// the same bytes. Its hex sha256 is Object.Hash, the content that drives
// generations. It returns an error when the file does not parse or is not
// plain, concrete data; it does not check the schema.
//
// A file in the plainest form of its format (plainData: nearly every file
// of a large tree) is the canonical JSON of its data, written without CUE:
// the hub hashes every object file of a commit it has not seen, and at
// 100,000 nodes CUE took 11 s of a hub's first sync for it.
// TestNormalizeOfPlainFilesIsCUEs and FuzzNormalize hold the two to the
// same bytes.
func Normalize(p string, data []byte) (out []byte, err error) {
	if m, ok := plainData(p, data); ok {
		if out, ok := appendCanonical(nil, m); ok {
			return out, nil
		}
	}
	return normalizeCUE(p, data)
}

// normalizeCUE is Normalize through CUE's parser and evaluator.
func normalizeCUE(p string, data []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("normalize %s: internal error: %v", p, r)
		}
	}()
	f, errs := parseFile(p, data, DefaultMaxFileSize)
	if len(errs) > 0 {
		return nil, fmt.Errorf("normalize: %w", &fleetwave.ValidationError{Errors: errs})
	}
	ctx, err := newContext()
	if err != nil {
		return nil, err
	}
	v := ctx.BuildFile(f)
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return nil, fmt.Errorf("normalize %s: %w", p, err)
	}
	raw, err := v.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("normalize %s: %w", p, err)
	}
	return canonicalJSON(raw)
}

// canonicalJSON re-encodes JSON with object keys sorted and numbers kept as
// written.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
