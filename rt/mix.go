package rt

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/brandrt/brandrt/proto"
)

// mixer measures, on rank 0, how random each epoch's order is beside a
// shuffle (proto.Mix, in Config.MixBatch). No rank plans the whole epoch
// (a rank plans its share: proto.WindowRank): every rank records the file
// it delivered at each of its positions, the ranks gather that to rank 0
// as the epoch ends (gatherOrder), and rank 0 measures it against the
// seed's traces, a true shuffle of the same files, and against the epoch
// before for the pairs that meet again.
type mixer struct {
	prev  proto.Orders // the epoch before, for the pairs that meet again
	epoch uint32       // prev's epoch; 0 for none
}

// measuring says whether the ranks measure the epochs' order: on the
// window policy with Config.MixBatch, on the seed's traces (with the
// clients' traces there is no shuffle to compare with). Every rank says
// the same, since every rank takes part in gathering the order.
func (n *Node) measuring() bool {
	return n.cfg.MixBatch > 0 && n.cfg.Policy == PolicyWindow && !n.cfg.ClientTraces
}

// ordersMeasured says whether the epoch resumed at res has its order
// measured (measuring): only one served whole from its start, since one
// resumed after files were delivered, on its plan or on another, has no
// record of those.
func (n *Node) ordersMeasured(res resumption) bool {
	return n.measuring() && res.Delivered == nil && startSum(res.Start) == 0
}

// measuresOrder says whether this rank measures the epochs' order: rank 0,
// when the ranks measure it.
func (n *Node) measuresOrder() bool { return n.me == 0 && n.measuring() }

// mixing is rank 0's measure of one epoch's order, in the background:
// the shuffle's figures (the traces') from the epoch's start, the order's
// once the ranks gathered it as the epoch ends (ordered), while the ranks
// sum the epoch's statistics. Only the order's half waits to the end.
type mixing struct {
	traces  [][]proto.FileID
	prev    [][]proto.FileID // the epoch before's order, for the pairs again; nil for none
	shuffle chan proto.Mix
	done    chan *proto.Mix
	order   [][]proto.FileID // the order measured, once ordered
}

// startMix starts measuring epoch e's order, of traces, where rank 0
// measures it (measured: the ranks record and gather it); nil elsewhere,
// and where it is not measured, which leaves the next epoch no pairs
// again to measure.
func (n *Node) startMix(e uint32, traces [][]proto.FileID, measured bool) *mixing {
	if !n.measuresOrder() || !measured {
		n.tally.mix = mixer{}
		return nil
	}
	x := &mixing{traces: traces, shuffle: make(chan proto.Mix, 1), done: make(chan *proto.Mix, 1)}
	var prevTraces [][]proto.FileID
	if e > 1 && n.tally.mix.epoch == e-1 {
		x.prev, prevTraces = n.tally.mix.prev.Files, n.tally.mix.prev.Traces
	}
	go func() { // the traces are not changed once the epoch starts
		x.shuffle <- proto.MeasureShuffle(n.data.m, n.cfg.MixBatch, nil, traces, prevTraces, x.prev != nil)
	}()
	return x
}

// ordered measures the order the ranks delivered (gathered to rank 0: the
// file at each position of every rank) once the shuffle's figures came.
func (n *Node) ordered(x *mixing, delivered [][]proto.FileID) {
	x.order = delivered
	go func() {
		m := <-x.shuffle
		proto.MeasureOrder(n.data.m, n.cfg.MixBatch, nil, delivered, x.prev, &m, measureCores())
		m.Batch = n.cfg.MixBatch
		x.done <- &m
	}()
}

// takeMix waits for epoch e's measure (x, from startMix; nil where none)
// and keeps its order and traces for the next epoch's pairs again. An
// epoch that ended early (whole false: the training stopped before every
// position was asked for) has no figures: its order is not an epoch's,
// and the next has no pairs again to measure.
func (n *Node) takeMix(e uint32, x *mixing, whole bool) *proto.Mix {
	if x == nil || x.order == nil || !whole { // (an order not gathered is not reached)
		n.tally.mix = mixer{}
		return nil // a measure still running ends on its own: its channels have room
	}
	m := <-x.done
	n.tally.mix = mixer{prev: proto.Orders{Files: x.order, Traces: x.traces}, epoch: e}
	return m
}

// measureCores is what rank 0 measures an epoch's order on as the epoch
// ends, since its next epoch waits for it: up to 8 of the cores Go runs
// on, each with 12 bytes of scratch per chunk (at ImageNet's size the
// order's half of the figures takes about 0.1 s of one core: proto's
// BenchmarkMeasureMix measures both halves).
func measureCores() proto.Cores {
	w := min(runtime.GOMAXPROCS(0), 8)
	return proto.Cores{Workers: w, Each: func(n int, f func(i, g int)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := range min(w, n) {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					f(i, g)
				}
			})
		}
		wg.Wait()
	}}
}
