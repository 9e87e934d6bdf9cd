package rt

import (
	"context"
	"fmt"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// gatherTraces gives every rank every rank's trace.
func gatherTraces(comm collectives.Comm, own []int32) ([][]proto.FileID, error) {
	all, counts, err := comm.Allgatherv(own)
	if err != nil {
		return nil, err
	}
	return split(all, counts), nil
}

// split cuts all into counts[r] file ids for each rank r, in order.
func split(all []int32, counts []int) [][]proto.FileID {
	traces := make([][]proto.FileID, len(counts))
	off := 0
	for r, c := range counts {
		t := make([]proto.FileID, c)
		for i, f := range all[off : off+c] {
			t[i] = proto.FileID(f)
		}
		traces[r], off = t, off+c
	}
	return traces
}

// gatherOrder gathers every rank's own (the file delivered at each of its
// positions) to rank 0 and returns there each rank's, in rank order; nil
// on the other ranks.
func gatherOrder(comm collectives.Comm, own []int32) ([][]proto.FileID, error) {
	all, counts, err := comm.Gatherv(own, 0)
	if err != nil || comm.Rank() != 0 {
		return nil, err
	}
	return split(all, counts), nil
}

// TraceOffer is a trace supplied by a client for epoch Epoch: the file ids
// this rank's clients will ask for, in that order. The rank answers on
// Reply (which must have room for one error) once every rank has offered
// its trace for the epoch: nil when the epoch starts with it, or why the
// traces were refused, in which case every rank waits for new ones.
type TraceOffer struct {
	Epoch uint32
	Files []int32
	Reply chan<- error
}

// Traces returns where clients offer their traces, with
// Config.ClientTraces; without it every offer is refused.
func (n *Node) Traces() chan<- TraceOffer { return n.clients.offers }

func (o TraceOffer) answer(err error) {
	if o.Reply != nil {
		o.Reply <- err
	}
}

// seedTraces returns every rank's trace for epoch e, drawn from the
// seed. It keeps the last epoch's it drew: the window policy draws the
// next epoch's to read ahead while one drains, and the epoch's start
// takes the same, so that a rank holds one copy of them (4 bytes per file
// of the dataset), not two.
func (n *Node) seedTraces(e uint32) [][]proto.FileID {
	c := &n.data.traces
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.traces == nil || c.epoch != e {
		c.epoch, c.traces = e, proto.Traces(n.data.m.Files(), n.size, n.cfg.Seed, e)
	}
	return c.traces
}

// epochTraces returns every rank's trace for epoch e, and this rank's
// part of them: generated from the seed, or offered by the clients (with
// the offer, to be answered once the epoch starts).
func (n *Node) epochTraces(ctx context.Context, e uint32) ([][]proto.FileID, []int32, TraceOffer, error) {
	if !n.cfg.ClientTraces { // every rank draws every rank's: no rank waits for another here
		traces := n.seedTraces(e)
		own := make([]int32, len(traces[n.me]))
		for i, f := range traces[n.me] {
			own[i] = int32(f)
		}
		return traces, own, TraceOffer{}, nil
	}
	for {
		offer, err := n.offered(ctx, e)
		if err != nil {
			return nil, nil, TraceOffer{}, err
		}
		if err := n.quietBarrier(ctx, ""); err != nil { // each rank waits for its clients' trace: no peer to blame
			return nil, nil, TraceOffer{}, err
		}
		traces, err := gatherTraces(n.comm, offer.Files)
		if err != nil {
			return nil, nil, TraceOffer{}, err
		}
		// Every rank checks the same traces and comes to the same verdict.
		err = n.p.CheckTraces(traces)
		if err == nil {
			return traces, offer.Files, offer, nil
		}
		err = fmt.Errorf("epoch %d: the clients' traces were refused: %w", e, err)
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %v; waiting for new ones\n", n.me, err)
		offer.answer(err)
	}
}

// earlyEpochs bounds how far ahead of the epoch being served a client's
// trace may be offered: the offers kept for later epochs stay few.
const earlyEpochs = 4

// offered waits for a client's trace of epoch e. Offers for the next
// earlyEpochs epochs are kept for them; one for an epoch already served
// or further ahead, or a second one for an epoch, is refused at once.
func (n *Node) offered(ctx context.Context, e uint32) (TraceOffer, error) {
	if o, ok := n.next.offers[e]; ok {
		delete(n.next.offers, e)
		return o, nil
	}
	if n.me == 0 {
		fmt.Fprintf(n.site.Log, "brandrt: epoch %d waits for the clients' traces\n", e)
	}
	tick := time.NewTicker(peerCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return TraceOffer{}, ctx.Err()
		case <-tick.C: // a rank whose training never came would wait for ever
			if err := n.training.checkSelf(); err != nil {
				return TraceOffer{}, err
			}
		case <-n.clients.over: // no client will supply one: this rank reads nothing
			return TraceOffer{Epoch: e}, nil
		case o := <-n.clients.offers:
			_, dup := n.next.offers[o.Epoch]
			switch {
			case o.Epoch == e:
				return o, nil
			case o.Epoch < e:
				o.answer(fmt.Errorf("a trace for epoch %d, but this rank already serves epoch %d", o.Epoch, e))
			case o.Epoch > e+earlyEpochs:
				o.answer(fmt.Errorf("a trace for epoch %d, but this rank serves epoch %d and keeps traces for at most %d epochs ahead", o.Epoch, e, earlyEpochs))
			case dup:
				o.answer(fmt.Errorf("a second trace for epoch %d: this rank already has one", o.Epoch))
			default:
				n.next.offers[o.Epoch] = o
			}
		}
	}
}
