package schema

import (
	"fmt"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/scanner"
	"cuelang.org/go/cue/token"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave"
)

// Limits that keep parsing and evaluation of one file bounded. The parsers
// of CUE and gonja recurse once per nesting level without a limit of their
// own (CUE's only bounds expressions, not `a: a: a: ...` chains): a deeply
// nested file of well under 1 MiB ends the process with a fatal stack
// overflow, which no recover catches. Real objects nest less than 10 levels.
const (
	// MaxNestingDepth bounds the nesting of an object file: each struct,
	// list and field label counts as one level.
	MaxNestingDepth = 100
	// MaxTemplateSize bounds a block_config_template, in bytes.
	MaxTemplateSize = 64 << 10
	// maxTemplateDepth bounds the bracket nesting inside template tags.
	maxTemplateDepth = 100
)

func depthError(p string, pos token.Pos) []fleetwave.FileError {
	return []fleetwave.FileError{posError(p, pos, fmt.Sprintf("nesting deeper than %d levels, expected a flatter object", MaxNestingDepth))}
}

// checkTokenDepth scans CUE or JSON source (JSON is CUE syntax) with CUE's
// scanner, which does not recurse, and refuses nesting deeper than
// MaxNestingDepth before the recursive parser sees the file. A field label
// opens a level that the next comma (or newline) closes, so `a: b: c: 1`
// is three levels deep like `{"a": {"b": {"c": 1}}}` is six.
func checkTokenDepth(p string, data []byte) []fleetwave.FileError {
	f := token.NewFile(p, 0, len(data))
	var s scanner.Scanner
	s.Init(f, data, nil, 0)
	// labels[i] counts the open field labels of bracket level i.
	labels := []int{0}
	depth := 0
	for {
		pos, tok, _ := s.Scan()
		switch tok {
		case token.EOF:
			return nil
		case token.LBRACE, token.LBRACK, token.LPAREN:
			depth++
			labels = append(labels, 0)
		case token.RBRACE, token.RBRACK, token.RPAREN:
			if len(labels) > 1 {
				depth -= 1 + labels[len(labels)-1]
				labels = labels[:len(labels)-1]
			}
		case token.COLON:
			depth++
			labels[len(labels)-1]++
		case token.COMMA:
			depth -= labels[len(labels)-1]
			labels[len(labels)-1] = 0
		}
		if depth > MaxNestingDepth {
			return depthError(p, pos)
		}
	}
}

// checkTree walks a file parsed from YAML without recursion and refuses
// nesting deeper than MaxNestingDepth and data larger than maxSize once
// aliases are expanded (CUE's YAML decoder copies each alias into a fresh
// subtree and bounds their number, but not their size: one 500 KiB string
// aliased 2,000 times would become 1 GB of data).
//
// It also repairs the one literal CUE's decoder writes wrongly: a float
// written as an integer, in particular an integer too large for 64 bits
// (go-yaml resolves it as a float) but also `!!float 3`, becomes the
// literal text "number & <digits>" (meant as "any number equal to it"),
// which CUE then fails to parse, with a message naming neither the field
// nor a limit. Written as the integer literal it is (YAML 1.2's core
// schema reads 99999999999999999999999 as an integer), it meets the
// schema's bound (#Int) and is reported as out of range like any other
// number.
func checkTree(p string, f *ast.File, maxSize int64) []fleetwave.FileError {
	type item struct {
		n     ast.Node
		depth int
	}
	stack := make([]item, 0, 64)
	for _, d := range f.Decls {
		stack = append(stack, item{d, 1})
	}
	var size int64
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > MaxNestingDepth {
			return depthError(p, it.n.Pos())
		}
		size += 8 // the node itself, roughly as its text
		switch n := it.n.(type) {
		case *ast.Field:
			if l, ok := n.Label.(*ast.BasicLit); ok {
				size += int64(len(l.Value))
			} else if l, ok := n.Label.(*ast.Ident); ok {
				size += int64(len(l.Name))
			}
			stack = append(stack, item{n.Value, it.depth + 1})
		case *ast.StructLit:
			for _, e := range n.Elts {
				stack = append(stack, item{e, it.depth + 1})
			}
		case *ast.ListLit:
			for _, e := range n.Elts {
				stack = append(stack, item{e, it.depth + 1})
			}
		case *ast.EmbedDecl:
			stack = append(stack, item{n.Expr, it.depth})
		case *ast.UnaryExpr:
			stack = append(stack, item{n.X, it.depth})
		case *ast.BasicLit:
			size += int64(len(n.Value))
			if num, ok := strings.CutPrefix(n.Value, "number & "); ok && n.Kind == token.FLOAT {
				num = strings.TrimPrefix(num, "+")
				if isDigits(strings.TrimPrefix(num, "-")) {
					n.Kind, n.Value = token.INT, num
				}
			}
		}
		if size > maxSize {
			fe := posError(p, it.n.Pos(), fmt.Sprintf("data expands to more than %d bytes (through YAML aliases), expected at most the file size limit", maxSize))
			if fe.Line == 0 {
				fe.Line, fe.Col = 1, 1
			}
			return []fleetwave.FileError{fe}
		}
	}
	return nil
}

