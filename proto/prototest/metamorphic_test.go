package prototest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// TestMetamorphicConfigs plays the same dataset and the same global order
// under many configurations: the window, K, the rank count, the variant and
// the memory change the traffic, never the files delivered (each exactly
// once) nor the positions answered.
func TestMetamorphicConfigs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for trial := 0; trial < 6; trial++ {
		files := 200 + rng.IntN(400)
		sizes := make([]int64, files)
		for i := range sizes {
			sizes[i] = 1 + rng.Int64N(100)
		}
		order := rng.Perm(files)
		traffic := map[string]bool{}
		for _, ranks := range []int{1, 2, 3} {
			for _, k := range []int{1, 4, 7} {
				for _, window := range []int{0, 2, 16} {
					v := proto.Variants[rng.IntN(len(proto.Variants))]
					mem := []float64{0.05, 0.3, 1}[rng.IntN(3)]
					s := playSplit(t, sizes, order, ranks, k, window, v, mem)
					traffic[s] = true
				}
			}
		}
		if len(traffic) < 2 {
			t.Fatalf("trial %d: 27 configurations all produced the same traffic %v", trial, traffic)
		}
	}
}

// playSplit cuts the dataset into ranks shards and plays one epoch whose
// global order is order, cut into equal traces; it fails the test unless
// every file is delivered exactly once, and returns a summary of the
// traffic.
func playSplit(t *testing.T, sizes []int64, order []int, ranks, k, window int, v proto.Variant, mem float64) string {
	t.Helper()
	opts := inproc.Options{K: k, Window: window, Variant: v, MemFraction: mem, RemoteMemBytes: 300, Seed: 5, Codec: true}
	for r := 0; r < ranks; r++ {
		shard := sizes[r*len(sizes)/ranks : (r+1)*len(sizes)/ranks]
		opts.Files = append(opts.Files, len(shard))
		opts.Sizes = append(opts.Sizes, shard)
	}
	c, err := inproc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	traces := make([][]proto.FileID, ranks)
	for i, f := range order {
		r := i * ranks / len(order)
		traces[r] = append(traces[r], proto.FileID(f))
	}
	name := fmt.Sprintf("ranks=%d k=%d window=%d %s mem=%g", ranks, k, window, v, mem)
	if err := c.PlayEpoch(1, traces, 3, nil); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s := c.Stats()
	if s.Delivered != int64(len(sizes)) {
		t.Fatalf("%s: %d deliveries for %d files", name, s.Delivered, len(sizes))
	}
	return fmt.Sprintf("reads=%d remote=%d prefetched=%d", s.ChunkReads, s.RemoteRequests, s.Prefetched)
}

// TestCodecIsTransparent: a run whose messages go through Encode/Decode
// produces the same transcript as one that passes them as values.
func TestCodecIsTransparent(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		var transcripts [2]string
		for i, codec := range []bool{false, true} {
			var b strings.Builder
			c, err := inproc.New(inproc.Options{Files: []int{30, 25, 40}, K: 3, MemFraction: 0.3, RemoteMemBytes: 5, Window: 4, Seed: seed, Codec: codec})
			if err != nil {
				t.Fatal(err)
			}
			c.SetOutput(func(s string) { b.WriteString(s + "\n") })
			if err := c.PlayEpoch(1, inproc.GenTraces(c.Mapping, seed, 1), 4, nil); err != nil {
				t.Fatal(err)
			}
			transcripts[i] = b.String()
		}
		if transcripts[0] != transcripts[1] {
			t.Fatalf("seed %d: the codec changed the run", seed)
		}
	}
}
