package rt

import (
	"context"
	"errors"
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// StartOffer is a client saying where the job resumes (Config.Resume):
// at epoch Epoch (from 1), position Position of this rank's trace, the
// positions before it having been delivered before the restart. Ranks
// and Seed are those of the job the position was saved in, which must be
// this one's: a position means the same files only in the same job. The
// rank answers on Reply (room for one error) once the epoch starts, or
// at once when it refuses the offer.
type StartOffer struct {
	Epoch    uint32
	Position int32
	Ranks    int
	Seed     uint64
	Reply    chan<- error
	// began, when set, is closed once the offer is accepted: the epoch
	// it resumes has started.
	began chan struct{}
}

func (o StartOffer) answer(err error) {
	if o.Reply != nil {
		o.Reply <- err
	}
	if err == nil && o.began != nil {
		close(o.began)
	}
}

// Starts returns where clients say where the job resumes, with
// Config.Resume.
func (n *Node) Starts() chan<- StartOffer { return n.starts }

// resumePoint waits until one client of every rank said where the job
// resumes, and returns the epoch and every rank's position. Every rank
// must resume the same epoch; the positions may differ. An offer that
// does not fit this job is refused to its client alone; offers whose
// epochs differ are refused to every rank's, and every rank waits for
// new ones.
func (n *Node) resumePoint(ctx context.Context) (uint32, []int32, StartOffer, error) {
	if n.me == 0 {
		fmt.Fprintf(n.cfg.Log, "brandrt: waiting for the training processes to say where the job resumes (--resume)\n")
	}
	for {
		var o StartOffer
		select {
		case <-ctx.Done():
			return 0, nil, o, ctx.Err()
		case <-n.over:
			return 0, nil, o, fmt.Errorf("rt: rank %d: the training ended before saying where the job resumes (--resume)", n.me)
		case o = <-n.starts:
		}
		if err := n.fits(o); err != nil {
			o.answer(err)
			continue
		}
		if err := n.quietBarrier(ctx); err != nil {
			return 0, nil, o, err
		}
		all, _, err := n.comm.Allgatherv([]int32{int32(o.Epoch), o.Position})
		if err != nil {
			return 0, nil, o, err
		}
		start := make([]int32, n.size)
		same := true
		for r := range n.size {
			start[r] = all[2*r+1]
			same = same && all[2*r] == all[0]
		}
		if same {
			o.began = make(chan struct{})
			return o.Epoch, start, o, nil
		}
		err = fmt.Errorf("the ranks' training processes resume different epochs (%v, per rank: epoch, position); every rank must resume the same", all)
		fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: %v; waiting for new ones\n", n.me, err)
		o.answer(err)
	}
}

// fits reports why a start offer does not fit this job.
func (n *Node) fits(o StartOffer) error {
	switch {
	case o.Ranks != n.size:
		return fmt.Errorf("the position was saved in a job of %d brandrt ranks and this job has %d: positions are per rank, so resume with %d ranks (the number of DataLoader workers may change)",
			o.Ranks, n.size, o.Ranks)
	case o.Seed != n.cfg.Seed:
		return fmt.Errorf("the position was saved in a job with --seed %d and this one has --seed %d: the order would not be the interrupted one's", o.Seed, n.cfg.Seed)
	case o.Epoch < 1 || int(o.Epoch) > n.cfg.Epochs:
		return fmt.Errorf("resuming at epoch %d, but this job serves epochs 1 to %d (--epochs)", o.Epoch, n.cfg.Epochs)
	}
	length := proto.TraceLen(n.m.Files(), n.size, n.me)
	if o.Position < 0 || int(o.Position) > length {
		return fmt.Errorf("resuming epoch %d at position %d, but this rank's trace has %d positions", o.Epoch, o.Position, length)
	}
	return nil
}

// answerLateStarts answers the start offers that come after the job took
// its resume point (taken, this rank's position at), until done is
// closed: a training process may offer one again (a new Client, a second
// sampler). The same point is accepted once its epoch has started; any
// other is refused, saying where the job resumed.
func (n *Node) answerLateStarts(taken StartOffer, at int32, done <-chan struct{}) {
	for {
		var o StartOffer
		select {
		case <-done:
			return
		case o = <-n.starts:
		}
		if o.Epoch != taken.Epoch || o.Position != at || o.Ranks != taken.Ranks || o.Seed != taken.Seed {
			o.answer(fmt.Errorf("this job already resumed at epoch %d, position %d of this rank's trace (%d ranks, --seed %d); "+
				"a job resumes once, where it was first told", taken.Epoch, at, taken.Ranks, taken.Seed))
			continue
		}
		select {
		case <-taken.began:
			o.answer(nil)
		case <-done:
			o.answer(errors.New("the rank is stopping"))
			return
		}
	}
}