// isDigits reports whether s is a decimal integer literal: ASCII digits,
// with single underscores between them (YAML 1.1 and CUE both allow
// 1_000_000).
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i > 0 && i < len(s)-1 && s[i-1] != '_' {
			continue
		}
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// yamlExpandedSize returns an estimate of the size of a YAML document once
// its aliases are expanded, computed on go-yaml's node graph, where an alias
// is a pointer to its anchor, so nothing is expanded. ok is false when the
// document does not parse (CUE's decoder then reports the syntax error).
func yamlExpandedSize(data []byte) (size int64, ok bool) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return 0, false
	}
	memo := map[*yaml.Node]int64{}
	var walk func(n *yaml.Node, depth int) int64
	walk = func(n *yaml.Node, depth int) int64 {
		if n == nil || depth > 2*MaxNestingDepth {
			return 0
		}
		if s, seen := memo[n]; seen {
			return s
		}
		memo[n] = 0 // an alias cycle counts once
		s := int64(8 + len(n.Value))
		if n.Kind == yaml.AliasNode {
			s += walk(n.Alias, depth+1)
		}
		for _, c := range n.Content {
			s += walk(c, depth+1)
			if s > 1<<40 {
				break
			}
		}
		memo[n] = s
		return s
	}
	return walk(&doc, 0), true
}

// templateControls are the control structures a block_config_template may
// use: the same set the reconciler's sandbox renders with (no include,
// import, from, extends or block: file access; no macro or call: unbounded
// recursion).
var templateControls = func() *exec.ControlStructureSet {
	m := map[string]parser.ControlStructureParser{}
	for _, n := range []string{"if", "for", "set", "with", "filter", "raw", "autoescape", "break", "continue"} {
		if p, ok := builtins.ControlStructures.Get(n); ok {
			m[n] = p
		}
	}
	return exec.NewControlStructureSet(m)
}()

// checkTemplate parses a Jinja2 template with gonja, without rendering it,
// and returns a message for the first problem ("" when it parses).
func checkTemplate(src string) (msg string) {
	if len(src) > MaxTemplateSize {
		return fmt.Sprintf("template is %d bytes, expected at most %d", len(src), MaxTemplateSize)
	}
	cfg := config.New()
	// gonja's expression parser recurses once per bracket: bound the depth
	// on the (non-recursive) lexer's tokens first.
	stream := tokens.LexAll(src, cfg)
	depth := 0
	for tok := stream.Current(); tok != nil && !stream.End(); tok = stream.Next() {
		switch tok.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
			if depth > maxTemplateDepth {
				return fmt.Sprintf("expressions nested deeper than %d levels (line %d col %d)", maxTemplateDepth, tok.Line, tok.Col)
			}
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
		}
	}
	defer func() {
		if r := recover(); r != nil {
			msg = cutText(fmt.Sprint(r))
		}
	}()
	_, err := parser.NewParser("block_config_template", tokens.LexAll(src, cfg), cfg, nil, templateControls).Parse()
	if err != nil {
		return cutText(err.Error())
	}
	return ""
}

// cutText keeps messages short: gonja errors may quote the template.
func cutText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
