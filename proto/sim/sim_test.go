package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

func TestSmallRunAllVariants(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Files, cfg.ChunkFiles = 20000, 16
	cfg.Policies, cfg.Epochs = []string{"full", "random-selection", "no-prefetching", "no-optimization"}, 2
	var got []Result
	if err := Run(cfg, func(r Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		t.Logf("%+v", r)
	}
}

func TestWindowPolicyReadsEachChunkOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Files, cfg.Ranks, cfg.Epochs, cfg.Keep = 60000, 3, 2, 0 // nothing carried: every chunk read every epoch
	cfg.Policies = []string{"window"}
	var got []Result
	if err := Run(cfg, func(r Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d results for 2 epochs", len(got))
	}
	for _, r := range got {
		if r.Variant != "window" || r.Policy != "window" || r.Delivered != 60000 || r.ReadAmplification != 1 || r.ChunkReads != 3*((20000+63)/64) {
			t.Fatalf("epoch %d: %s delivered %d, read amplification %.3f, %d chunk reads", r.Epoch, r.Variant,
				r.Delivered, r.ReadAmplification, r.ChunkReads)
		}
		if r.LocalHits+r.RemoteRequests+r.Prefetched != 60000 || r.Prefetched < 35000 {
			t.Fatalf("epoch %d: %d local, %d on demand, %d pushed ahead", r.Epoch, r.LocalHits, r.RemoteRequests,
				r.Prefetched)
		}
		if r.DistinctChunksPerBatch < 0.85*r.DistinctChunksPerBatchShuffle {
			t.Fatalf("epoch %d: %.1f distinct chunks per batch, a shuffle %.1f", r.Epoch, r.DistinctChunksPerBatch,
				r.DistinctChunksPerBatchShuffle)
		}
	}
}

func TestPoliciesAreRegistered(t *testing.T) {
	want := []string{"full", "random-selection", "no-prefetching", "no-optimization", "window"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("policies %v, want %v", got, want)
	}
	for _, name := range want[:4] {
		if Family(name) != "paper" {
			t.Fatalf("%s is of family %q", name, Family(name))
		}
	}
	cfg := DefaultConfig()
	cfg.Policies = []string{"nosuch"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `no policy "nosuch"`) {
		t.Fatalf("an unknown policy: %v", err)
	}
}

// Epochs are numbered in a uint32: a count past proto.MaxEpochs is
// refused, not cut.
func TestEpochsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Epochs = 1 << 32
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "epochs = 4294967296, want 1 to 2147483647") {
		t.Fatalf("2^32 epochs: %v", err)
	}
}

// Changing the rank count or K changes the window policy's traffic and
// order, never the set of files delivered (each exactly once) nor that
// each chunk is read once.
func TestWindowMetamorphicRanksAndK(t *testing.T) {
	var orders []string
	for _, c := range []struct{ ranks, k int }{{1, 16}, {2, 16}, {3, 8}, {3, 64}} {
		cfg := DefaultConfig()
		cfg.Files, cfg.Ranks, cfg.ChunkFiles, cfg.Epochs, cfg.Keep = 5000, c.ranks, c.k, 2, 0
		var order strings.Builder
		cfg.Order = func(_ string, e int, files [][]proto.FileID) {
			seen := make([]bool, cfg.Files)
			for r, fs := range files {
				for sn, f := range fs {
					if f < 0 || seen[f] {
						t.Fatalf("%d ranks, K=%d, epoch %d: rank %d position %d gets file %d, twice or none", c.ranks, c.k, e, r, sn, f)
					}
					seen[f] = true
					fmt.Fprint(&order, f, " ")
				}
			}
			if slices.Contains(seen, false) {
				t.Fatalf("%d ranks, K=%d, epoch %d: a file was not delivered", c.ranks, c.k, e)
			}
		}
		err := Run(cfg, func(r Result) {
			if r.ReadAmplification != 1 || r.Delivered != 5000 {
				t.Fatalf("%d ranks, K=%d: read %.3f×, delivered %d", c.ranks, c.k, r.ReadAmplification, r.Delivered)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, order.String())
	}
	for i := 1; i < len(orders); i++ {
		if orders[i] == orders[0] {
			t.Fatalf("case %d delivered in the same order as case 0", i)
		}
	}
}
