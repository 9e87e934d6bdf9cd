// Package scripttest runs datadriven scripts (package script) as tests;
// go test -rewrite rewrites their expected output.
package scripttest

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/internal/script"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of datadriven test files")

// RunFile runs the script at path through handle, comparing each command's
// output with the expected one, or rewriting the file with -rewrite.
func RunFile(t *testing.T, path string, handle func(*script.Cmd) string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := script.Parse(path, string(text))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for i, cmd := range cmds {
		got := strings.TrimRight(handle(cmd), "\n")
		if !*rewrite && got != cmd.Want {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", cmd.Pos, cmd, got, cmd.Want)
		}
		if i > 0 {
			out.WriteByte('\n')
		}
		script.Write(&out, cmd, got)
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
