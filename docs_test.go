package fleetwave_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestWalkNamesWhatExists: every Go name docs/walk.md gives in code
// font (pkg.Name, pkg.Type.Member) is declared in that package, every
// file it names exists, and every Lua function it names is defined in
// the engine's scripts: the walk cannot drift from the code unnoticed.
func TestWalkNamesWhatExists(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "walk.md"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{"fleetwave": ".", "schema": "schema", "gitsync": "gitsync", "reconciler": "reconciler",
		"engine": "engine", "hub": "hub", "agent": "agent", "api": "api"}
	decls := map[string]map[string]bool{}
	for pkg, dir := range dirs {
		decls[pkg] = declaredNames(t, dir)
	}
	spans := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(string(doc), -1)
	ident := regexp.MustCompile(`^([a-z]+)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?`)
	checked := 0
	for _, m := range spans {
		span := m[1]
		if strings.HasSuffix(span, ".lua") || (strings.Contains(span, "/") && (strings.HasSuffix(span, ".go") || strings.HasSuffix(span, ".cue"))) {
			path := span
			if strings.HasSuffix(span, ".lua") && !strings.Contains(span, "/") {
				path = filepath.Join("engine", "lua", span)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("docs/walk.md names %s: %v", span, err)
			}
			checked++
			continue
		}
		for _, part := range strings.Fields(strings.NewReplacer("→", " ", "(", " ", ",", " ").Replace(span)) {
			g := ident.FindStringSubmatch(part)
			if g == nil || strings.HasSuffix(part, ".cue") || strings.HasSuffix(part, ".go") || decls[g[1]] == nil {
				continue
			}
			checked++
			if !decls[g[1]][g[2]] && !decls[g[1]]["."+g[2]] {
				t.Errorf("docs/walk.md names %s: %s declares no %s", part, g[1], g[2])
			} else if g[3] != "" && !decls[g[1]][g[2]+"."+g[3]] {
				t.Errorf("docs/walk.md names %s: %s.%s has no member %s", part, g[1], g[2], g[3])
			}
		}
	}
	lua := ""
	for _, f := range must(filepath.Glob(filepath.Join("engine", "lua", "*.lua"))) {
		lua += string(must(os.ReadFile(f)))
	}
	for _, m := range regexp.MustCompile("`([a-z_]+)` \\(`[a-z_]+\\.lua`\\)").FindAllStringSubmatch(string(doc), -1) {
		checked++
		if !strings.Contains(lua, "function "+m[1]+"(") {
			t.Errorf("docs/walk.md names the Lua function %s: no script defines it", m[1])
		}
	}
	if checked < 30 {
		t.Fatalf("only %d names checked: the test no longer reads the walk", checked)
	}
}

// declaredNames returns the top-level names of the package in dir (not
// its tests), its methods and struct fields as "Type.Member", and its
// methods as ".Method" too.
func declaredNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	names := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
					names["."+d.Name.Name] = true // pkg.method names a method of the package's main type
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
