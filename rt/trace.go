package rt

import (
	"math/rand/v2"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// GeneratedTrace returns rank's part of the epoch's global permutation of
// the dataset's files: the permutation comes from seed and epoch, and the
// ranks take consecutive runs of it whose lengths differ by at most one.
func GeneratedTrace(files, ranks, rank int, seed uint64, epoch uint32) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0x7ace_0000_0000|uint64(epoch)))
	perm := rng.Perm(files)
	lo, hi := rank*files/ranks, (rank+1)*files/ranks
	out := make([]int32, hi-lo)
	for i, f := range perm[lo:hi] {
		out[i] = int32(f)
	}
	return out
}

// gatherTraces gives every rank every rank's trace.
func gatherTraces(comm collectives.Comm, own []int32) ([][]proto.FileID, error) {
	all, counts, err := comm.Allgatherv(own)
	if err != nil {
		return nil, err
	}
	traces := make([][]proto.FileID, len(counts))
	off := 0
	for r, c := range counts {
		t := make([]proto.FileID, c)
		for i, f := range all[off : off+c] {
			t[i] = proto.FileID(f)
		}
		traces[r], off = t, off+c
	}
	return traces, nil
}
