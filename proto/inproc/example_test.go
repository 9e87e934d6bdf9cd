package inproc_test

import (
	"fmt"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// ExampleCluster plays two epochs of the window policy on 3 ranks in one
// process, each rank's memory holding half its shard, as `brandrt
// simulate` does at scale: every message and read in flight completes
// once per round, and each epoch ends checked (every position answered,
// every file delivered once). The chunks one epoch reads last stay in
// memory for the next (Options.Keep), which begins with them.
func ExampleCluster() {
	files := []int{400, 400, 400}
	traces := func(e uint32) [][]proto.FileID { return proto.Traces(1200, len(files), 1, e) }
	c, err := inproc.New(inproc.Options{Files: files, K: 4, Sizes: inproc.Sizes(files, 1000), MemFraction: 0.5,
		RemoteMemBytes: 8000, Window: 8, Seed: 1, Policy: inproc.Window, Keep: 0.95, Traces: traces, Epochs: 2})
	if err != nil {
		panic(err)
	}
	for e := uint32(1); e <= 2; e++ {
		if err := c.PlayEpoch(e, traces(e), 4, nil); err != nil {
			panic(err)
		}
		s, resident := c.Stats(), 0
		for _, rds := range c.Ranks[0].Plan().Reads { // the whole plan, which the cluster's ranks also make (WindowConfig.Whole)
			for _, rd := range rds {
				if rd.Resident {
					resident++
				}
			}
		}
		fmt.Printf("epoch %d: %d files delivered, %d pushed ahead to the rank that asks for them; %d chunks, %d of them in memory as it began\n",
			e, s.Delivered, s.Prefetched, s.ChunkReads, resident)
	}
	// Output:
	// epoch 1: 1200 files delivered, 761 pushed ahead to the rank that asks for them; 300 chunks, 0 of them in memory as it began
	// epoch 2: 1200 files delivered, 814 pushed ahead to the rank that asks for them; 300 chunks, 141 of them in memory as it began
}
