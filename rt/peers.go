package rt

import (
	"fmt"
	"strings"
	"time"
)

// peerWatch watches a rank's waits on peers that send nothing: a peer
// whose node hangs, whose process was stopped, whose file system client
// is stuck. A wait is quiet (the rank naps, see loop.serve and
// quietBarrier); once a peer the rank waits for has sent nothing for
// Config.PeerWarn since the wait began, the rank says whom it waits for
// and since when, and again every PeerWarn while it lasts; after
// Config.PeerTimeout, when set, it ends the job naming them.
type peerWatch struct {
	n *Node
	// heard holds when each rank last sent something; asked when this
	// rank last sent it a request; since when the present wait on it
	// began (zero while the rank does not wait on it).
	heard, asked, since []time.Time
	// warned is when the rank last said that it waits
	warned  time.Time
	checked time.Time
	// synced holds the ranks whose word for the next quietBarrier rank
	// 0's loop received.
	synced []int
	// now is the clock (time.Now; a test's fake).
	now func() time.Time
}

// peerCheckEvery spaces a wait's looks at its peers.
const peerCheckEvery = 250 * time.Millisecond

func newPeerWatch(n *Node) *peerWatch {
	return &peerWatch{n: n, heard: make([]time.Time, n.size), asked: make([]time.Time, n.size), since: make([]time.Time, n.size), now: time.Now}
}

// reset starts a new stretch (an epoch, a barrier): no wait yet.
func (w *peerWatch) reset() {
	clear(w.since)
	w.warned, w.checked = time.Time{}, time.Time{}
}

// heardFrom notes that rank r sent something.
func (w *peerWatch) heardFrom(r int) { w.heard[r] = w.now() }

// askedOf notes that this rank sent rank r a request: a reply is due
// (or, for the window plan's answers at an epoch's start, r's own).
func (w *peerWatch) askedOf(r int) { w.asked[r] = w.now() }

// owes reports whether rank r was sent a request it has not answered:
// nothing came from it since.
func (w *peerWatch) owes(r int) bool { return w.asked[r].After(w.heard[r]) }

// check looks at the peers the rank waits for (waits reports whether it
// waits for rank r) for what: it returns the error that ends the job
// once one has sent nothing for PeerTimeout since the rank began to wait
// for it, and else says which have for PeerWarn, again every PeerWarn.
// It looks at most every peerCheckEvery.
func (w *peerWatch) check(waits func(r int) bool, what string) error {
	now := w.now()
	if now.Sub(w.checked) < peerCheckEvery {
		return nil
	}
	w.checked = now
	cfg := w.n.cfg
	first := cfg.PeerWarn // the least quiet time that matters
	if cfg.PeerTimeout > 0 {
		first = min(first, cfg.PeerTimeout)
	}
	silent, quiet, from := w.quiet(now, waits, first)
	switch {
	case len(silent) == 0:
		return nil
	case cfg.PeerTimeout > 0 && quiet >= cfg.PeerTimeout:
		return fmt.Errorf("rt: rank %s: %s sent nothing for %v while this rank waited %s (--peer-timeout %v); the job stops: look at that node (hung, out of memory, a stuck file system)",
			w.node(w.n.me), w.ranks(silent), quiet.Round(time.Second), what, cfg.PeerTimeout)
	case quiet >= cfg.PeerWarn && now.Sub(w.warned) >= cfg.PeerWarn:
		w.warned = now
		w.warn(silent, quiet, from, what)
	}
	return nil
}

// quiet returns the peers the rank waits for that sent nothing for at
// least least since it began to wait for them, and the longest such
// silence and its start. It notes when a wait begins, and forgets the
// waits that ended.
func (w *peerWatch) quiet(now time.Time, waits func(r int) bool, least time.Duration) (silent []int, quiet time.Duration, from time.Time) {
	from = now
	for r := range w.heard {
		if r == w.n.me || !waits(r) {
			w.since[r] = time.Time{}
			continue
		}
		if w.since[r].IsZero() {
			w.since[r] = now
		}
		last := w.since[r]
		if w.heard[r].After(last) {
			last = w.heard[r]
		}
		if q := now.Sub(last); q >= least {
			silent = append(silent, r)
			if q > quiet {
				quiet, from = q, last
			}
		}
	}
	return silent, quiet, from
}

// warn says whom the rank waits for (silent, the longest quiet for quiet
// since from), and what ends the wait.
func (w *peerWatch) warn(silent []int, quiet time.Duration, from time.Time, what string) {
	cfg := w.n.cfg
	ends := "the rank waits as long as it lasts (--peer-timeout ends the job)"
	if cfg.PeerTimeout > 0 {
		ends = fmt.Sprintf("the job ends if it lasts %v (--peer-timeout)", cfg.PeerTimeout)
	}
	fmt.Fprintf(w.n.site.Log, "brandrt: rank %s waits %s: %s sent nothing since %s (%v); %s\n",
		w.node(w.n.me), what, w.ranks(silent), from.Format("15:04:05"), quiet.Round(time.Second), ends)
}

// node names rank r and its node: "1 (node a12)".
func (w *peerWatch) node(r int) string {
	if r < len(w.n.site.Nodes) {
		return fmt.Sprintf("%d (node %s)", r, w.n.site.Nodes[r])
	}
	return fmt.Sprint(r)
}

// ranks names ranks and their nodes, the first few of them.
func (w *peerWatch) ranks(rs []int) string {
	const most = 4
	s := make([]string, 0, most+1)
	for _, r := range rs[:min(len(rs), most)] {
		s = append(s, "rank "+w.node(r))
	}
	if len(rs) > most {
		s = append(s, fmt.Sprintf("%d more ranks", len(rs)-most))
	}
	return strings.Join(s, ", ")
}
