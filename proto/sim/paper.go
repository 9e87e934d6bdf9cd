package sim

import (
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// paper is the papers' protocol (package proto's Rank state machine) in
// one of its variants, every rank in one process (inproc.Cluster):
// each round, every message and chunk read in flight completes, and each
// rank's clients keep Config.Inflight requests outstanding.
type paper struct {
	cfg Config
	v   proto.Variant
	c   *inproc.Cluster
}

func init() {
	for _, v := range proto.Variants {
		register(v.String(), "paper", func(cfg Config, sizes [][]int64, m *proto.Mapping) (Policy, error) {
			return newPaper(cfg, sizes, m, v)
		})
	}
}

func newPaper(cfg Config, sizes [][]int64, m *proto.Mapping, v proto.Variant) (Policy, error) {
	opts := inproc.Options{
		Files: make([]int, len(sizes)), K: cfg.ChunkFiles, Sizes: sizes, Chunks: cfg.DatasetChunks, MemFraction: cfg.MemFraction,
		Window: cfg.Window, Variant: v, Seed: cfg.Seed, Light: true, RemoteMemBytes: remoteBytes(cfg, m),
	}
	for r := range sizes {
		opts.Files[r] = len(sizes[r])
	}
	c, err := inproc.New(opts)
	if err != nil {
		return nil, err
	}
	return &paper{cfg: cfg, v: v, c: c}, nil
}

// Epoch plays the epoch through the cluster. Each epoch's Delivered is
// new, and PlayEpoch answers every position, so nothing writes into the
// returned order later.
func (p *paper) Epoch(e int, traces [][]proto.FileID, progress func(done, total int64)) ([][]proto.FileID, Result, error) {
	if err := p.c.PlayEpoch(uint32(e), traces, p.cfg.Inflight, progress); err != nil {
		return nil, Result{}, err
	}
	s := p.c.Stats()
	return p.c.Delivered, Result{
		Requests: s.Requests, Delivered: s.Delivered, LocalHits: s.LocalHits,
		Misses: s.Misses, ChunkReads: s.ChunkReads, ChunkBytes: s.ChunkBytes, BytesDelivered: s.BytesDelivered,
		FillRate: ratio(s.FilesLoaded, s.FilesRead), RemoteRequests: s.RemoteRequests, Redirects: s.Redirects,
		Prefetched: s.Prefetched, PrefetchHits: s.PrefetchHits, PeakMemBytes: s.PeakMem,
	}, nil
}
