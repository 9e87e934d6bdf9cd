package proto

import (
	"math"
	"slices"
)

// Mix is how random an epoch's delivered order is, measured beside a true
// shuffle of the same files (a seed's traces) in batches of Batch
// positions of one rank. simulate prints it for every policy, and serve
// for each epoch of the window policy, from its plan.
type Mix struct {
	// Batch is the batch size the figures are measured in (0 where the
	// caller reports it beside them, as simulate does).
	Batch int `json:"batch,omitempty"`
	// DistinctChunksPerBatch is the mean number of distinct chunks among
	// a batch's files; ChunkSpan the mean over chunks of the distance
	// between the first and the last of its files, as a fraction of the
	// epoch. A shuffle gives nearly Batch and nearly 1; chunk-at-a-time
	// delivery 1 and nearly 0.
	DistinctChunksPerBatch        float64 `json:"distinct_chunks_per_batch"`
	DistinctChunksPerBatchShuffle float64 `json:"distinct_chunks_per_batch_shuffle"`
	ChunkSpan                     float64 `json:"chunk_span"`
	ChunkSpanShuffle              float64 `json:"chunk_span_shuffle"`
	// DistinctFirst and DistinctLast are distinct chunks per batch over
	// the first and the last 1 % of each rank's epoch.
	DistinctFirst        float64 `json:"distinct_first_1pct"`
	DistinctFirstShuffle float64 `json:"distinct_first_1pct_shuffle"`
	DistinctLast         float64 `json:"distinct_last_1pct"`
	DistinctLastShuffle  float64 `json:"distinct_last_1pct_shuffle"`
	// PairsAgain is the fraction of the pairs of files that shared a
	// batch in the previous epoch and share one again in this one; absent
	// in the first epoch.
	PairsAgain        *float64 `json:"pairs_again,omitempty"`
	PairsAgainShuffle *float64 `json:"pairs_again_shuffle,omitempty"`
	// LabelEntropy is the mean Shannon entropy, in bits, of the labels of
	// a batch; absent where files have no labels.
	LabelEntropy        *float64 `json:"label_entropy,omitempty"`
	LabelEntropyShuffle *float64 `json:"label_entropy_shuffle,omitempty"`
}

// Orders are one epoch's delivered order and the traces it answered,
// per rank: Files[r][sn] answered Traces[r][sn]. NoFile marks a position
// not answered.
type Orders struct{ Files, Traces [][]FileID }

// MeasureMix measures cur in batches of batch positions; with prev (the
// epoch before, or zero Orders), the pairs again; with labels (by file
// id, -1 for none), the label entropy.
func MeasureMix(m *Mapping, batch int, labels []int32, cur, prev Orders) Mix {
	var x Mix
	files, traces := chunkSeqs(m, cur.Files), chunkSeqs(m, cur.Traces)
	x.DistinctChunksPerBatch, x.ChunkSpan = randomness(m.PCs(), files, batch)
	x.DistinctChunksPerBatchShuffle, x.ChunkSpanShuffle = randomness(m.PCs(), traces, batch)
	x.DistinctFirst, x.DistinctLast = edges(m.PCs(), files, batch)
	x.DistinctFirstShuffle, x.DistinctLastShuffle = edges(m.PCs(), traces, batch)
	if prev.Files != nil {
		x.PairsAgain = pairsAgain(m.Files(), prev.Files, cur.Files, batch)
		x.PairsAgainShuffle = pairsAgain(m.Files(), prev.Traces, cur.Traces, batch)
	}
	if labels != nil {
		x.LabelEntropy = labelEntropy(labels, cur.Files, batch)
		x.LabelEntropyShuffle = labelEntropy(labels, cur.Traces, batch)
	}
	return x
}

// randomness measures, per rank, how clustered by chunk an ordered
// sequence of files is (as chunkSeqs gives it, among pcs chunks), and
// averages over ranks: the mean number of distinct PCs in consecutive
// batches of batch files, and the mean over PCs of the span between the
// first and last of its files, as a fraction of the sequence's length. A
// uniform shuffle gives nearly batch distinct chunks and spans near 1;
// chunk-at-a-time delivery gives few chunks and spans near 0.
func randomness(pcs int, seqs [][]int32, batch int) (distinct, span float64) {
	stamp := make([]int32, pcs)
	first := make([]int32, pcs)
	last := make([]int32, pcs)
	ranks := 0
	for _, pcs := range seqs {
		ranks++
		distinct += batchDistinct(pcs, batch, stamp)
		span += meanSpan(pcs, first, last)
	}
	if ranks == 0 {
		return 0, 0
	}
	return distinct / float64(ranks), span / float64(ranks)
}

