package proto

import (
	"math"
	"slices"
)

// Mix is how random an epoch's delivered order is, measured beside a true
// shuffle of the same files (a seed's traces) in batches of Batch
// positions of one rank. simulate prints it for every policy, and serve
// for each epoch of the window policy, from the order its ranks
// delivered.
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
// id, -1 for none), the label entropy. It is MeasureShuffle's figures of
// the traces and MeasureOrder's of the files, together.
func MeasureMix(m *Mapping, batch int, labels []int32, cur, prev Orders) Mix {
	x := MeasureShuffle(m, batch, labels, cur.Traces, prev.Traces, prev.Files != nil)
	MeasureOrder(m, batch, labels, cur.Files, prev.Files, &x, Cores{})
	return x
}

// Cores runs the calls f(i, w), for each i below n, on up to Workers
// goroutines at once (w, below Workers, names the one running it, for
// its scratch space) and returns once all are done. proto starts no
// goroutine: its caller gives it Each (serve's rank 0 does). The zero
// value runs them in turn, on the caller's.
type Cores struct {
	Workers int
	Each    func(n int, f func(i, w int))
}

// each runs f for each i below n, as c says.
func (c Cores) each(n int, f func(i, w int)) {
	if c.Each == nil || c.Workers <= 1 {
		for i := range n {
			f(i, 0)
		}
		return
	}
	c.Each(n, f)
}

// workers is how many run at once: the scratch spaces to make.
func (c Cores) workers() int {
	if c.Each == nil {
		return 1
	}
	return max(c.Workers, 1)
}

// MeasureShuffle returns the figures of a shuffle of an epoch's files
// (Mix's …Shuffle fields): of traces, in batches of batch positions, with
// the pairs again from prev (the epoch before's traces) where again is
// set. The traces are known when the epoch begins, its order only when
// it ends (MeasureOrder).
func MeasureShuffle(m *Mapping, batch int, labels []int32, traces, prev [][]FileID, again bool) Mix {
	var x Mix
	seqs := chunkSeqs(m, traces, Cores{})
	x.DistinctChunksPerBatchShuffle, x.ChunkSpanShuffle = randomness(m.PCs(), seqs, batch, Cores{})
	x.DistinctFirstShuffle, x.DistinctLastShuffle = edges(m.PCs(), seqs, batch, Cores{})
	if again {
		x.PairsAgainShuffle = pairsAgain(m.Files(), prev, traces, batch, Cores{})
	}
	if labels != nil {
		x.LabelEntropyShuffle = labelEntropy(labels, traces, batch)
	}
	return x
}

// MeasureOrder adds to x the figures of an epoch's delivered order, files
// (per rank, in position order), in batches of batch positions, with the
// pairs again from prev (the epoch before's, or nil). It measures the
// ranks' sequences on cores (the figures are the same, to the bit, on
// any number): serve's rank 0 waits for it as an epoch ends, where
// MeasureShuffle ran while the epoch was served. Each core holds 12
// bytes per chunk of scratch.
func MeasureOrder(m *Mapping, batch int, labels []int32, files, prev [][]FileID, x *Mix, cores Cores) {
	seqs := chunkSeqs(m, files, cores)
	x.DistinctChunksPerBatch, x.ChunkSpan = randomness(m.PCs(), seqs, batch, cores)
	x.DistinctFirst, x.DistinctLast = edges(m.PCs(), seqs, batch, cores)
	if prev != nil {
		x.PairsAgain = pairsAgain(m.Files(), prev, files, batch, cores)
	}
	if labels != nil {
		x.LabelEntropy = labelEntropy(labels, files, batch)
	}
}

