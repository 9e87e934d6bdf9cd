package sim

import (
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/prototest"
)

func result(cfg Config, c *prototest.Cluster, v proto.Variant, e int) Result {
	m := c.Mapping
	s := c.Stats()
	var bytes int64
	for r := 0; r < m.Ranks(); r++ {
		bytes += m.ShardBytes(r)
	}
	res := Result{
		Variant: v.String(), Epoch: e, Ranks: cfg.Ranks, Files: cfg.Files, ChunkFiles: cfg.ChunkFiles,
		MemFraction: cfg.MemFraction, Window: cfg.Window, Inflight: cfg.Inflight,
		Bytes: bytes, MemBytes: m.MemBytes(0), RemoteMemBytes: c.Opts.RemoteMemBytes,
		Requests: s.Requests, Delivered: s.Delivered, LocalHits: s.LocalHits, Misses: s.Misses,
		ChunkReads: s.ChunkReads, BytesRead: s.BytesRead, BytesDelivered: s.BytesDelivered,
		ReadAmplification: ratio(s.BytesRead, s.BytesDelivered), FillRate: ratio(s.FilesLoaded, s.FilesRead),
		RemoteRequests: s.RemoteRequests, Redirects: s.Redirects,
		Prefetched: s.Pushed, PrefetchHits: s.BufferHits, PeakMemBytes: s.PeakMem,
	}
	res.DistinctChunksPerBatch, res.ChunkSpan = randomness(m, c.Delivered, cfg.Batch)
	res.DistinctChunksPerBatchShuffle, res.ChunkSpanShuffle = randomness(m, c.Traces, cfg.Batch)
	return res
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// randomness measures, per rank, how clustered by chunk an ordered file
// sequence is, and averages over ranks: the mean number of distinct PCs in
// consecutive batches of batch files, and the mean over PCs of the span
// between the first and last of its files, as a fraction of the sequence's
// length. A uniform shuffle gives nearly batch distinct chunks and spans
// near 1; chunk-at-a-time delivery gives few chunks and spans near 0.
// Positions holding NoFile are skipped.
func randomness(m *proto.Mapping, seqs [][]proto.FileID, batch int) (distinct, span float64) {
	stamp := make([]int32, m.PCs())
	first := make([]int32, m.PCs())
	last := make([]int32, m.PCs())
	ranks := 0
	for _, seq := range seqs {
		pcs := make([]int32, 0, len(seq))
		for _, f := range seq {
			if f != proto.NoFile {
				pcs = append(pcs, int32(m.PC(f)))
			}
		}
		if len(pcs) == 0 {
			continue
		}
		ranks++
		distinct += batchDistinct(pcs, batch, stamp)
		span += meanSpan(pcs, first, last)
	}
	if ranks == 0 {
		return 0, 0
	}
	return distinct / float64(ranks), span / float64(ranks)
}

// batchDistinct is the mean count of distinct values per batch of pcs;
// stamp is scratch space indexed by PC.
func batchDistinct(pcs []int32, batch int, stamp []int32) float64 {
	clear(stamp)
	batches, sum := 0, 0
	for lo := 0; lo < len(pcs); lo += batch {
		batches++
		id := int32(batches)
		for _, pc := range pcs[lo:min(lo+batch, len(pcs))] {
			if stamp[pc] != id {
				stamp[pc] = id
				sum++
			}
		}
	}
	return float64(sum) / float64(batches)
}

// meanSpan is the mean over the PCs present in pcs of (last − first
// index) / len(pcs).
func meanSpan(pcs []int32, first, last []int32) float64 {
	for i := range first {
		first[i] = -1
	}
	for i, pc := range pcs {
		if first[pc] < 0 {
			first[pc] = int32(i)
		}
		last[pc] = int32(i)
	}
	n, sum := 0, 0.0
	for pc, f := range first {
		if f >= 0 {
			n++
			sum += float64(last[pc]-f) / float64(len(pcs))
		}
	}
	return sum / float64(n)
}