// chunkSeqs maps each non-empty sequence of files to the sequence of
// their PCs, skipping NoFile.
func chunkSeqs(m *Mapping, seqs [][]FileID) [][]int32 {
	var out [][]int32
	for _, seq := range seqs {
		pcs := make([]int32, 0, len(seq))
		for _, f := range seq {
			if f != NoFile {
				pcs = append(pcs, int32(m.PC(f)))
			}
		}
		if len(pcs) > 0 {
			out = append(out, pcs)
		}
	}
	return out
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

// edges is the mean distinct PCs per batch over the first and over the
// last 1 % of each rank's sequence of PCs (chunkSeqs) (at least a batch), averaged over
// ranks: how mixed the start of an epoch is, when memory is still filling,
// and its end, when it drains.
func edges(pcs int, seqs [][]int32, batch int) (first, last float64) {
	stamp := make([]int32, pcs)
	ranks := 0
	for _, pcs := range seqs {
		ranks++
		n := min(len(pcs), max(batch, len(pcs)/100))
		first += batchDistinct(pcs[:n], batch, stamp)
		last += batchDistinct(pcs[len(pcs)-n:], batch, stamp)
	}
	if ranks == 0 {
		return 0, 0
	}
	return first / float64(ranks), last / float64(ranks)
}

// pairsAgain is the fraction of the pairs of files that shared a batch
// (of one rank) in epoch prev and share one again in epoch cur: what a
// model sees repeat from one epoch to the next. A shuffle gives about
// (batch − 1) / (files − 1). nil when prev has no pairs.
func pairsAgain(files int, prev, cur [][]FileID, batch int) *float64 {
	key := make([]int64, files)
	for i := range key {
		key[i] = -1
	}
	for r, seq := range cur {
		for sn, f := range seq {
			if f != NoFile {
				key[f] = int64(r)<<32 | int64(sn/batch)
			}
		}
	}
	var again, pairs int64
	keys := make([]int64, 0, batch)
	for _, seq := range prev {
		for lo := 0; lo < len(seq); lo += batch {
			keys = keys[:0]
			for _, f := range seq[lo:min(lo+batch, len(seq))] {
				if f != NoFile {
					keys = append(keys, key[f])
				}
			}
			n := int64(len(keys))
			pairs += n * (n - 1) / 2
			slices.Sort(keys)
			for i := 0; i < len(keys); {
				j := i
				for j < len(keys) && keys[j] == keys[i] {
					j++
				}
				if c := int64(j - i); keys[i] >= 0 {
					again += c * (c - 1) / 2
				}
				i = j
			}
		}
	}
	if pairs == 0 {
		return nil
	}
	x := float64(again) / float64(pairs)
	return &x
}

// labelEntropy is the mean over batches (of each rank's sequence) of the
// Shannon entropy, in bits, of the labels of a batch's files: how far a
// batch is from a stratified sample of the classes. A batch of one class
// gives 0; a shuffle gives near min(log2 classes, log2 batch) less a
// small-sample bias. Files labelled -1 are left out; nil when no batch
// has a label.
func labelEntropy(labels []int32, seqs [][]FileID, batch int) *float64 {
	count := make([]int, slices.Max(append([]int32{0}, labels...))+1)
	var seen []int32 // the labels of the batch, in order of appearance
	var sum float64
	batches := 0
	for _, seq := range seqs {
		for lo := 0; lo < len(seq); lo += batch {
			seen = seen[:0]
			n := 0
			for _, f := range seq[lo:min(lo+batch, len(seq))] {
				if l := labelOf(labels, f); l >= 0 {
					if count[l] == 0 {
						seen = append(seen, l)
					}
					count[l]++
					n++
				}
			}
			if n > 0 {
				batches++
				sum += entropy(count, seen, n)
			}
		}
	}
	if batches == 0 {
		return nil
	}
	x := sum / float64(batches)
	return &x
}

func labelOf(labels []int32, f FileID) int32 {
	if f == NoFile {
		return -1
	}
	return labels[f]
}

// entropy is the entropy in bits of the counts of labels seen (n in all),
// which it resets to zero.
func entropy(count []int, seen []int32, n int) float64 {
	var h float64
	for _, l := range seen {
		p := float64(count[l]) / float64(n)
		h -= p * math.Log2(p)
		count[l] = 0
	}
	return h
}
