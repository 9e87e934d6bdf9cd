package proto

import "math/rand/v2"

// Traces returns every rank's trace of epoch e when the traces come from a
// seed: one uniform random permutation of all files, drawn from seed and
// e, cut into consecutive runs, one per rank, whose lengths differ by at
// most one. serve and simulate both draw their traces here, so the same
// seed gives them the same traces.
func Traces(files, ranks int, seed uint64, e uint32) [][]FileID {
	perm := rand.New(rand.NewPCG(seed, 0x7ace_0000_0000|uint64(e))).Perm(files)
	all := make([]FileID, files)
	for i, f := range perm {
		all[i] = FileID(f)
	}
	traces := make([][]FileID, ranks)
	for r := range traces {
		traces[r] = all[r*files/ranks : (r+1)*files/ranks : (r+1)*files/ranks]
	}
	return traces
}
