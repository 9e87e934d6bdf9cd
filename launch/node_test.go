package launch

import (
	"fmt"
	"testing"
)

func TestOneRankPerNode(t *testing.T) {
	const tail = ": brandrt runs one rank per node (mpirun --map-by ppr:1:node, or srun --ntasks-per-node=1); " +
		"--allow-shared-node lets ranks share a node"
	many := make([]string, 10)
	for i := range many {
		many[i] = "n"
	}
	for _, c := range []struct {
		nodes []string
		want  string // "" for no error
	}{
		{nil, ""},
		{[]string{"a"}, ""},
		{[]string{"a", "b", "c"}, ""},
		{[]string{"a", "b", "a"}, "launch: ranks 0 and 2 share node a" + tail},
		{[]string{"b", "a", "a", "b", "c", "a"}, "launch: ranks 0 and 3 share node b; ranks 1, 2 and 5 share node a" + tail},
		{append(many, "a", "b", "a", "b", "a"), "launch: ranks 0, 1, 2, 3, 4, 5 and 4 more share node n; " +
			"ranks 10, 12 and 14 share node a; ranks 11 and 13 share node b" + tail},
		{many, "launch: ranks 0, 1, 2, 3, 4, 5 and 4 more share node n" + tail},
		{[]string{"a", "b", "c", "d", "e", "a", "b", "c", "d", "e"}, "launch: ranks 0 and 5 share node a; " +
			"ranks 1 and 6 share node b; ranks 2 and 7 share node c; ranks 3 and 8 share node d; " +
			"and 1 more node holds several ranks" + tail},
	} {
		err := OneRankPerNode(c.nodes)
		if got := fmt.Sprint(err); (err == nil) != (c.want == "") || (err != nil && got != c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.nodes, err, c.want)
		}
	}
}
