package chunk

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// MaxK is the most files a chunk may hold: 65536. A chunk is read whole
// and the runtime keeps per-chunk state sized by K, so a larger K buys
// nothing and a mistyped one would cost gigabytes; the index stores K in
// 32 bits.
const MaxK = 1 << 16

// CheckK returns an error unless 1 ≤ k ≤ min(files, MaxK): a chunk holds
// at least one file, at most MaxK, and no more than the dataset has.
func CheckK(k int, files int64) error {
	switch {
	case k < 1:
		return fmt.Errorf("chunk size K=%d: a chunk holds at least 1 file", k)
	case k > MaxK:
		return fmt.Errorf("chunk size K=%d files is more than the limit of %d", k, MaxK)
	case int64(k) > files:
		return fmt.Errorf("chunk size K=%d files is more than the dataset's %d files", k, files)
	}
	return nil
}

// Plan is what a pack writes: the inputs in file id order (a seeded
// shuffle of the listing), cut into chunks of K files, the chunks split
// over the ranks in runs whose lengths differ by at most one.
type Plan struct {
	K       int
	Ranks   int
	Seed    uint64
	Inputs  []Input
	Classes []string
	Params  PackParams
}

// NewPlan shuffles inputs with seed and checks K (see CheckK) and that
// every rank gets at least one chunk.
func NewPlan(inputs []Input, classes []string, k, ranks int, seed uint64, params PackParams) (*Plan, error) {
	var errs []error
	if err := CheckK(k, int64(len(inputs))); err != nil {
		errs = append(errs, fmt.Errorf("chunk: %w", err))
	}
	if ranks < 1 {
		errs = append(errs, fmt.Errorf("chunk: %d shards: there must be at least 1", ranks))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := &Plan{K: k, Ranks: ranks, Seed: seed, Inputs: append([]Input(nil), inputs...), Classes: classes, Params: params}
	if c := p.Chunks(); c < ranks {
		return nil, fmt.Errorf("chunk: %d files make %d chunks of %d, too few for %d shards", len(inputs), c, k, ranks)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9ac4))
	rng.Shuffle(len(p.Inputs), func(i, j int) { p.Inputs[i], p.Inputs[j] = p.Inputs[j], p.Inputs[i] })
	return p, nil
}

// Chunks returns the number of chunks of the dataset.
func (p *Plan) Chunks() int { return (len(p.Inputs) + p.K - 1) / p.K }

// Shard returns rank r's chunks [c0, c1) (global chunk numbers) and files
// [f0, f1) (file ids).
func (p *Plan) Shard(r int) (c0, c1 int, f0, f1 int64) {
	c := p.Chunks()
	c0, c1 = r*c/p.Ranks, (r+1)*c/p.Ranks
	return c0, c1, int64(c0 * p.K), int64(min(c1*p.K, len(p.Inputs)))
}

// shardInfo returns what the plan knows of rank r's shard.
func (p *Plan) shardInfo(r int) ShardInfo {
	c0, c1, f0, f1 := p.Shard(r)
	var bytes int64
	for _, in := range p.Inputs[f0:f1] {
		bytes += in.Size
	}
	return ShardInfo{Rank: r, FirstFile: f0, Files: f1 - f0, Bytes: bytes, Chunks: c1 - c0}
}

// chunkLayout returns the inputs of global chunk c and the extents their
// bytes take in its chunk file.
func (p *Plan) chunkLayout(c int) ([]Input, []FileExtent, int64) {
	ins := p.Inputs[c*p.K : min((c+1)*p.K, len(p.Inputs))]
	ext := make([]FileExtent, len(ins))
	off := HeaderSize(len(ins))
	for i, in := range ins {
		ext[i] = FileExtent{Offset: off, Size: uint32(in.Size)}
		off += in.Size
	}
	return ins, ext, off
}
