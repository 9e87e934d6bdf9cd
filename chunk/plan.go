package chunk

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/dustin/go-humanize"
)

// DefaultChunkBytes is the most bytes of a chunk unless told (pack's
// --chunk-size). Measured (BENCHMARKS.md, "Chunk size"): four readers of
// 16 MiB chunks, as serve's four I/O workers within its default --read-mem
// of 64 MiB, get 94 % of the emulated NAS's best rate (290 of 310 MB/s)
// and 1.3 GB/s from the local disk; 4 MiB chunks get 83 % of the NAS's,
// and 64 MiB ones would go one at a time within 64 MiB (287 MB/s).
const DefaultChunkBytes = 16 << 20

// MaxChunkBytes is the most bytes a chunk may be asked to hold: a chunk is
// read whole into memory.
const MaxChunkBytes = 16 << 30

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
// shuffle of the listing), cut into chunks, the chunks split over the
// ranks in runs whose lengths differ by at most one.
//
// Chunks hold K files each (the last fewer), or, when Params.ChunkBytes is
// set, as many files as fit in ChunkBytes and at most K: a chunk ends
// before the file that would take it past ChunkBytes, so a file larger
// than that is a chunk of its own.
type Plan struct {
	// K is the most files a chunk holds: the limit asked for, or with
	// ChunkBytes the most any chunk got.
	K       int
	Ranks   int
	Seed    uint64
	Inputs  []Input
	Classes []string
	Params  PackParams
	starts  []int // chunk c holds Inputs[starts[c]:starts[c+1]]
}

// NewPlan shuffles inputs with seed, checks K (see CheckK), cuts the
// chunks (see Plan), and checks that every rank gets at least one chunk.
func NewPlan(inputs []Input, classes []string, k, ranks int, seed uint64, params PackParams) (*Plan, error) {
	var errs []error
	if err := CheckK(k, int64(len(inputs))); err != nil {
		errs = append(errs, fmt.Errorf("chunk: %w", err))
	}
	if ranks < 1 {
		errs = append(errs, fmt.Errorf("chunk: %d shards: there must be at least 1", ranks))
	}
	if params.ChunkBytes < 0 {
		errs = append(errs, fmt.Errorf("chunk: chunk size %d bytes: want a positive size", params.ChunkBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := &Plan{K: k, Seed: seed, Inputs: append([]Input(nil), inputs...), Classes: classes, Params: params}
	rng := rand.New(rand.NewPCG(seed, 0x9ac4))
	rng.Shuffle(len(p.Inputs), func(i, j int) { p.Inputs[i], p.Inputs[j] = p.Inputs[j], p.Inputs[i] })
	p.cut()
	if err := p.SetShards(ranks); err != nil {
		return nil, err
	}
	return p, nil
}

// SetShards splits the chunks into ranks shards (NewPlan's split, with
// another number): each must get at least one chunk.
func (p *Plan) SetShards(ranks int) error {
	if c := p.Chunks(); c < ranks {
		return fmt.Errorf("chunk: %d files make %d chunks%s, too few for %d shards", len(p.Inputs), c, p.chunkRule(), ranks)
	}
	p.Ranks = ranks
	return nil
}

// cut sets the chunks' starts and, for chunks cut by size, K to the most
// files a chunk got.
func (p *Plan) cut() {
	p.starts = []int{0}
	limit, bytes := p.Params.ChunkBytes, int64(0)
	for i, in := range p.Inputs {
		if first := p.starts[len(p.starts)-1]; i-first == p.K || i > first && limit > 0 && bytes+in.Size > limit {
			p.starts, bytes = append(p.starts, i), 0
		}
		bytes += in.Size
	}
	p.starts = append(p.starts, len(p.Inputs))
	if limit > 0 {
		p.K = 1
		for c := range p.Chunks() {
			p.K = max(p.K, p.starts[c+1]-p.starts[c])
		}
	}
}

// chunkRule says how the chunks were cut, for messages.
func (p *Plan) chunkRule() string {
	if p.Params.ChunkBytes > 0 {
		return fmt.Sprintf(" of at most %s", humanize.IBytes(uint64(p.Params.ChunkBytes)))
	}
	return fmt.Sprintf(" of %d", p.K)
}

// Chunks returns the number of chunks of the dataset.
func (p *Plan) Chunks() int { return len(p.starts) - 1 }

// Shard returns rank r's chunks [c0, c1) (global chunk numbers) and files
// [f0, f1) (file ids).
func (p *Plan) Shard(r int) (c0, c1 int, f0, f1 int64) {
	c := p.Chunks()
	c0, c1 = r*c/p.Ranks, (r+1)*c/p.Ranks
	return c0, c1, int64(p.starts[c0]), int64(p.starts[c1])
}

// chunkFirst returns the file id of global chunk c's first file.
func (p *Plan) chunkFirst(c int) int64 { return int64(p.starts[c]) }

// shardInfo returns what the plan knows of rank r's shard.
func (p *Plan) shardInfo(r int) ShardInfo {
	c0, c1, f0, f1 := p.Shard(r)
	var bytes int64
	for _, in := range p.Inputs[f0:f1] {
		bytes += in.Size
	}
	info := ShardInfo{Rank: r, FirstFile: f0, Files: f1 - f0, Bytes: bytes, Chunks: c1 - c0}
	if p.Params.ChunkBytes > 0 {
		for c := c0; c < c1; c++ {
			info.ChunkFiles = info.ChunkFiles.add(p.starts[c+1] - p.starts[c])
		}
	}
	return info
}

// chunkLayout returns the inputs of global chunk c and the extents their
// bytes take in its chunk file.
func (p *Plan) chunkLayout(c int) ([]Input, []FileExtent, int64) {
	ins := p.Inputs[p.starts[c]:p.starts[c+1]]
	ext := make([]FileExtent, len(ins))
	off := HeaderSize(len(ins))
	for i, in := range ins {
		ext[i] = FileExtent{Offset: off, Size: uint32(in.Size)}
		off += in.Size
	}
	return ins, ext, off
}
