package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// builtins are the names of Go's universe scope: types, constants, nil
// and the built-in functions.
var builtins = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range types.Universe.Names() {
		m[n] = true
	}
	return m
}()

// shadows returns "file:line: name" for every identifier f declares that
// hides a builtin: functions, types, constants, variables (:=, var,
// range), parameters, results, receivers, type parameters and import
// names. Methods, struct fields, interface methods and labels are left
// out: they live in a method set, a selector or a label scope and never
// hide the builtin from the code around them.
func shadows(fset *token.FileSet, f *ast.File) []string {
	var out []string
	check := func(id *ast.Ident) {
		if id != nil && builtins[id.Name] {
			out = append(out, fset.Position(id.Pos()).String()+": "+id.Name)
		}
	}
	fields := func(l *ast.FieldList) {
		if l == nil {
			return
		}
		for _, fl := range l.List {
			for _, n := range fl.Names {
				check(n)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Recv == nil {
				check(n.Name)
			}
			fields(n.Recv)
		case *ast.FuncType:
			fields(n.TypeParams)
			fields(n.Params)
			fields(n.Results)
		case *ast.TypeSpec:
			check(n.Name)
			fields(n.TypeParams)
		case *ast.ValueSpec:
			for _, id := range n.Names {
				check(id)
			}
		case *ast.ImportSpec:
			check(n.Name)
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						check(id)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						check(id)
					}
				}
			}
		}
		return true
	})
	return out
}

// generated matches the line `go generate` tools write in generated files.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// goFiles parses every .go file of the module: not vendor/, testdata/,
// hidden folders or other modules nested inside it, nor generated files.
func goFiles(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated.Match(src) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
		if err != nil {
			return err
		}
		files[rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .go files found")
	}
	return fset, files
}

// TestNoBuiltinShadowed guards against a name that hides a builtin (a
// variable called len, a parameter called new), which turns a later use of
// the builtin into a confusing compile error or a different meaning.
func TestNoBuiltinShadowed(t *testing.T) {
	fset, files := goFiles(t)
	for _, name := range slices.Sorted(mapKeys(files)) {
		for _, s := range shadows(fset, files[name]) {
			t.Errorf("%s shadows the builtin", s)
		}
	}
}

// TestShadowCheckCatches guards against a shadow check that misses a kind
// of declaration, or flags one that cannot hide anything.
func TestShadowCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // names flagged, in order
	}{
		{"short variable", "func f() { len := 1; _ = len }", []string{"len"}},
		{"var", "var max = 3", []string{"max"}},
		{"const", "const iota = 0", []string{"iota"}},
		{"function", "func copy() {}", []string{"copy"}},
		{"type", "type error struct{}", []string{"error"}},
		{"parameter and result", "func f(new int) (cap int) { return }", []string{"new", "cap"}},
		{"receiver", "type T int\nfunc (string T) M() {}", []string{"string"}},
		{"range", "func f(s []int) { for min, max := range s { _, _ = min, max } }", []string{"min", "max"}},
		{"type switch", "func f(x any) { switch print := x.(type) { default: _ = print } }", []string{"print"}},
		{"type parameter", "func f[any interface{}]() {}", []string{"any"}},
		{"function literal", "var f = func(close func()) {}", []string{"close"}},
		{"import name", `import real "math"` + "\nvar _ = real.Pi", []string{"real"}},
		{"method, field and label are not shadows", "type T struct{ len int }\nfunc (T) close() {}\nfunc f() { append: for { break append } }", nil},
		{"uses are not declarations", "func f(s []int) int { return len(s) + cap(s) }", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", "package x\n"+tc.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range shadows(fset, f) {
				got = append(got, s[strings.LastIndex(s, " ")+1:])
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("flagged %q, want %q", got, tc.want)
			}
		})
	}
}

// docProblems returns what is missing from the doc comment of one package
// (its non-test files): the comment itself, the "Package name" opening
// of a library, and a statement about goroutines (which it runs and who
// owns them, or that it runs none).
func docProblems(name string, files []*ast.File) []string {
	var docs []string
	for _, f := range files {
		if f.Doc != nil {
			docs = append(docs, f.Doc.Text())
		}
	}
	switch {
	case len(docs) == 0:
		return []string{"no package doc comment"}
	case len(docs) > 1:
		return []string{"more than one file has a package doc comment"}
	}
	var out []string
	if name != "main" && !strings.HasPrefix(docs[0], "Package "+name+" ") {
		out = append(out, `the doc comment does not open with "Package `+name+` "`)
	}
	if !strings.Contains(strings.ToLower(docs[0]), "goroutine") {
		out = append(out, "the doc comment does not say which goroutines the package runs and who owns them (or that it runs none)")
	}
	return out
}

// TestPackageDocs guards against a package whose doc comment is missing
// or says nothing about its goroutines (STYLE.md: every package doc has
// the concept, its invariants, its goroutines and their owners).
func TestPackageDocs(t *testing.T) {
	_, files := goFiles(t)
	pkgs := map[string][]*ast.File{} // dir + " " + package name
	for name, f := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		key := filepath.Dir(name) + " " + f.Name.Name
		pkgs[key] = append(pkgs[key], f)
	}
	for _, key := range slices.Sorted(mapKeys(pkgs)) {
		dir, name, _ := strings.Cut(key, " ")
		for _, p := range docProblems(name, pkgs[key]) {
			t.Errorf("%s (package %s): %s", dir, name, p)
		}
	}
}

// TestDocCheckCatches guards against a doc check that passes everything.
func TestDocCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		name, pkg string
		srcs      []string
		want      int // problems
	}{
		{"no doc", "x", []string{"package x"}, 1},
		{"two docs", "x", []string{"// Package x runs no goroutines.\npackage x", "// Package x again.\npackage x"}, 1},
		{"wrong opening, no goroutines", "x", []string{"// X does things.\npackage x"}, 2},
		{"no goroutines", "x", []string{"// Package x does things.\npackage x"}, 1},
		{"complete", "x", []string{"// Package x does things. It runs no goroutines.\npackage x"}, 0},
		{"command", "main", []string{"// Mirrord mirrors. Its main goroutine owns the agent.\npackage main"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []*ast.File
			for _, src := range tc.srcs {
				f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			if got := docProblems(tc.pkg, files); len(got) != tc.want {
				t.Fatalf("got %d problems %q, want %d", len(got), got, tc.want)
			}
		})
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
