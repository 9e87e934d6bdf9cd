// Package codesize holds the test that keeps the runtime's code in
// pieces a reader can hold: no function over maxFuncLines lines and no
// file over maxFileLines in rt, rt/job, rt/shm and cmd/brandrt (tests aside).
package codesize

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	maxFuncLines = 60
	maxFileLines = 400
)

// dirs are the packages held to the limits, from the module's root.
var dirs = []string{"rt", "rt/job", "rt/shm", "cmd/brandrt"}

// flagTables are the functions that declare a command's flags, one line
// each, exempt from the function limit: their length is the CLI's.
var flagTables = map[string]bool{"cmd/brandrt.serveCommand": true}

// TestCodeSize checks the limits, naming each function and file over.
func TestCodeSize(t *testing.T) {
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("%s: no Go files: %v", dir, err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, over := range overLimits(t, path) {
				t.Error(over)
			}
		}
	}
}

// overLimits returns what in the file at path is over a limit.
func overLimits(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(filepath.ToSlash(path), "../../")
	var over []string
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		over = append(over, fmt.Sprintf("%s: %d lines, over %d: split it by concern", name, n, maxFileLines))
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || flagTables[filepath.Dir(name)+"."+fn.Name.Name] {
			continue
		}
		lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
		if lines > maxFuncLines {
			over = append(over, fmt.Sprintf("%s: func %s: %d lines, over %d", name, funcName(fn), lines, maxFuncLines))
		}
	}
	return over
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// The check finds what is over: a file of 401 lines and a function of
// 61 are named.
func TestCodeSizeFindsOver(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("\t_ = 0\n", maxFuncLines-2)
	src := "package p\n\nfunc long() {\n" + body + "}\n" + strings.Repeat("\n", maxFileLines)
	path := filepath.Join(dir, "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	over := overLimits(t, path)
	if len(over) != 1 || !strings.Contains(over[0], "lines, over 400") {
		t.Fatalf("a long file: %q", over)
	}
	src = "package p\n\nfunc long() {\n" + body + "\t_ = 1\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if over := overLimits(t, path); len(over) != 1 || !strings.Contains(over[0], "func long: 61 lines, over 60") {
		t.Fatalf("a long function: %q", over)
	}
}
