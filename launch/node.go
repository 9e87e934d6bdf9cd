package launch

import (
	"fmt"
	"strings"
)

// OneRankPerNode checks that no two ranks share a node. nodes holds every
// rank's Env.Node, indexed by rank (the caller gathers them through MPI).
// The error names each shared node with its ranks, in the order of their
// first rank, and the flag that allows sharing.
func OneRankPerNode(nodes []string) error {
	ranks := map[string][]int{}
	var order []string // the nodes by first rank
	for r, n := range nodes {
		if ranks[n] == nil {
			order = append(order, n)
		}
		ranks[n] = append(ranks[n], r)
	}
	var shared []string
	for _, n := range order {
		if len(ranks[n]) > 1 {
			shared = append(shared, n)
		}
	}
	if len(shared) == 0 {
		return nil
	}
	const most = 4 // nodes named
	var b strings.Builder
	for i, n := range shared[:min(len(shared), most)] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "ranks %s share node %s", list(ranks[n]), n)
	}
	switch more := len(shared) - most; {
	case more == 1:
		b.WriteString("; and 1 more node holds several ranks")
	case more > 1:
		fmt.Fprintf(&b, "; and %d more nodes hold several ranks", more)
	}
	return fmt.Errorf("launch: %s: brandrt runs one rank per node "+
		"(mpirun --map-by ppr:1:node, or srun --ntasks-per-node=1); "+
		"--allow-shared-node lets ranks share a node", b.String())
}

// list writes ranks as "0, 1 and 2", or "0, 1, 2, 3, 4, 5 and 9 more".
func list(ranks []int) string {
	const most = 6
	s := make([]string, 0, most+1)
	for _, r := range ranks[:min(len(ranks), most)] {
		s = append(s, fmt.Sprint(r))
	}
	if len(ranks) > most {
		s = append(s, fmt.Sprintf("%d more", len(ranks)-most))
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
