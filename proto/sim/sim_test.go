package sim

import (
	"testing"

	"github.com/brandrt/brandrt/proto"
)

func TestSmallRunAllVariants(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Files, cfg.ChunkFiles = 20000, 16
	cfg.Variants, cfg.Epochs = proto.Variants, 2
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
	cfg.Variants, cfg.WindowPolicy = nil, true
	var got []Result
	if err := Run(cfg, func(r Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d results for 2 epochs", len(got))
	}
	for _, r := range got {
		if r.Variant != "window" || r.Delivered != 60000 || r.ReadAmplification != 1 || r.ChunkReads != 3*((20000+63)/64) {
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
