package rt

import (
	"fmt"
	"sync"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// clientSide is what a rank hears from its clients, and knows of the
// training beside them (Node.clients).
type clientSide struct {
	// events carries client events to the loop (Node.ClientEvents).
	events chan ClientEvent
	// offers carries clients' traces (Config.ClientTraces); starts their
	// start offers (Config.Resume).
	offers chan TraceOffer
	starts chan StartOffer
	// sess is what the rank knows of its training processes; look, when
	// set, tells what its clients do (WatchClients).
	sess sessions
	look func() Clients
	// tell, when set, tells the clients which ranks have no training
	// (TellClients).
	tell func(missing []int)
	// over is closed by TrainingOver; supervised is set by
	// SuperviseTraining.
	over       chan struct{}
	overOnce   sync.Once
	supervised bool
}

// A training process declares itself to its rank (a Session event):
// BrandSampler does, for the life of the process, saying
// which share of the rank's trace it reads (positions p with p mod
// Replicas == Replica). The rank then knows when a training process is
// gone for good: when no process of a share is left for sessionGrace
// while positions of that share are still to be asked for in the epoch
// being served, the epoch can never end, and the rank ends the job
// saying so. The positions the dead process would have read cannot go to
// another one: its DataLoader took them from its own sampler. (A
// replacement may attach within the grace: a training process that
// makes a new BrandSampler drops the old one's session first.)

// sessionGrace is how long a share may be without a training process
// before the rank gives up on it.
const sessionGrace = 5 * time.Second

// goneCheckEvery spaces the loop's checks for shares gone (each scans
// the trace): they need no finer time than the grace.
const goneCheckEvery = 100 * time.Millisecond

// sessions is what a rank knows of its training processes, across epochs.
type sessions struct {
	live map[Share]int       // processes of each share attached now
	gone map[Share]time.Time // when a share's last process went
	pid  map[Share]int       // the last process seen of each share
}

// session notes a training process that began or went away.
func (n *Node) session(r Session) {
	s := &n.clients.sess
	if s.live == nil {
		s.live, s.gone, s.pid = make(map[Share]int), make(map[Share]time.Time), make(map[Share]int)
	}
	k := r.Share
	s.live[k] += r.Delta
	s.pid[k] = r.Pid
	if s.live[k] > 0 {
		delete(s.gone, k)
	} else {
		s.gone[k] = time.Now()
	}
}

// client steps what a client said.
func (l *loop) client(ev ClientEvent) error {
	switch ev := ev.(type) {
	case Session:
		l.n.session(ev)
		l.n.readers.session(ev)
		return nil
	case Over:
		l.asks.ended = true
		return nil
	case End:
		return l.endEpoch(ev)
	case Ask:
		return l.ask(ev)
	}
	return fmt.Errorf("rt: rank %d: unknown client event %T", l.n.me, ev)
}

// endEpoch takes an End: held when it is for a later epoch, ignored when
// for an epoch over or past the job's last.
func (l *loop) endEpoch(r End) error {
	l.clock.markFirst()
	switch {
	case int64(r.Epoch) > int64(l.n.cfg.Epochs) || r.Epoch < l.epoch:
		return nil
	case r.Epoch > l.epoch:
		l.n.next.held = append(l.n.next.held, r)
		return nil
	}
	return l.end(r.Share)
}

// ask steps a client's ask for a position.
func (l *loop) ask(r Ask) error {
	l.clock.markFirst()
	switch {
	case int64(r.Epoch) > int64(l.n.cfg.Epochs):
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: epoch %d is past the job's last, epoch %d (brandrt serve --epochs %d)", l.n.me, r.Epoch, l.n.cfg.Epochs, l.n.cfg.Epochs)})
		return nil
	case r.Epoch > l.epoch:
		l.n.next.held = append(l.n.next.held, r)
		return nil
	case r.Epoch < l.epoch:
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: epoch %d is over (this is epoch %d)", l.n.me, r.Epoch, l.epoch)})
		return nil
	}
	if err := l.n.readers.refusal(l.n.me, r, l.epoch); err != nil {
		r.fail(Delivery{Sn: r.Sn, Err: err})
		return nil
	}
	if l.asks.waits(r.Sn) {
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: position %d is already requested", l.n.me, r.Sn)})
		return nil
	}
	if err := l.p.Step(proto.ClientRequest{Sn: r.Sn}); err != nil {
		r.fail(Delivery{Sn: r.Sn, Err: err})
		return nil
	}
	l.asks.take(r.Sn, r.Reply)
	l.n.readers.took(r)
	return l.carry()
}

// watching reports whether the loop must wake now and then to check for
// clients gone (checkGone): a share's training processes went away, or
// every client did in the middle of the epoch.
func (l *loop) watching() bool {
	if l.n.clients.supervised {
		return false
	}
	since, _ := l.alone()
	return len(l.n.clients.sess.gone) > 0 || since.After(l.clock.first)
}

// midEpoch reports whether the rank watches its clients and is in the
// middle of an epoch, where all of them going away ends the job.
func (l *loop) midEpoch() bool {
	return !l.n.clients.supervised && l.n.clients.look != nil && l.n.cfg.ClientWait > 0 && !l.clock.first.IsZero() && !l.asks.ended
}

// alone returns when the rank's last client that read went away or
// stopped reading, if none reads now and the rank watches them; else the
// zero time. stalled names those attached that do not read.
func (l *loop) alone() (since time.Time, stalled string) {
	if !l.midEpoch() {
		return time.Time{}, ""
	}
	c := l.n.clients.look()
	return c.Since, c.Stalled
}

// checkGone returns an error when a share's training processes went
// away sessionGrace ago or more while some of its positions are still to
// be asked for in this epoch, or when every client went away
// Config.ClientWait ago or more in the middle of the epoch.
func (l *loop) checkGone() error {
	if since, stalled := l.alone(); since.After(l.clock.first) && time.Since(since) >= l.n.cfg.ClientWait {
		if left := l.asks.unaskedAll(); left > 0 {
			what := "every client went away"
			if stalled != "" {
				what = "no client has read what it was answered (" + stalled + ") or every other went away"
			}
			return fmt.Errorf("rt: rank %d: %s %v ago in the middle of epoch %d, with %d of its %d positions never asked for; "+
				"the job ends (a training process that stops reading an epoch early says so with BrandSampler.end_epoch(); "+
				"brandrt serve --client-wait sets how long a rank waits, 0 for ever)",
				l.n.me, what, time.Since(since).Round(time.Second), l.epoch, left, l.asks.traceLen)
		}
	}
	for k, at := range l.n.clients.sess.gone {
		if time.Since(at) < sessionGrace || l.asks.ended {
			continue
		}
		if left := l.asks.unasked(k); left > 0 {
			return fmt.Errorf("rt: rank %d: the training process %d (share %d of %d of the rank's trace) went away in epoch %d with %d of its positions never asked for; "+
				"the job ends, since no other process can read them (take it up from a checkpoint with brandrt serve --resume)",
				l.n.me, l.n.clients.sess.pid[k], k.Replica, k.Replicas, l.epoch, left)
		}
	}
	return nil
}

// end takes a client's word that no more requests come this epoch: from
// every client (Replicas 0), or from those of one share. A whole end ends
// the epoch once the requests in flight are answered. A share's end is
// carried out by the rank itself: it asks for the share's positions not
// yet asked for and drops what answers them (the window policy's plan
// frees the memory of their files no other way), while the other shares
// read on.
func (l *loop) end(k Share) error {
	for _, sn := range l.asks.endShare(k) {
		// no reply channel: the answer is dropped (deliver), and a position
		// of the trace not yet asked for gets no error answer
		if err := l.ask(Ask{Epoch: l.epoch, Sn: sn}); err != nil {
			return err
		}
	}
	return nil
}
