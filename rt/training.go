package rt

import (
	"fmt"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// trainingWatch is what a rank knows of which ranks have training beside
// them (Node.training). A job whose training started on some nodes only
// (a launch that failed on one) would wait for ever: the ranks' plans
// hold files for the positions nobody asks for, and training that does
// read soon waits for them. So a rank tells every peer, once, when a
// client first attaches to it (tagTraining); while some rank has heard
// of none, every rank says which, every Config.PeerWarn, and after
// Config.TrainingWait the job ends naming them. The clients are told too
// (Node.TellClients).
type trainingWatch struct {
	n *Node
	// have holds, per rank, whether it had a client at some time: this
	// rank's own from its clients, the others' from their word.
	have  []bool
	sends []collectives.Request // this rank's word, in flight
	// start is when serving began; warned when the rank last said who
	// has no training; checked when it last looked.
	start, warned, checked time.Time
	// told is the count of ranks without training the clients were last
	// told of (−1: never).
	told int
}

func newTrainingWatch(n *Node) *trainingWatch {
	return &trainingWatch{n: n, have: make([]bool, n.size), told: -1}
}

// begin starts the clock: serving begins.
func (w *trainingWatch) begin() {
	if w.start.IsZero() {
		w.start = time.Now()
	}
}

// attached reports whether this rank has training beside it: its
// in-process readers, a client attached now or a training process that
// declared itself, or the training over; a rank that cannot tell (no
// WatchClients) counts as having it.
func (w *trainingWatch) attached() bool {
	c := &w.n.clients
	if w.n.cfg.Consume > 0 || c.look == nil || len(c.sess.live) > 0 || w.n.trainingOver() {
		return true
	}
	return c.look().Attached > 0
}

// poll notes this rank's own training, tells the peers of it once, and
// completes the word in flight.
func (w *trainingWatch) poll(comm collectives.Comm) error {
	me := w.n.me
	if !w.have[me] && w.attached() {
		w.have[me] = true
		for r := range w.n.size {
			if r == me {
				continue
			}
			req, err := comm.Isend(nil, r, tagTraining)
			if err != nil {
				return err
			}
			w.sends = append(w.sends, req)
		}
	}
	for len(w.sends) > 0 {
		done, _, err := w.sends[0].Test()
		if err != nil || !done {
			return err
		}
		w.sends = w.sends[1:]
	}
	return nil
}

// heard notes rank r's word that it has training.
func (w *trainingWatch) heard(r int) { w.have[r] = true }

// missing returns the ranks that have had no training so far.
func (w *trainingWatch) missing() []int {
	var m []int
	for r, ok := range w.have {
		if !ok {
			m = append(m, r)
		}
	}
	return m
}

// check looks, at most every peerCheckEvery, at the ranks without
// training (judge), in an epoch's loop.
func (w *trainingWatch) check(comm collectives.Comm) error {
	now := time.Now()
	if now.Sub(w.checked) < peerCheckEvery || w.start.IsZero() {
		return nil
	}
	w.checked = now
	if err := w.poll(comm); err != nil {
		return err
	}
	return w.judge(now, w.missing())
}

// between is check for a rank in the barrier before the first epoch
// (Node.startBarrier), where no loop takes the peers' word: it tells the
// peers of its own training, takes theirs (tagTraining) while such a
// word is the first message waiting (the barrier's own, tagSync, it
// leaves to the barrier), and judges every rank.
func (w *trainingWatch) between() error {
	now := time.Now()
	if now.Sub(w.checked) < peerCheckEvery || w.start.IsZero() {
		return nil
	}
	w.checked = now
	comm := w.n.comm
	if err := w.poll(comm); err != nil {
		return err
	}
	for {
		ok, st, err := comm.Iprobe()
		if err != nil {
			return err
		}
		if !ok || st.Tag != tagTraining {
			break
		}
		if err := comm.Recv(make([]byte, st.Len), st.Source, st.Tag); err != nil {
			return err
		}
		w.heard(st.Source)
	}
	return w.judge(now, w.missing())
}

// checkSelf is check for a rank outside an epoch's loop, waiting for its
// clients to say something (a trace, where to resume), whose callers
// call it every peerCheckEvery: it hears no peer then, and judges only
// itself.
func (w *trainingWatch) checkSelf() error {
	if w.attached() {
		return nil
	}
	return w.judge(time.Now(), []int{w.n.me})
}

// judge tells the clients which ranks have had no training, says so
// every PeerWarn, and returns the error that ends the job once
// TrainingWait has passed since serving began.
func (w *trainingWatch) judge(now time.Time, missing []int) error {
	w.tell(missing)
	if len(missing) == 0 {
		return nil
	}
	cfg, since := w.n.cfg, now.Sub(w.start)
	if cfg.TrainingWait > 0 && since >= cfg.TrainingWait {
		return fmt.Errorf("rt: rank %s: %s had no training process attached %v after serving began (--training-wait %v); the job ends: "+
			"start the training on every node of the job (a DataLoader over BrandDataset attaches when it asks for its first batch)",
			w.n.peers.node(w.n.me), w.n.peers.ranks(missing), since.Round(time.Second), cfg.TrainingWait)
	}
	if since < cfg.PeerWarn || now.Sub(w.warned) < cfg.PeerWarn {
		return nil
	}
	w.warned = now
	ends := "The ranks wait for ever (--training-wait 0)."
	if cfg.TrainingWait > 0 {
		ends = fmt.Sprintf("The job ends if none attaches within %v of the start (--training-wait).", cfg.TrainingWait)
	}
	its, node := "its", "that node"
	if len(missing) > 1 {
		its, node = "their", "those nodes"
	}
	fmt.Fprintf(w.n.site.Log, "brandrt: rank %s: %s had no training process attached %v after serving began; the training on the other nodes will wait for %s files. "+
		"Did the training command start on %s? %s\n", w.n.peers.node(w.n.me), w.n.peers.ranks(missing), since.Round(time.Second), its, node, ends)
	return nil
}

// tell passes on to the clients which ranks have no training, when that
// changed.
func (w *trainingWatch) tell(missing []int) {
	if len(missing) == w.told || w.n.clients.tell == nil {
		return
	}
	w.told = len(missing)
	w.n.clients.tell(missing)
}

// TellClients gives the rank a way to tell its clients which ranks have
// had no training beside them (none: an empty list), called when that
// changes: a client waiting for a file can then say what it waits for.
// Call it before Serve.
func (n *Node) TellClients(tell func(missing []int)) { n.clients.tell = tell }
