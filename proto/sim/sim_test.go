package sim

import (
	"fmt"
	"math"
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
	cfg.Files, cfg.Ranks, cfg.Epochs = 60000, 3, 2
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

func TestPairsAgainAndEdges(t *testing.T) {
	m, err := proto.NewMapping(proto.Dataset{K: 16, Shards: []proto.Shard{{Files: 20000, Bytes: 20000}}})
	if err != nil {
		t.Fatal(err)
	}
	a := proto.Traces(20000, 1, 1, 1)
	b := proto.Traces(20000, 1, 1, 2)
	const batch = 100
	if got := *pairsAgain(20000, a, a, batch); got != 1 {
		t.Fatalf("the same order twice: %.3f of pairs again, want 1", got)
	}
	want := float64(batch-1) / float64(20000-1)
	if got := *pairsAgain(20000, a, b, batch); got < 0.7*want || got > 1.3*want {
		t.Fatalf("two shuffles: %.5f of pairs again, want about %.5f", got, want)
	}
	if pairsAgain(20000, [][]proto.FileID{{}}, a, batch) != nil {
		t.Fatal("no pairs must give no figure")
	}
	sorted := make([]proto.FileID, 20000)
	for i := range sorted {
		sorted[i] = proto.FileID(i)
	}
	first, last := edges(m, [][]proto.FileID{sorted}, batch)
	if first > 7 || last > 7 { // 100 files in order span 7 chunks of 16
		t.Fatalf("files in chunk order: %.1f and %.1f distinct chunks per batch at the edges", first, last)
	}
	if first, _ := edges(m, a, batch); first < 90 {
		t.Fatalf("a shuffle: %.1f distinct chunks per batch at the start", first)
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

func TestLabelEntropy(t *testing.T) {
	labels := []int32{0, 0, 1, 1, 2, 3, -1, -1}
	seqs := [][]proto.FileID{{0, 1, 2, 3}, {4, 5, 6, 7}}
	// batches of 2: {0,0}=0 bits, {1,1}=0, {2,3}=1, {-1,-1} has none
	if got := *labelEntropy(labels, seqs, 2); math.Abs(got-1.0/3) > 1e-12 {
		t.Fatalf("entropy %.4f, want 1/3", got)
	}
	// batches of 4: {0,0,1,1}=1 bit, {2,3}=1 bit
	if got := *labelEntropy(labels, seqs, 4); math.Abs(got-1) > 1e-12 {
		t.Fatalf("entropy %.4f, want 1", got)
	}
	if labelEntropy(labels, [][]proto.FileID{{6, 7}}, 2) != nil {
		t.Fatal("no labelled file must give no figure")
	}
}

// Changing the rank count or K changes the window policy's traffic and
// order, never the set of files delivered (each exactly once) nor that
// each chunk is read once.
func TestWindowMetamorphicRanksAndK(t *testing.T) {
	var orders []string
	for _, c := range []struct{ ranks, k int }{{1, 16}, {2, 16}, {3, 8}, {3, 64}} {
		cfg := DefaultConfig()
		cfg.Files, cfg.Ranks, cfg.ChunkFiles, cfg.Epochs = 5000, c.ranks, c.k, 2
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
