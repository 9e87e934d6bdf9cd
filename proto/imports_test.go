package proto_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// forbidden are the standard packages proto must not import: the protocol
// does no I/O, keeps no time, starts no goroutines, and draws every random
// number from its seeded source.
var forbidden = []string{"os", "net", "time", "sync", "sync/atomic", "unsafe", "math/rand", "io/fs", "syscall", "runtime"}

// seededRand are the only math/rand/v2 functions proto may call: those
// that build a seeded generator. The package-level ones use a global one.
var seededRand = []string{"New", "NewPCG", "NewChaCha8"}

func TestProtoImportsOnlyPureStandardPackages(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		randName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if slices.Contains(forbidden, path) || strings.Contains(path, ".") {
				t.Errorf("%s imports %q", name, path)
			}
			if path == "math/rand/v2" {
				randName = "rand"
				if imp.Name != nil {
					randName = imp.Name.Name
				}
			}
		}
		checkSeededRand(t, fset, f, randName)
	}
}

func checkSeededRand(t *testing.T, fset *token.FileSet, f *ast.File, randName string) {
	if randName == "" {
		return
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == randName && !slices.Contains(seededRand, sel.Sel.Name) && sel.Sel.Name != "Rand" {
			t.Errorf("%s: uses %s.%s, the global generator", fset.Position(sel.Pos()), randName, sel.Sel.Name)
		}
		return true
	})
}

// TestProtoDependsOnlyOnTheStandardLibrary asks the go tool for proto's
// transitive dependencies: none may come from outside the standard library.
func TestProtoDependsOnlyOnTheStandardLibrary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) != 1 || !strings.HasSuffix(deps[0], "/proto") {
		t.Fatalf("proto depends on non-standard packages: %v", deps)
	}
}
