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
		if r.LocalHits+r.RemoteRequests != 60000 || r.Prefetched != r.RemoteRequests {
			t.Fatalf("epoch %d: %d local, %d remote, %d pushed", r.Epoch, r.LocalHits, r.RemoteRequests, r.Prefetched)
		}
		if r.DistinctChunksPerBatch < 0.85*r.DistinctChunksPerBatchShuffle {
			t.Fatalf("epoch %d: %.1f distinct chunks per batch, a shuffle %.1f", r.Epoch, r.DistinctChunksPerBatch,
				r.DistinctChunksPerBatchShuffle)
		}
	}
}
