package rt

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// nextEpoch is what came for the next epoch before it began (Node.next):
// the Asks and Ends of its clients, traces offered for it, and the files
// read for it while this one drains (proto.Ready.Early), with what those
// reads cost.
type nextEpoch struct {
	held   []ClientEvent
	offers map[uint32]TraceOffer
	files  map[proto.FileID]*file
	stats  loopStats
}

// Announce makes the rank announce each epoch as it starts: onEpoch
// with the epoch and this rank's trace length; and, for the epoch a
// resumed job takes up, onResume just before it: its clients begin at
// position from, and rest says that the epoch goes on on this job's own
// plan of what was left (another number of ranks, another --mem), not on
// the plan of the job that saved the state. Either may be nil. Call it
// before Serve.
func (n *Node) Announce(onEpoch func(epoch uint32, positions int), onResume func(epoch uint32, from int, rest bool)) {
	n.onEpoch, n.onResume = onEpoch, onResume
}

// Serve runs the configured epochs and returns their statistics, summed
// over the ranks. It must run on every rank, on the one goroutine that
// makes MPI calls while it runs. With MPI_THREAD_MULTIPLE that need not
// be the thread that initialised MPI, and better not: waiting on a locked
// thread costs a handoff between OS threads every time.
func (n *Node) Serve(ctx context.Context) ([]EpochStats, error) {
	n.training.begin()
	io := n.newIOPool()
	defer io.close()
	n.sayResidency()
	reqs := n.clients.events
	pool := &recvPool{mem: n.site.Memory}
	defer pool.drain()
	defer n.dropAhead()
	var all []EpochStats
	first, res, resumed := uint32(1), resumption{}, StartOffer{}
	if n.cfg.MayResume() {
		var err error
		if first, res, resumed, err = n.resumePoint(ctx); err != nil {
			return nil, err
		}
		done := make(chan struct{})
		defer close(done)
		go n.answerLateStarts(resumed, done)
	}
	for e := first; e <= uint32(n.cfg.Epochs); e++ {
		st, err := n.epoch(ctx, e, io, pool, reqs, res, resumed)
		res, resumed = resumption{}, StartOffer{}
		if err != nil {
			return all, err
		}
		over := st.RanksTrainingOver == n.size
		if over && st.FilesDelivered+st.FilesSkipped+st.FailedDeliveries == 0 {
			break // an epoch no training process read: not one to report
		}
		if n.site.Report != nil {
			n.site.Report(st)
		}
		all = append(all, st)
		if n.cfg.OnDamage == "skip" && st.FilesSkipped > n.skipLimit() { // every rank sees the same sums
			return all, everyRank{n.tooManySkipped(st.FilesSkipped, fmt.Sprintf("in epoch %d by the ranks together", e))}
		}
		if over {
			break
		}
	}
	return all, nil
}

// newIOPool starts the rank's I/O workers, reading its shard's chunks
// within its read memory (Config.IOWorkers, readMem).
func (n *Node) newIOPool() *ioPool {
	firstPC, _ := n.data.m.RankPCs(n.me)
	io := newIOPool(n.data.shard, n.data.source, firstPC, n.cfg.IOWorkers, n.newStorageWatch(), n.replaced, n.site.Memory)
	io.readMem, io.bytes = n.readMem(), func(pc int) int64 { return mibUp(n.data.chunkBytes[pc-firstPC]) }
	return io
}

// epoch serves one epoch: its traces are computed (or, offered by the
// clients, gathered), the loop runs until every
// rank's clients are done, then the statistics are reduced. With res,
// the epoch resumes there (Config.Resume), and resumed is told when it
// starts.
func (n *Node) epoch(ctx context.Context, e uint32, io *ioPool, pool *recvPool, reqs chan ClientEvent, res resumption, resumed StartOffer) (EpochStats, error) {
	traces, own, offer, err := n.traces(ctx, e, res)
	if err != nil {
		return EpochStats{}, err
	}
	if err := n.begin(e, traces, res); err != nil {
		resumed.answer(err)
		return EpochStats{}, err
	}
	measured := n.ordersMeasured(res)
	mix := n.startMix(e, traces, measured)
	from := int(res.from(n.me))
	if n.onResume != nil && resumed.began != nil {
		n.onResume(e, from, res.Delivered != nil)
	}
	l, err := n.newLoop(e, len(own), from, io, pool, reqs, measured)
	if err != nil {
		return EpochStats{}, err
	}
	if n.onEpoch != nil {
		n.onEpoch(e, len(own))
	}
	offer.answer(nil)
	resumed.answer(nil)
	if err := l.takeHeld(); err != nil {
		return EpochStats{}, err
	}
	cons := startConsumers(ctx, n.cfg.Consume, n.cfg.Depth, e, from, len(own), n.cfg.Pause, reqs)
	err = l.serve(ctx)
	l.clock.markFirst() // if no request came at all, the whole epoch was idle
	secs := time.Since(l.clock.first).Seconds()
	if err != nil {
		return EpochStats{}, err
	}
	<-cons.done
	st, err := n.closeEpoch(ctx, l, mix, epochCounts{cons: cons.total, seconds: secs, expected: positions(traces) - startSum(res.Start), before: res.before()})
	if err == nil {
		st.Order = n.takeMix(e, mix, !st.EndedEarly)
	}
	return st, err
}

