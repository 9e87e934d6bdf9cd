package rt

import (
	"context"
	"fmt"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// Serve runs the configured epochs and returns their statistics, summed
// over the ranks. It must run on every rank, on the goroutine that owns
// the communicator (for MPI, the locked main thread).
func (n *Node) Serve(ctx context.Context) ([]EpochStats, error) {
	firstPC, _ := n.m.RankPCs(n.me)
	io := newIOPool(n.shard, firstPC, n.cfg.IOWorkers)
	defer io.close()
	if n.m.MemBytes(n.me) >= n.m.ShardBytes(n.me) {
		io.resident = make(map[int]*chunkBuf)
	}
	reqs := make(chan Request, 1024)
	var all []EpochStats
	for e := 1; e <= n.cfg.Epochs; e++ {
		st, err := n.epoch(ctx, uint32(e), io, reqs)
		if err != nil {
			return all, err
		}
		if n.cfg.Report != nil {
			n.cfg.Report(st)
		}
		all = append(all, st)
	}
	return all, nil
}

// epoch serves one epoch: traces are gathered, the loop runs until every
// rank's clients are done, then the statistics are reduced.
func (n *Node) epoch(ctx context.Context, e uint32, io *ioPool, reqs chan Request) (EpochStats, error) {
	files := n.m.Files()
	own := GeneratedTrace(files, n.size, n.me, n.cfg.Seed, e)
	traces, err := gatherTraces(n.comm, own)
	if err != nil {
		return EpochStats{}, err
	}
	if err := n.p.Step(proto.EpochStart{Epoch: e, Traces: traces}); err != nil {
		return EpochStats{}, fmt.Errorf("rt: rank %d: epoch %d: %w", n.me, e, err)
	}
	l := &loop{n: n, p: n.p, comm: n.comm, io: io, reqs: reqs,
		waiting: make(map[int32]chan<- Delivery), files: make(map[proto.FileID]*file)}
	if err := l.carry(); err != nil {
		return EpochStats{}, err
	}
	start := time.Now()
	cons := startConsumers(ctx, n.cfg.Consume, n.cfg.Depth, len(own), files, reqs)
	err = l.serve(ctx, cons.done)
	secs := time.Since(start).Seconds()
	if err != nil {
		return EpochStats{}, err
	}
	<-cons.done
	left := int64(len(l.files))
	for _, f := range l.files {
		f.release()
	}
	if err := n.comm.Barrier(); err != nil {
		return EpochStats{}, err
	}
	return n.reduce(e, epochCounts{proto: n.p.Stats(), loop: l.stats, cons: cons.total, left: left, seconds: secs,
		expected: int64(files)}, cons)
}
