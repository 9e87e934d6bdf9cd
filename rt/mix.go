package rt

import "github.com/brandrt/brandrt/proto"

// mixer measures, on rank 0, how random each epoch's order is beside a
// shuffle (proto.Mix, in Config.MixBatch). A rank plans only its share of
// an epoch (proto.WindowRank), so rank 0 plans the whole epoch for the
// measure, in the background: the window policy's plan says which file
// answers every position of every rank, and the seed's traces are a true
// shuffle of the same files.
type mixer struct {
	prev  proto.Orders      // the epoch before, for the pairs that meet again
	plan  *proto.WindowPlan // its whole plan, the next one's start
	epoch uint32            // prev's epoch; 0 for none
}

// mixResult is one epoch's measure, with the whole plan and order it
// measured.
type mixResult struct {
	mix   *proto.Mix
	plan  *proto.WindowPlan
	order proto.Orders
}

// startMix measures epoch e's order in the background and returns where
// the figures will come, or nil where none are measured: on ranks other
// than 0, with the paper policy (its order is not known ahead), with the
// clients' traces (no shuffle to compare with), and in an epoch resumed
// after files delivered on another plan (the epoch had two orders).
func (n *Node) startMix(e uint32, traces [][]proto.FileID, resumedRest bool) <-chan mixResult {
	if n.me != 0 || n.cfg.MixBatch <= 0 || n.cfg.Policy != PolicyWindow || n.cfg.ClientTraces || resumedRest {
		n.tally.mix = mixer{}
		return nil
	}
	var before *proto.WindowPlan
	prev := proto.Orders{}
	if n.tally.mix.epoch == e-1 {
		before, prev = n.tally.mix.plan, n.tally.mix.prev
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
				in.After, in.Resident = before.Drains, before.Resident
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
		out <- mixResult{mix: &x, plan: p, order: cur}
	}()
	return out
}

// takeMix waits for epoch e's measure (from startMix) and keeps its plan
// and order for the next epoch's.
func (n *Node) takeMix(e uint32, mix <-chan mixResult) *proto.Mix {
	r := <-mix
	n.tally.mix = mixer{}
	if r.mix != nil {
		n.tally.mix = mixer{prev: r.order, plan: r.plan, epoch: e}
	}
	return r.mix
}
