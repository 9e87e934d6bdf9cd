package rt

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

// decls is what a package declares: its top-level names, and per type
// the names of its fields and methods.
type decls struct {
	top     map[string]bool
	members map[string]map[string]bool
	any     map[string]bool // every field and method name, of any type
}

// parseDecls reads the declarations of the non-test files of dir.
func parseDecls(t *testing.T, dir string) decls {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	d := decls{top: map[string]bool{}, members: map[string]map[string]bool{}, any: map[string]bool{}}
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		d.members[typ][name], d.any[name] = true, true
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					d.top[decl.Name.Name] = true
					continue
				}
				typ := decl.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					member(id.Name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						d.top[spec.Name.Name] = true
						if st, ok := spec.Type.(*ast.StructType); ok {
							for _, fld := range st.Fields.List {
								for _, n := range fld.Names {
									member(spec.Name.Name, n.Name)
								}
								if len(fld.Names) == 0 { // embedded: its name is its type's
									if id, ok := fld.Type.(*ast.Ident); ok {
										member(spec.Name.Name, id.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							d.top[n.Name] = true
						}
					}
				}
			}
		}
	}
	return d
}

// packageDoc returns the package comment of dir's doc.go.
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	return f.Doc.Text()
}

var (
	docFile      = regexp.MustCompile(`\b[a-z0-9_]+\.go\b`)
	docQualified = regexp.MustCompile(`\b([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)`)
	// identifiers by their shape: camelCase, or capitalized with a
	// capital inside (EpochStats); plain words may be English
	docCamel = regexp.MustCompile(`\b(?:[a-z]+[A-Z]|[A-Z][a-z0-9]+[A-Z])\w*\b`)
)

// docPackages are the packages the package comment names, by the
// directory of each, relative to rt's: their names are checked as rt's.
var docPackages = map[string]string{"proto": "../proto", "chunk": "../chunk", "collectives": "../collectives", "shm": "shm", "job": "job"}

// docForeign are names the package comment may use that no package here
// declares: MPI's calls, units, a context.
var docForeign = map[string]bool{
	"ctx": true, "KiB": true, "MiB": true,
	"Isend": true, "Irecv": true, "Iprobe": true, "Recv": true, "Allgatherv": true, "AllreduceSum": true, "AllreduceMax": true,
}

// checkChain reports what of chain (Type.member.member…) d does not
// declare: the first name as a type with members or any top-level name,
// the second as a member of that type, the rest as anyone's member.
func (d decls) checkChain(chain []string) string {
	if !d.top[chain[0]] {
		return chain[0]
	}
	if len(chain) > 1 && d.members[chain[0]] != nil && !d.members[chain[0]][chain[1]] {
		return chain[0] + "." + chain[1]
	}
	for _, y := range chain[1:] {
		if !d.any[y] && !d.top[y] {
			return y
		}
	}
	return ""
}

// TestDocNamesWhatExists: each file the package comment (`go doc ./rt`)
// names is one of rt's (or of rt/shm, rt/job where it says so), each
// identifier of its shape (camelCase, EpochStats) is declared in rt, and
// each Type.member (rt's) or pkg.Name.member (proto's, chunk's, …) is
// declared where it says, the member by its type.
func TestDocNamesWhatExists(t *testing.T) {
	doc := packageDoc(t, ".")
	d := parseDecls(t, ".")
	for _, f := range docFile.FindAllString(doc, -1) {
		found := false
		for _, dir := range []string{".", "shm", "job"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("the package comment names %s, which rt, rt/shm and rt/job do not have", f)
		}
	}
	noFiles := docFile.ReplaceAllString(doc, "")
	pkgs := map[string]decls{}
	for name, dir := range docPackages {
		pkgs[name] = parseDecls(t, dir)
	}
	for _, m := range docQualified.FindAllStringSubmatch(noFiles, -1) {
		x, chain := m[1], strings.Split(m[2][1:], ".")
		var missing string
		switch p, isPkg := pkgs[x]; {
		case docForeign[x]:
			continue
		case isPkg:
			missing = p.checkChain(chain)
		default:
			missing = d.checkChain(append([]string{x}, chain...))
		}
		if missing != "" {
			t.Errorf("the package comment names %s%s, but %s is not declared there", x, m[2], missing)
		}
	}
	// what remains once the qualified names are out: bare identifiers
	bare := docQualified.ReplaceAllString(noFiles, "")
	for _, id := range docCamel.FindAllString(bare, -1) {
		if !d.top[id] && !d.any[id] && !docForeign[id] {
			t.Errorf("the package comment names %s, which rt does not declare", id)
		}
	}
}
