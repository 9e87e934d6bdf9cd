package script

import (
	"strings"
	"testing"
)

func TestParseWrite(t *testing.T) {
	text := `# a comment
init files=12,12 k=4 codec
----
rank 0: ready

epoch e=1
0: 1 2 3
1: 4 5
----
`
	cmds, err := Parse("x.txt", text)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 {
		t.Fatalf("%d commands, want 2", len(cmds))
	}
	c := cmds[0]
	if c.Pos != "x.txt:2" || c.Name != "init" || c.Args["files"] != "12,12" || !c.Has("codec") || c.Has("mem") ||
		c.Want != "rank 0: ready" || len(c.Comments) != 1 {
		t.Errorf("first command parsed as %+v", c)
	}
	if cmds[1].Input != "0: 1 2 3\n1: 4 5" || cmds[1].Want != "" {
		t.Errorf("second command's input %q, output %q", cmds[1].Input, cmds[1].Want)
	}
	var out strings.Builder
	for i, c := range cmds {
		if i > 0 {
			out.WriteByte('\n')
		}
		Write(&out, c, c.Want)
	}
	if out.String() != text {
		t.Errorf("written back as\n%s\nwant\n%s", out.String(), text)
	}
}

func TestParseNoSeparator(t *testing.T) {
	_, err := Parse("y.txt", "stats rank=0\n")
	if err == nil || !strings.Contains(err.Error(), `y.txt:1: command "stats" has no ---- line`) {
		t.Fatalf("got %v", err)
	}
}