// traces returns epoch e's traces, this rank's own, and the clients'
// offer they came from (if so): the rest of an epoch begun on another
// plan (res), or the epoch's whole.
func (n *Node) traces(ctx context.Context, e uint32, res resumption) ([][]proto.FileID, []int32, TraceOffer, error) {
	if res.Delivered == nil {
		return n.epochTraces(ctx, e)
	}
	traces := proto.RestTraces(n.data.m.Files(), n.size, n.cfg.Seed, e, res.Delivered)
	own := make([]int32, len(traces[n.me]))
	for i, f := range traces[n.me] {
		own[i] = int32(f)
	}
	return traces, own, TraceOffer{}, nil
}

// begin steps epoch e's start into the machine, resuming at res, and
// starts the count of deliveries per file.
func (n *Node) begin(e uint32, traces [][]proto.FileID, res resumption) error {
	if err := n.p.Step(proto.EpochStart{Epoch: e, Traces: traces, Start: res.Start, Delivered: res.Delivered}); err != nil {
		return fmt.Errorf("rt: rank %d: epoch %d: %w", n.me, e, err)
	}
	n.tally.counts = make([]int32, n.data.m.Files())
	return nil
}

// newLoop makes the loop of epoch e, begun, for a trace of traceLen
// positions whose first from were delivered before a restart (measured:
// whether rank 0 measures its order, which the loop then records, as for
// Site.Order): it takes over what was read for the epoch before it began,
// carries out what the machine asked at the start, and starts the clock.
func (n *Node) newLoop(e uint32, traceLen, from int, io *ioPool, pool *recvPool, reqs <-chan ClientEvent, measured bool) (*loop, error) {
	l := &loop{n: n, p: n.p, io: io, reqs: reqs, epoch: e, files: n.next.files, stats: n.next.stats,
		asks: newAsks(traceLen, from, n.trainingOver(), n.site.Order != nil || measured), link: newLink(n.me, n.size, n.comm, pool, e)}
	n.next.files, n.next.stats = nil, loopStats{}
	n.readers.begin(traceLen)
	if l.files == nil {
		l.files = make(map[proto.FileID]*file)
	}
	if err := l.carry(); err != nil {
		return nil, err
	}
	l.clock.begin()
	return l, nil
}

// takeHeld steps what the clients sent for this epoch before it began.
func (l *loop) takeHeld() error {
	held := l.n.next.held
	l.n.next.held = nil
	for _, r := range held {
		if err := l.client(r); err != nil {
			return err
		}
	}
	return nil
}

// closeEpoch lets go of the files the loop still holds, waits for every
// rank to end the epoch, gathers the order of the deliveries to rank 0
// where the loop recorded it, hands it over there (Site.Order) and starts
// measuring it (mix, where rank 0 measures it), and returns the epoch's
// statistics, summed over the ranks, from c and what the loop counted.
func (n *Node) closeEpoch(ctx context.Context, l *loop, mix *mixing, c epochCounts) (EpochStats, error) {
	left := int64(len(l.files))
	for _, f := range l.files {
		f.release()
	}
	if err := n.quietBarrier(ctx, fmt.Sprintf("for every rank to end epoch %d (rank 0 gathers them)", l.epoch)); err != nil { // MPI's would spin while a rank is late
		return EpochStats{}, err
	}
	if l.asks.order != nil {
		order, err := gatherOrder(n.comm, l.asks.order)
		if err != nil {
			return EpochStats{}, err
		}
		if order != nil && mix != nil {
			n.ordered(mix, order)
		}
		if order != nil && n.site.Order != nil {
			n.site.Order(l.epoch, order)
		}
	}
	c.proto, c.loop, c.left = n.p.Stats(), l.stats, left
	c.idle, c.idleCPU, c.firstWait = l.clock.first.Sub(l.clock.start).Seconds(), l.clock.idleCPU, l.clock.firstWait()
	c.verified, c.ended, c.over = n.cfg.Consume > 0, l.asks.endedBefore(), overCount(n.trainingOver())
	return n.reduce(l.epoch, c)
}

func overCount(over bool) int64 {
	if over {
		return 1
	}
	return 0
}

// dropAhead lets go of the files read for an epoch that will not come.
func (n *Node) dropAhead() {
	for _, f := range n.next.files {
		f.release()
	}
	n.next.files = nil
}

// positions counts the positions of every rank's trace.
func positions(traces [][]proto.FileID) int64 {
	n := 0
	for _, t := range traces {
		n += len(t)
	}
	return int64(n)
}

// processCPU returns the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startSum counts the positions before start.
func startSum(start []int32) int64 {
	var n int64
	for _, sn := range start {
		n += int64(sn)
	}
	return n
}

// sayResidency says how much of its shard the rank keeps in memory from
// one epoch to the next, and what it reads every epoch, when its budget
// holds part of the shard.
func (n *Node) sayResidency() {
	mem, shard := n.data.m.MemBytes(n.me), n.data.m.ShardBytes(n.me)
	if mem >= shard || n.cfg.Policy != PolicyWindow {
		return
	}
	keep := int64(n.cfg.Keep * float64(mem))
	fmt.Fprintf(n.site.Log, "brandrt: rank %d: --mem holds %.1f%% of its shard (%s of %s): each epoch after the first begins with up to %s "+
		"of the chunks the one before read last (--keep %g), and reads about %s from storage; --mem %d (%s) would keep the whole shard and read nothing after epoch 1\n",
		n.me, 100*float64(mem)/float64(shard), mib(mem), mib(shard), mib(keep), n.cfg.Keep, mib(shard-keep), shard, mib(shard))
}
