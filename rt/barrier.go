package rt

import (
	"context"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// quietBarrier is a barrier that sleeps while it waits, unlike MPI's,
// which spins: ranks whose clients supplied their traces early, or whose
// peer is stopped or hung, wait without taking CPU from the training
// processes beside them. With what set (the barrier after an epoch, whose
// ranks wait on each other, not on their training processes) they say
// whom they wait for after a while, and may end the job (peerWatch).
// Every rank tells rank 0, which then tells every rank. It
// receives only its own tag; rank 0's loop takes the word of the ranks
// whose epoch ended before its own (Node.peers.synced).
func (n *Node) quietBarrier(ctx context.Context, what string) error {
	return n.barrier(ctx, what, nil)
}

// startBarrier is the quietBarrier before the first epoch, where each
// rank waits for its training's first word (Node.resumePoint): while
// waiting, a rank watches which ranks have had training beside them, as
// the loop does (trainingWatch.between), so that its clients learn whom
// the job waits for and a rank whose training never came ends the job.
func (n *Node) startBarrier(ctx context.Context) error {
	return n.barrier(ctx, "", n.training.between)
}

func (n *Node) barrier(ctx context.Context, what string, watch func() error) error {
	if n.size == 1 {
		return nil
	}
	n.peers.reset()
	w := &barrierWait{n: n, ctx: ctx, what: what, watch: watch, nap: minNap}
	if n.me != 0 {
		return w.toZero()
	}
	return w.atZero()
}

// barrierWait is one barrier of a rank: what it says it waits for
// (peerWatch), what it watches meanwhile, and its growing nap.
type barrierWait struct {
	n     *Node
	ctx   context.Context
	what  string
	watch func() error
	nap   time.Duration
}

// wait sleeps until r completes, checking the peers (waits says on whom
// the rank waits) and the watch between naps; a signal ends it at once,
// as it does the loop's.
func (w *barrierWait) wait(r collectives.Request, waits func(r int) bool) (collectives.Status, error) {
	for {
		done, st, err := r.Test()
		if err != nil || done {
			return st, err
		}
		if w.what != "" {
			if err := w.n.peers.check(waits, w.what); err != nil {
				return st, err
			}
		}
		if w.watch != nil {
			if err := w.watch(); err != nil {
				return st, err
			}
		}
		t := time.NewTimer(w.nap)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return st, w.ctx.Err()
		}
		w.nap = min(2*w.nap, maxNap)
	}
}

// toZero is a rank's side other than 0's: it tells rank 0 it is in and
// waits for its word that every rank is.
func (w *barrierWait) toZero() error {
	var got [1]byte
	send, err := w.n.comm.Isend(nil, 0, tagSync)
	if err != nil {
		return err
	}
	recv, err := w.n.comm.Irecv(got[:], 0, tagSync)
	if err != nil {
		return err
	}
	rankZero := func(r int) bool { return r == 0 }
	if _, err := w.wait(send, rankZero); err != nil {
		return err
	}
	_, err = w.wait(recv, rankZero)
	return err
}

// atZero is rank 0's side: it waits for every other rank's word (those
// its loop took already, Node.peers.synced, count), then tells each.
func (w *barrierWait) atZero() error {
	n := w.n
	in := make([]bool, n.size)
	for _, r := range n.peers.synced { // told the loop, whose epoch ended after theirs
		in[r] = true
	}
	early := len(n.peers.synced)
	n.peers.synced = nil
	for range n.size - 1 - early {
		var got [1]byte
		recv, err := n.comm.Irecv(got[:], collectives.AnySource, tagSync)
		if err != nil {
			return err
		}
		st, err := w.wait(recv, func(r int) bool { return !in[r] })
		if err != nil {
			return err
		}
		in[st.Source] = true
	}
	for r := 1; r < n.size; r++ {
		req, err := n.comm.Isend(nil, r, tagSync)
		if err != nil {
			return err
		}
		if _, err := w.wait(req, func(int) bool { return false }); err != nil {
			return err
		}
	}
	return nil
}
