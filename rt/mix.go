package rt

import "github.com/brandrt/brandrt/proto"

// mixer measures, on rank 0, how random each epoch's order is beside a
// shuffle (proto.Mix, in Config.MixBatch). A rank plans only its share of
// an epoch (proto.WindowRank), so rank 0 plans the whole epoch for the
// measure, in the background: the window policy's plan says which file
// answers every position of every rank, and the seed's traces are a true
// shuffle of the same files.
type mixer struct {
	prev  proto.Orders // the epoch before, for the pairs that meet again
	after planAfter    // what its whole plan left the next
	epoch uint32       // prev's epoch; 0 for none
}

// planAfter is what an epoch's whole plan leaves the next: its drains
// and the chunks it keeps (WindowInput.After, Resident).
type planAfter struct {
	drains   []proto.Drain
	resident []bool
}

// mixResult is one epoch's measure, with the order it measured and what
// its whole plan left the next.
type mixResult struct {
	mix   *proto.Mix
	order proto.Orders
	after planAfter
}

// startMix measures epoch e's order in the background and returns where
// the figures will come, or nil where none are measured: on ranks other
// than 0, with the paper policy (its order is not known ahead), with the
// clients' traces (no shuffle to compare with), and in an epoch resumed
// after files delivered on another plan (the epoch had two orders).
func (n *Node) startMix(e uint32, traces [][]proto.FileID, resumedRest bool) <-chan mixResult {
	if !n.measuresOrder() || resumedRest {
		n.tally.mix = mixer{}
		return nil
	}
	var before *planAfter
	prev := proto.Orders{}
	if n.tally.mix.epoch == e-1 {
		after := n.tally.mix.after // the goroutine's own copy
		before, prev = &after, n.tally.mix.prev
	}
	in := n.data.window.Input()
	in.Epoch, in.Traces = e, traces
	out := make(chan mixResult, 1)
	go func() { // the traces are not changed once the epoch starts
		var p *proto.WindowPlan
		var err error
		switch {
		case e > 1 && before == nil: // resumed: the epochs before as the rank planned them
			p, err = proto.FreshPlan(in, e)
		default:
			if before != nil {
				in.After, in.Resident = before.drains, before.resident
			}
			p, err = proto.PlanWindow(in)
		}
		if err != nil { // the rank planned its share of it: not reached
			out <- mixResult{}
			return
		}
		cur := proto.Orders{Files: p.Files, Traces: traces}
		x := proto.MeasureMix(n.data.m, n.cfg.MixBatch, nil, cur, prev)
		x.Batch = n.cfg.MixBatch
		out <- mixResult{mix: &x, order: cur, after: planAfter{p.Drains, p.Resident}}
	}()
	return out
}

// measuresOrder says whether this rank measures the epochs' order
// (startMix): rank 0 of the window policy with Config.MixBatch, on the
// seed's traces.
func (n *Node) measuresOrder() bool {
	return n.me == 0 && n.cfg.MixBatch > 0 && n.cfg.Policy == PolicyWindow && !n.cfg.ClientTraces
}

// takeMix waits for epoch e's measure (from startMix) and keeps its order
// and what its plan left for the next epoch's.
func (n *Node) takeMix(e uint32, mix <-chan mixResult) *proto.Mix {
	r := <-mix
	n.tally.mix = mixer{}
	if r.mix != nil {
		n.tally.mix = mixer{prev: r.order, after: r.after, epoch: e}
	}
	return r.mix
}
