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
	nap := minNap
	wait := func(r collectives.Request, waits func(r int) bool) (collectives.Status, error) { // until r completes
		for {
			done, st, err := r.Test()
			if err != nil || done {
				return st, err
			}
			if what != "" {
				if err := n.peers.check(waits, what); err != nil {
					return st, err
				}
			}
			if watch != nil {
				if err := watch(); err != nil {
					return st, err
				}
			}
			t := time.NewTimer(nap)
			select { // a signal ends the wait at once, as it does the loop's
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return st, ctx.Err()
			}
			nap = min(2*nap, maxNap)
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
		rankZero := func(r int) bool { return r == 0 }
		if _, err := wait(send, rankZero); err != nil {
			return err
		}
		_, err = wait(recv, rankZero)
		return err
	}
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
		st, err := wait(recv, func(r int) bool { return !in[r] })
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
		if _, err := wait(req, func(int) bool { return false }); err != nil {
			return err
		}
	}
	return nil
}
