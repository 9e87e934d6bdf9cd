package rt

import (
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// asks is what the rank's clients asked for in one epoch: the positions
// asked for and the replies waiting, how many were answered, and the
// clients' word that the epoch (or a share of it) ends. It holds no
// files and talks to nobody: the loop steps the machine and delivers;
// asks keeps the count.
type asks struct {
	// waiting holds the reply channel of each position asked for and
	// not yet answered.
	waiting map[int32]chan<- Delivery
	// asked marks the positions asked for (or delivered before a
	// restart); traceLen is their number, answered how many were answered.
	asked              []bool
	traceLen, answered int
	// ended: every client ended the epoch (End with Replicas 0, or the
	// training is over). endedShare holds the shares whose clients ended
	// it; dropping the positions the rank asked for itself to end them,
	// whose answers nobody reads. endedEarly: a client ended the epoch,
	// whole or a share.
	ended      bool
	endedShare map[Share]bool
	dropping   map[int32]bool
	endedEarly bool
	// order holds the file delivered at each position (Site.Order);
	// nil when nobody wants it.
	order []int32
}

// newAsks starts an epoch of traceLen positions whose first from were
// delivered before a restart; ended when no client will ask (the
// training is over); withOrder keeps the order of the deliveries.
func newAsks(traceLen, from int, ended, withOrder bool) *asks {
	a := &asks{waiting: make(map[int32]chan<- Delivery), asked: make([]bool, traceLen), traceLen: traceLen, answered: from, ended: ended}
	for sn := range from {
		a.asked[sn] = true
	}
	if withOrder {
		a.order = make([]int32, traceLen)
		for i := range a.order {
			a.order[i] = int32(proto.NoFile)
		}
	}
	return a
}

// pending reports whether a client waits for an answer.
func (a *asks) pending() bool { return len(a.waiting) > 0 }

// waits reports whether position sn is asked for and not yet answered.
func (a *asks) waits(sn int32) bool {
	_, ok := a.waiting[sn]
	return ok
}

// take notes that position sn was asked for, answered on reply (nil: the
// rank asked for it itself, to end a share).
func (a *asks) take(sn int32, reply chan<- Delivery) {
	a.waiting[sn] = reply
	a.asked[sn] = true
}

// answer takes position sn's answer off the waiting: it returns the
// reply channel, and whether the rank asked for the position itself (its
// answer is dropped). It panics when no client asked for sn: the
// machine delivered what nobody asked for.
func (a *asks) answer(me int, sn int32) (reply chan<- Delivery, drop bool) {
	reply, ok := a.waiting[sn]
	if !ok {
		panic(fmt.Sprintf("rt: rank %d: delivery for position %d, which no client asked for", me, sn))
	}
	delete(a.waiting, sn)
	a.answered++
	if a.dropping[sn] {
		delete(a.dropping, sn)
		return nil, true
	}
	return reply, false
}

// delivered notes that file f answered position sn.
func (a *asks) delivered(sn int32, f proto.FileID) {
	if a.order != nil {
		a.order[sn] = int32(f)
	}
}

// clientsDone reports whether the clients will ask for nothing more this
// epoch: every position was answered, or the clients ended the epoch and
// nothing they asked for waits.
func (a *asks) clientsDone() bool {
	return a.answered == a.traceLen || a.ended && len(a.waiting) == 0
}

// endShare takes the word of share k's clients that they ask for nothing
// more this epoch (Replicas 0: every client). For a share, it returns
// the share's positions not yet asked for, which the rank must ask for
// itself (and drop the answers: the window policy's plan frees their
// files' memory no other way); they are marked dropping.
func (a *asks) endShare(k Share) []int32 {
	if k.Replicas <= 0 {
		a.ended = true
		return nil
	}
	if a.endedShare[k] {
		return nil
	}
	if a.endedShare == nil {
		a.endedShare, a.dropping = make(map[Share]bool), make(map[int32]bool)
	}
	a.endedShare[k] = true
	a.endedEarly = true
	var left []int32
	for sn := int(k.Replica); sn < a.traceLen; sn += int(k.Replicas) {
		if !a.asked[sn] {
			a.dropping[int32(sn)] = true
			left = append(left, int32(sn))
		}
	}
	return left
}

// unaskedAll counts the positions not asked for in this epoch.
func (a *asks) unaskedAll() int {
	n := 0
	for _, x := range a.asked {
		if !x {
			n++
		}
	}
	return n
}

// unasked counts the positions of share k not asked for in this epoch,
// unless its processes ended the epoch for it.
func (a *asks) unasked(k Share) int {
	if k.Replicas <= 0 || a.endedShare[k] {
		return 0
	}
	n := 0
	for sn := int(k.Replica); sn < a.traceLen; sn += int(k.Replicas) {
		if !a.asked[sn] {
			n++
		}
	}
	return n
}

// endedBefore reports whether a client ended the epoch before every
// position was asked for (EpochStats: ended early).
func (a *asks) endedBefore() bool {
	return a.endedEarly || a.ended && a.unaskedAll() > 0
}
