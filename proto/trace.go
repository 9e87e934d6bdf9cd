package proto

import "math/rand/v2"

// Traces returns every rank's trace of epoch e when the traces come from a
// seed: one uniform random permutation of all files, drawn from seed and
// e, cut into consecutive runs, one per rank, whose lengths differ by at
// most one. serve and simulate both draw their traces here, so the same
// seed gives them the same traces.
func Traces(files, ranks int, seed uint64, e uint32) [][]FileID {
	return RestTraces(files, ranks, seed, e, nil)
}

// RestTraces returns the traces of what is left of epoch e once the
// files marked in delivered were delivered (a job resumed on another
// number of ranks): the epoch's permutation from Traces with those files
// taken out, cut into runs per rank whose lengths differ by at most one.
// With delivered nil it is Traces.
func RestTraces(files, ranks int, seed uint64, e uint32, delivered []bool) [][]FileID {
	// rand.Perm's permutation (the same draws: Perm is Shuffle of 0…n-1),
	// held as FileIDs, and the delivered files taken out in place: one
	// slice of 4 bytes per file, where Perm's ints and a copy took 12
	perm := make([]FileID, files)
	for i := range perm {
		perm[i] = FileID(i)
	}
	rand.New(rand.NewPCG(seed, 0x7ace_0000_0000|uint64(e))).Shuffle(files, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	all := perm
	if delivered != nil {
		all = perm[:0]
		for _, f := range perm {
			if !delivered[f] {
				all = append(all, f)
			}
		}
	}
	traces := make([][]FileID, ranks)
	for r := range traces {
		lo, hi := traceRun(len(all), ranks, r)
		traces[r] = all[lo:hi:hi]
	}
	return traces
}

// TraceLen returns the length of rank r's trace from Traces, without
// drawing the permutation.
func TraceLen(files, ranks, r int) int {
	lo, hi := traceRun(files, ranks, r)
	return hi - lo
}

// traceRun returns where rank r's run of the permutation lies.
func traceRun(files, ranks, r int) (lo, hi int) {
	return r * files / ranks, (r + 1) * files / ranks
}
