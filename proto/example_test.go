package proto_test

import (
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// Example drives one rank of the window policy as a runtime does: events
// go in with Step, and what the rank wants done comes out of Ready (chunk
// reads to issue, messages to send, files to deliver); Advance says it was
// carried out. Here the rank owns the whole dataset, 8 files in chunks of
// 4, with memory for half of it, and its client asks for every position
// of epoch 1 in order. A position may be answered by another file than
// the trace names there (redirection), but each file once per epoch.
func Example() {
	sizes := [][]int64{{10, 10, 10, 10, 10, 10, 10, 10}}
	m, err := proto.NewMapping(proto.Dataset{K: 4, Shards: []proto.Shard{{Files: 8, Bytes: 80, MemBytes: 40}}})
	if err != nil {
		panic(err)
	}
	r, err := proto.NewWindowRank(proto.WindowConfig{Rank: 0, Mapping: m, Sizes: sizes, Seed: 1, Window: 2, Remote: []int64{0}})
	if err != nil {
		panic(err)
	}
	var traces [][]proto.FileID
	var reads []proto.Read
	// carry out what the rank asks for: here reads wait in a queue and
	// complete one at a time; deliveries are printed.
	step := func(ev proto.Event) {
		if err := r.Step(ev); err != nil {
			panic(err)
		}
		for r.HasReady() {
			rd := r.Ready()
			for _, read := range rd.Reads {
				fmt.Printf("read chunk %d\n", read.PC)
			}
			reads = append(reads, rd.Reads...)
			for _, d := range rd.Deliveries {
				fmt.Printf("position %d (the trace's file %d): file %d\n", d.Sn, traces[0][d.Sn], d.File)
			}
			r.Advance(rd)
		}
	}
	traces = proto.Traces(m.Files(), m.Ranks(), 1, 1)
	step(proto.EpochStart{Epoch: 1, Traces: traces})
	for sn := range traces[0] {
		step(proto.ClientRequest{Sn: int32(sn)})
		for len(reads) > 0 { // the storage answers
			rd := reads[0]
			reads = reads[1:]
			step(proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch})
		}
	}
	fmt.Println(r.Stats().Delivered, "files delivered")
	// Output:
	// read chunk 1
	// position 0 (the trace's file 3): file 7
	// position 1 (the trace's file 4): file 4
	// position 2 (the trace's file 1): file 6
	// read chunk 0
	// position 3 (the trace's file 7): file 5
	// position 4 (the trace's file 0): file 0
	// position 5 (the trace's file 6): file 1
	// position 6 (the trace's file 2): file 2
	// position 7 (the trace's file 5): file 3
	// 8 files delivered
}
