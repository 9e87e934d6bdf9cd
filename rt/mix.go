package rt

import "github.com/brandrt/brandrt/proto"

// mixer measures, on rank 0, how random each epoch's order is beside a
// shuffle (proto.Mix, in Config.MixBatch): the window policy's plan says
// which file answers every position of every rank before the epoch
// begins, and the seed's traces are a true shuffle of the same files.
type mixer struct {
	prev  proto.Orders // the epoch before, for the pairs that meet again
	epoch uint32       // prev's epoch; 0 for none
}

// startMix measures epoch e's order in the background and returns where
// the figures will come, or nil where none are measured: on ranks other
// than 0, with the paper policy (its order is not known ahead), with the
// clients' traces (no shuffle to compare with), and in an epoch resumed
// after files delivered on another plan (the epoch had two orders).
func (n *Node) startMix(e uint32, traces [][]proto.FileID, resumedRest bool) <-chan *proto.Mix {
	plan := n.p.Plan()
	if n.me != 0 || n.cfg.MixBatch <= 0 || plan == nil || n.cfg.ClientTraces || resumedRest {
		n.tally.mix = mixer{}
		return nil
	}
	cur, prev := proto.Orders{Files: plan.Files, Traces: traces}, proto.Orders{}
	if n.tally.mix.epoch == e-1 {
		prev = n.tally.mix.prev
	}
	n.tally.mix = mixer{prev: cur, epoch: e}
	out := make(chan *proto.Mix, 1)
	go func() { // the plan and the traces are not changed once the epoch starts
		x := proto.MeasureMix(n.data.m, n.cfg.MixBatch, nil, cur, prev)
		x.Batch = n.cfg.MixBatch
		out <- &x
	}()
	return out
}
