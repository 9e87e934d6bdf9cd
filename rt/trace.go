package rt

import (
	"context"
	"fmt"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// GeneratedTrace returns rank's part of proto.Traces: the epoch's global
// permutation of the dataset's files drawn from seed, in consecutive runs
// per rank whose lengths differ by at most one.
func GeneratedTrace(files, ranks, rank int, seed uint64, epoch uint32) []int32 {
	own := proto.Traces(files, ranks, seed, epoch)[rank]
	out := make([]int32, len(own))
	for i, f := range own {
		out[i] = int32(f)
	}
	return out
}

// gatherTraces gives every rank every rank's trace.
func gatherTraces(comm collectives.Comm, own []int32) ([][]proto.FileID, error) {
	all, counts, err := comm.Allgatherv(own)
	if err != nil {
		return nil, err
	}
	traces := make([][]proto.FileID, len(counts))
	off := 0
	for r, c := range counts {
		t := make([]proto.FileID, c)
		for i, f := range all[off : off+c] {
			t[i] = proto.FileID(f)
		}
		traces[r], off = t, off+c
	}
	return traces, nil
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
func (n *Node) Traces() chan<- TraceOffer { return n.offers }

func (o TraceOffer) answer(err error) {
	if o.Reply != nil {
		o.Reply <- err
	}
}

// epochTraces returns every rank's trace for epoch e, and this rank's
// part of them: generated from the seed, or offered by the clients (with
// the offer, to be answered once the epoch starts).
func (n *Node) epochTraces(ctx context.Context, e uint32) ([][]proto.FileID, []int32, TraceOffer, error) {
	if !n.cfg.ClientTraces {
		own := GeneratedTrace(n.m.Files(), n.size, n.me, n.cfg.Seed, e)
		traces, err := gatherTraces(n.comm, own)
		return traces, own, TraceOffer{}, err
	}
	for {
		offer, err := n.offered(ctx, e)
		if err != nil {
			return nil, nil, TraceOffer{}, err
		}
		if err := n.quietBarrier(ctx); err != nil {
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
		fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: %v; waiting for new ones\n", n.me, err)
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
	if o, ok := n.early[e]; ok {
		delete(n.early, e)
		return o, nil
	}
	if n.me == 0 {
		fmt.Fprintf(n.cfg.Log, "brandrt: epoch %d waits for the clients' traces\n", e)
	}
	for {
		select {
		case <-ctx.Done():
			return TraceOffer{}, ctx.Err()
		case <-n.over: // no client will supply one: this rank reads nothing
			return TraceOffer{Epoch: e}, nil
		case o := <-n.offers:
			_, dup := n.early[o.Epoch]
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
				n.early[o.Epoch] = o
			}
		}
	}
}

// quietBarrier is a barrier that sleeps while it waits, unlike MPI's,
// which spins: ranks whose clients supplied their traces early wait
// without taking CPU from the training processes beside them. Every rank
// tells rank 0, which then tells every rank.
func (n *Node) quietBarrier(ctx context.Context) error {
	if n.size == 1 {
		return nil
	}
	nap := minNap
	pause := func() error {
		time.Sleep(nap)
		nap = min(2*nap, maxNap)
		return ctx.Err()
	}
	wait := func(r collectives.Request) error { // until r completes
		for {
			done, _, err := r.Test()
			if err != nil || done {
				return err
			}
			if err := pause(); err != nil {
				return err
			}
		}
	}
	if n.me != 0 {
		var got [1]byte
		send, err := n.comm.Isend(nil, 0, tagSync)
		if err != nil {
			return err
		}
		recv, err := n.comm.Irecv(got[:], 0, tagSync)
		if err != nil {
			return err
		}
		if err := wait(send); err != nil {
			return err
		}
		return wait(recv)
	}
	for in := 1; in < n.size; {
		ok, st, err := n.comm.Iprobe()
		if err != nil {
			return err
		}
		if !ok {
			if err := pause(); err != nil {
				return err
			}
			continue
		}
		if st.Tag != tagSync {
			return fmt.Errorf("rt: rank 0: a message with tag %d from rank %d between epochs", st.Tag, st.Source)
		}
		if err := n.comm.Recv(make([]byte, st.Len), st.Source, tagSync); err != nil {
			return err
		}
		in++
	}
	for r := 1; r < n.size; r++ {
		req, err := n.comm.Isend(nil, r, tagSync)
		if err != nil {
			return err
		}
		if err := wait(req); err != nil {
			return err
		}
	}
	return nil
}