// randomness measures, per rank, how clustered by chunk an ordered
// sequence of files is (as chunkSeqs gives it, among pcs chunks), and
// averages over ranks: the mean number of distinct PCs in consecutive
// batches of batch files, and the mean over PCs of the span between the
// first and last of its files, as a fraction of the sequence's length. A
// uniform shuffle gives nearly batch distinct chunks and spans near 1;
// chunk-at-a-time delivery gives few chunks and spans near 0.
func randomness(pcs int, seqs [][]int32, batch int, cores Cores) (distinct, span float64) {
	scratch := make([][3][]int32, cores.workers())
	return meanPerSeq(len(seqs), cores, func(i, w int) (float64, float64) {
		if scratch[w][0] == nil {
			scratch[w] = [3][]int32{make([]int32, pcs), make([]int32, pcs), make([]int32, pcs)}
		}
		return batchDistinct(seqs[i], batch, scratch[w][0]), meanSpan(seqs[i], scratch[w][1], scratch[w][2])
	})
}

// meanPerSeq is the means over n sequences of the two figures f gives
// for sequence i (on the core w), measured on cores and added in the
// sequences' order, as one core would add them: the same bits on any
// number; 0 and 0 for none.
func meanPerSeq(n int, cores Cores, f func(i, w int) (float64, float64)) (a, b float64) {
	if n == 0 {
		return 0, 0
	}
	as, bs := make([]float64, n), make([]float64, n)
	cores.each(n, func(i, w int) { as[i], bs[i] = f(i, w) })
	for i := range n {
		a += as[i]
		b += bs[i]
	}
	return a / float64(n), b / float64(n)
}

// chunkSeqs maps each non-empty sequence of files to the sequence of
// their PCs, skipping NoFile, in order, on cores.
func chunkSeqs(m *Mapping, seqs [][]FileID, cores Cores) [][]int32 {
	all := make([][]int32, len(seqs))
	cores.each(len(seqs), func(i, _ int) {
		pcs := make([]int32, 0, len(seqs[i]))
		for _, f := range seqs[i] {
			if f != NoFile {
				pcs = append(pcs, int32(m.PC(f)))
			}
		}
		all[i] = pcs
	})
	return slices.DeleteFunc(all, func(pcs []int32) bool { return len(pcs) == 0 })
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
func edges(pcs int, seqs [][]int32, batch int, cores Cores) (first, last float64) {
	stamps := make([][]int32, cores.workers())
	return meanPerSeq(len(seqs), cores, func(i, w int) (float64, float64) {
		if stamps[w] == nil {
			stamps[w] = make([]int32, pcs)
		}
		n := min(len(seqs[i]), max(batch, len(seqs[i])/100))
		return batchDistinct(seqs[i][:n], batch, stamps[w]), batchDistinct(seqs[i][len(seqs[i])-n:], batch, stamps[w])
	})
}

// pairsAgain is the fraction of the pairs of files that shared a batch
// (of one rank) in epoch prev and share one again in epoch cur: what a
// model sees repeat from one epoch to the next. A shuffle gives about
// (batch − 1) / (files − 1). nil when prev has no pairs.
func pairsAgain(files int, prev, cur [][]FileID, batch int, cores Cores) *float64 {
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
	again, pairs := make([]int64, len(prev)), make([]int64, len(prev))
	scratch := make([][]int64, cores.workers())
	cores.each(len(prev), func(r, w int) {
		if scratch[w] == nil {
			scratch[w] = make([]int64, 0, batch)
		}
		seq := prev[r]
		for lo := 0; lo < len(seq); lo += batch {
			keys := scratch[w][:0]
			for _, f := range seq[lo:min(lo+batch, len(seq))] {
				if f != NoFile {
					keys = append(keys, key[f])
				}
			}
			n := int64(len(keys))
			pairs[r] += n * (n - 1) / 2
			slices.Sort(keys)
			for i := 0; i < len(keys); {
				j := i
				for j < len(keys) && keys[j] == keys[i] {
					j++
				}
				if c := int64(j - i); keys[i] >= 0 {
					again[r] += c * (c - 1) / 2
				}
				i = j
			}
		}
	})
	var a, p int64
	for r := range prev {
		a, p = a+again[r], p+pairs[r]
	}
	if p == 0 {
		return nil
	}
	x := float64(a) / float64(p)
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
