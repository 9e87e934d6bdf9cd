package rt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// StartOffer is a client saying where the job takes up (Config.MayResume):
// the Place its training process saved. The rank answers on Reply (room
// for one error) once the epoch starts, or at once when it refuses the
// offer.
type StartOffer struct {
	Place Place
	Reply chan<- error
	// began, when set, is closed once the offer is accepted: the epoch
	// it resumes has started.
	began chan struct{}
	// read marks no offer at all: the rank's clients read, or its
	// training ended, before any offered a saved state (freshStart).
	read bool
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
func (n *Node) Starts() chan<- StartOffer { return n.clients.starts }

// resumption is where a resumed job takes up its first epoch: at Start,
// every rank's first position on the plan of the job that saved the
// state (a job that plans as this one does), or, on another plan, after
// the files Delivered before the restart (a job of another number of
// ranks, another --mem or --ramp): then this job plans the rest of the
// epoch (proto.RestPlan) and its clients begin at position 0.
type resumption struct {
	Start     []int32
	Delivered []bool
}

// from returns the first position this rank's clients ask for.
func (r resumption) from(me int) int32 {
	if r.Start == nil {
		return 0
	}
	return r.Start[me]
}

// before counts the positions delivered before the restart.
func (r resumption) before() int64 {
	n := startSum(r.Start)
	for _, d := range r.Delivered {
		if d {
			n++
		}
	}
	return n
}

// resumePoint waits until one client of every rank said where the job
// takes up, and returns the epoch and where in it each rank takes up.
// Every rank must resume from the same state: the same epoch and, on
// this job's plan, each rank at its own position; on another plan, the
// same position. An offer that does not fit this job is refused to its
// client alone; offers that differ across the ranks are refused to every
// rank's, and every rank waits for new ones. Without Config.Resume a
// rank's first word may also be a client's read, or the training's end,
// with no offer before it: the rank then takes up epoch 1 from its
// beginning (a fresh start), and a job whose ranks disagree on that ends
// on every rank.
func (n *Node) resumePoint(ctx context.Context) (uint32, resumption, StartOffer, error) {
	if n.me == 0 && n.cfg.Resume {
		fmt.Fprintf(n.site.Log, "brandrt: waiting for the training processes to say where the job resumes (--resume)\n")
	}
	w := &offerWait{tick: time.NewTicker(peerCheckEvery), over: n.clients.over}
	defer w.tick.Stop()
	if !n.cfg.Resume { // without --resume, a read is a fresh start
		w.heard = n.clients.events
	}
	for {
		o, err := n.nextOffer(ctx, w)
		if err != nil {
			return 0, resumption{}, o, err
		}
		how, err := n.fits(o.Place)
		if err != nil {
			o.answer(err)
			continue
		}
		if err := n.startBarrier(ctx); err != nil { // each rank waits for its clients' start: no peer to blame
			return 0, resumption{}, o, err
		}
		start, again, err := n.agreeStart(o, how)
		if again {
			continue
		}
		if err != nil {
			return 0, resumption{}, o, err
		}
		o.began = make(chan struct{})
		res, err := n.takeUp(o, how, start)
		if err != nil {
			return 0, resumption{}, o, err
		}
		return o.Place.Epoch, res, o, nil
	}
}

// offerWait is what resumePoint waits on: a tick to check that the
// training came, the clients' events (nil with --resume: a read is no
// fresh start then) and the training's end (nil once taken).
type offerWait struct {
	tick  *time.Ticker
	heard <-chan ClientEvent
	over  <-chan struct{}
}

// nextOffer waits for the next start offered: a saved state, or a fresh
// start when the clients read or the training ends first.
func (n *Node) nextOffer(ctx context.Context, w *offerWait) (StartOffer, error) {
	for {
		select {
		case <-ctx.Done():
			return StartOffer{}, ctx.Err()
		case <-w.tick.C: // a rank whose training never came would wait for ever
			if err := n.training.checkSelf(); err != nil {
				return StartOffer{}, err
			}
		case <-w.over:
			if n.cfg.Resume {
				return StartOffer{}, fmt.Errorf("rt: rank %d: the training ended before saying where the job resumes (--resume)", n.me)
			}
			w.over = nil
			return n.freshStart(), nil
		case ev := <-w.heard:
			n.next.held = append(n.next.held, ev) // for the epoch, in order
			if _, ok := ev.(Session); !ok {       // a training process declares itself before it offers
				return n.freshStart(), nil
			}
		case o := <-n.clients.starts:
			return o, nil
		}
	}
}

// agreeStart has every rank compare its offer with the others': it
// returns each rank's start position, or again when the ranks resume
// from different states (each rank's offer is refused, and they wait for
// new ones), or an error every rank returns alike when one rank's
// clients read already and another's offer resumes.
func (n *Node) agreeStart(o StartOffer, how Takeup) (start []int32, again bool, err error) {
	p := o.Place
	all, _, err := n.comm.Allgatherv([]int32{int32(p.Epoch), p.Position, p.key(), boolInt(o.read)})
	if err != nil {
		return nil, false, err
	}
	same, read := true, -1
	start = make([]int32, n.size)
	for r := range n.size {
		start[r] = all[4*r+1]
		same = same && all[4*r] == all[0] && all[4*r+2] == all[2] && (how == OnItsPlan || start[r] == start[0])
		if all[4*r+3] == 1 && read < 0 {
			read = r
		}
	}
	if !same && read >= 0 { // a rank that read cannot take back what it served
		err = fmt.Errorf("rt: rank %d: the training processes of rank %d read before offering a saved state (a fresh start), and another rank's offer resumes (per rank: epoch, position, state, read: %v): every rank must start fresh or resume from the same checkpoint", n.me, read, all)
		o.answer(err)
		return nil, false, everyRank{err}
	}
	if !same {
		err = fmt.Errorf("the ranks' training processes resume from different states (%v, per rank: epoch, position, state, read): every rank must resume from the same checkpoint", all)
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %v; waiting for new ones\n", n.me, err)
		o.answer(err)
		return nil, true, nil
	}
	return start, false, nil
}

// takeUp returns where the job takes up the state o offered, which every
// rank agreed on: each rank at its start position on the saved plan, or
// the rest of the epoch (the files not yet delivered) on this job's.
func (n *Node) takeUp(o StartOffer, how Takeup, start []int32) (resumption, error) {
	if how == OnItsPlan {
		return resumption{Start: start}, nil
	}
	p := o.Place
	d, err := n.delivered(p)
	if err != nil { // every rank computes the same, and fails alike
		err = fmt.Errorf("rt: rank %d: resuming %v: %w", n.me, p, err)
		o.answer(err)
		return resumption{}, everyRank{err}
	}
	r := resumption{Delivered: d}
	if n.me == 0 {
		fmt.Fprintf(n.site.Log, "brandrt: the job was saved on %d ranks (--mem, --ramp as %s) and resumes on %d: epoch %d goes on with the %d files of %d not yet trained on, planned for %d ranks\n",
			p.Ranks, p.Plan.describe(), n.size, p.Epoch, len(d)-int(r.before()), len(d), n.size)
	}
	return r, nil
}

// freshStart is the start a rank takes when its clients read, or its
// training ends, before any offered a saved state: epoch 1 from its
// beginning, on this job's plan, as a client's fresh offer says it.
func (n *Node) freshStart() StartOffer {
	p := n.JobPlace()
	p.Epoch = 1
	return StartOffer{Place: p, read: true}
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// describe prints the budget rule and ramp of r.
func (r PlanRule) describe() string {
	mem := fmt.Sprintf("%g%% of a shard", 100*r.MemFraction)
	if r.MemBytes > 0 {
		mem = mib(r.MemBytes)
	}
	return fmt.Sprintf("%s, ramp %d", mem, r.Ramp)
}

// delivered returns the files of p's epoch trained on before the
// restart, from the plans of the jobs that served it (proto.Delivered).
func (n *Node) delivered(p Place) ([]bool, error) {
	if n.data.allSizes == nil {
		return nil, errors.New("the papers' policy resumes only on its own plan")
	}
	return Delivered(n.data.man, n.data.allSizes, p)
}

// fits reports how this job takes up a start offer's place (Resume), or
// why it cannot.
func (n *Node) fits(p Place) (Takeup, error) {
	how, err := Resume(p, n.JobPlace(), n.cfg.Epochs)
	if err != nil || how != OnItsPlan {
		return how, err // proto.Delivered takes positions past a trace as its end
	}
	length := proto.TraceLen(n.data.m.Files(), n.size, n.me)
	if int(p.Position) > length {
		return 0, fmt.Errorf("resuming epoch %d at position %d, but this rank's trace has %d positions", p.Epoch, p.Position, length)
	}
	return how, nil
}

// answerLateStarts answers the start offers that come after the job took
// its resume point (taken, this rank's position at), until done is
// closed: a training process may offer one again (a new Client, a second
// sampler). The same point is accepted once its epoch has started; any
// other is refused, saying where the job resumed.
func (n *Node) answerLateStarts(taken StartOffer, done <-chan struct{}) {
	t := taken.Place
	for {
		var o StartOffer
		select {
		case <-done:
			return
		case o = <-n.clients.starts:
		}
		p := o.Place
		switch {
		case taken.read && (p.Epoch != 1 || p.Position != 0 || p.key() != t.key()):
			o.answer(fmt.Errorf("this job already started fresh, at epoch 1: its training processes read before any offered a saved state; " +
				"to resume, offer the state (BrandLoader.load_state_dict) before the first read"))
			continue
		case p.Epoch != t.Epoch || p.Position != t.Position || p.key() != t.key():
			o.answer(fmt.Errorf("this job already resumed from another state, at %v (--seed %d); "+
				"a job resumes once, where it was first told", t, t.Seed))
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
