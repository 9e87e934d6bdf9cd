package proto

import (
	"fmt"
	"slices"
)

// A window rank's own files: read chunk by chunk in plan order within the
// budget, and each handed, once in, to the position planned for it, of
// this rank's clients or of another rank.

// issue starts reads of the rank's next chunks, in plan order, while its
// budget has room for them.
func (w *WindowRank) issue() {
	m := w.cfg.Mapping
	for rds := w.home.Reads; w.nextRd < len(rds); w.nextRd++ {
		pc := rds[w.nextRd].PC
		lo, hi := m.PCFiles(pc)
		if w.unwanted(lo, hi) {
			for f := lo; f < hi; f++ {
				w.state[f-w.first] = gone
			}
			continue
		}
		b := w.wanted(lo, hi) // as the plan counts a chunk resumed mid-epoch
		if w.held+b > m.MemBytes(w.me) {
			return
		}
		w.held += b
		if w.keep[pc-w.firstPC()] {
			w.kept += b
		}
		w.stats.PeakHeld = max(w.stats.PeakHeld, w.held)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held+w.buffered)
		w.startRead(pc, w.epoch, w.state, w.keep, &w.stats)
		for f := lo; f < hi; f++ {
			if w.dropped[f-w.first] {
				w.state[f-w.first] = gone // not counted: nothing to unhold
			}
		}
	}
	w.issueEarly()
}

// wanted returns the bytes of own files in [lo, hi) not dropped.
func (w *WindowRank) wanted(lo, hi FileID) int64 {
	var b int64
	for f := lo; f < hi; f++ {
		if !w.dropped[f-w.first] {
			b += w.size(f)
		}
	}
	return b
}

// unhold takes own file f, not in memory, out of the bytes held, and
// out of those kept when its chunk is.
func (w *WindowRank) unhold(f FileID) {
	w.held -= w.size(f)
	if w.keep[w.cfg.Mapping.PC(f)-w.firstPC()] {
		w.kept -= w.size(f)
	}
}

// startRead asks for chunk pc's read for epoch e: its files are being
// read in state (the epoch's own files), keep says which chunks the
// epoch keeps to its end, and st counts the read.
func (w *WindowRank) startRead(pc int, e uint32, state []fileState, keep []bool, st *Stats) {
	lo, hi := w.cfg.Mapping.PCFiles(pc)
	for f := lo; f < hi; f++ {
		state[f-w.first] = reading
	}
	st.ChunkReads++
	st.FilesRead += int64(hi - lo)
	st.ChunkBytes += w.in.ChunkBytes(pc)
	w.rd.Reads = append(w.rd.Reads, Read{PC: pc, VC: -1, Epoch: e, Keep: keep[pc-w.firstPC()]})
}

// unwanted reports whether every own file in [lo, hi) was dropped: its
// chunk need not be read.
func (w *WindowRank) unwanted(lo, hi FileID) bool {
	for f := lo; f < hi; f++ {
		if !w.dropped[f-w.first] {
			return false
		}
	}
	return true
}

func (w *WindowRank) readDone(e ReadDone) error {
	if w.early != nil && w.early.home != nil && e.Epoch == w.early.epoch {
		return w.earlyDone(e)
	}
	if e.Epoch != w.epoch {
		return fmt.Errorf("proto: rank %d: read of chunk %d done for epoch %d in epoch %d", w.me, e.PC, e.Epoch, w.epoch)
	}
	lo, hi := w.cfg.Mapping.PCFiles(e.PC)
	if w.cfg.Mapping.Home(lo) != w.me || !slices.Contains(w.state[lo-w.first:hi-w.first], reading) {
		return fmt.Errorf("proto: rank %d: read of chunk %d done, which it is not reading", w.me, e.PC)
	}
	if err := e.checkDamaged(w.me, lo, hi); err != nil {
		return err
	}
	if e.Failed {
		w.stats.FailedReads++
	}
	for f := lo; f < hi; f++ {
		switch {
		case w.state[f-w.first] != reading: // dropped before its read
		case w.dropped[f-w.first]:
			w.state[f-w.first] = gone
			w.unhold(f)
		case e.Failed: // not in memory, kept or not
			w.state[f-w.first] = lost
			w.unhold(f)
		default:
			w.state[f-w.first] = inMemory
			w.damaged[f-w.first] = slices.Contains(e.Damaged, f)
			w.stats.FilesLoaded++
			w.stats.BytesLoaded += w.size(f)
			w.rd.Loaded = append(w.rd.Loaded, f)
		}
	}
	for f := lo; f < hi; f++ {
		qs := w.waiters[f]
		delete(w.waiters, f)
		for _, q := range qs {
			w.local(f, q)
		}
		if r, sn := w.pushFor(f); r >= 0 && sn <= w.grantOf[r] {
			w.push(r, sn, f)
		}
	}
	w.issue()
	return nil
}

// status is own file f's, in memory, as it leaves: ok, or damaged on
// storage.
func (w *WindowRank) status(f FileID) Status {
	if w.damaged[f-w.first] {
		return StatusDamaged
	}
	return StatusOK
}

// local answers a request for own file f: at once when it is in memory,
// once its chunk is in otherwise.
func (w *WindowRank) local(f FileID, q waiter) {
	switch w.state[f-w.first] {
	case inMemory:
		if q.from < 0 {
			w.stats.LocalHits++
		}
		w.answer(f, q, FromMemory)
	case lost:
		w.fail(f, q)
	case gone:
		panic(fmt.Sprintf("proto: invariant violated: rank %d: file %d asked for twice in epoch %d", w.me, f, w.epoch))
	default:
		if q.from < 0 {
			w.stats.Misses++
		}
		w.waiters[f] = append(w.waiters[f], q)
	}
}

// answer hands own file f, in memory, to its asker: this rank's client,
// or rank q.from in a reply. Either way it leaves the pool.
func (w *WindowRank) answer(f FileID, q waiter, src Source) {
	st := w.status(f)
	w.state[f-w.first] = gone
	w.held -= w.leaves(f)
	if q.from < 0 {
		w.deliver(q.sn, f, src, st)
	} else {
		w.stats.RemoteServed++
		w.rd.Sends = append(w.rd.Sends, Message{Type: MsgReply, From: int32(w.me), To: int32(q.from), Epoch: w.epoch,
			Sn: q.sn, File: f, Size: w.size(f), Status: st})
	}
	w.issue()
}

func (w *WindowRank) fail(f FileID, q waiter) {
	if q.from < 0 {
		w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: q.sn, File: f, Status: StatusReadFailed})
		return
	}
	w.pushedOut[f-w.first] = true // its failure told: nothing to push
	w.rd.Sends = append(w.rd.Sends, Message{Type: MsgReply, From: int32(w.me), To: int32(q.from), Epoch: w.epoch,
		Sn: q.sn, File: f, Status: StatusReadFailed})
}

// deliver hands file f to this rank's client for position sn: with
// status ok, or damaged (without its bytes).
func (w *WindowRank) deliver(sn int32, f FileID, src Source, st Status) {
	w.stats.Delivered++
	w.stats.BytesDelivered += w.size(f)
	w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: sn, File: f, Size: w.size(f), Source: src, Status: st})
}

// drop lets go of the own files planned for rank r's positions that
// were never answered, now that r asks for nothing more: those in memory
// at once, the others when their chunks are in; requests r left waiting
// are forgotten.
func (w *WindowRank) drop(r int) {
	for _, a := range w.answers[r] {
		f := a.File
		i := f - w.first
		delete(w.waiters, f)
		switch w.state[i] {
		case inMemory:
			w.state[i] = gone
			w.held -= w.leaves(f)
			w.rd.Forget = append(w.rd.Forget, f)
		case notRead, reading:
			w.dropped[i] = true
		}
	}
	w.issue()
}

// peerRequest answers rank m.From's request for the file planned for its
// position m.Sn.
func (w *WindowRank) peerRequest(m Message) error {
	if f, ok := w.answerOf(int(m.From), m.Sn); !ok || f != m.File {
		return fmt.Errorf("proto: rank %d: rank %d asks for file %d at its position %d, which the plan does not give it here",
			w.me, m.From, m.File, m.Sn)
	}
	i := m.File - w.first
	if w.pushedOut[i] { // asked on demand while its push (or failure) was on its way: that answers
		w.stats.Stale++
		return nil
	}
	if w.state[i] == gone || len(w.waiters[m.File]) > 0 {
		return fmt.Errorf("proto: rank %d: rank %d asks again for file %d", w.me, m.From, m.File)
	}
	w.local(m.File, waiter{from: int(m.From), sn: m.Sn})
	return nil
}

// granting takes rank m.From's grant: it may be pushed the files planned
// for its positions up to m.Sn, and gets those in memory now.
func (w *WindowRank) granting(m Message) error {
	r := int(m.From)
	if m.Sn < 0 || int(m.Sn) >= len(w.traces[r]) {
		return fmt.Errorf("proto: rank %d: rank %d grants pushes up to its position %d, outside its trace of %d", w.me, r, m.Sn, len(w.traces[r]))
	}
	if m.Sn <= w.grantOf[r] { // overtaken by a larger grant
		return nil
	}
	w.grantOf[r] = m.Sn
	if !w.done[r] {
		w.pushGranted(r)
	}
	return nil
}

// pushGranted pushes the own files planned for rank r's positions that
// r granted, those in memory now (the others as their chunks come in).
func (w *WindowRank) pushGranted(r int) {
	list := w.pushTo[r]
	for i := w.pushNext[r]; i < len(list) && list[i].Sn <= w.grantOf[r]; i++ {
		f := list[i].File
		w.push(r, list[i].Sn, f)
		if i == w.pushNext[r] && (w.pushedOut[f-w.first] || w.state[f-w.first] == gone) {
			w.pushNext[r]++ // sent, answered or dropped: never looked at again
		}
	}
}

// push sends own file f, planned for rank r's position sn and granted,
// if it is in memory (else its read's end pushes it): in this step's push
// to r, or, its chunk's read having failed, as a failed reply.
func (w *WindowRank) push(r int, sn int32, f FileID) {
	i := f - w.first
	if w.done[r] || w.pushedOut[i] {
		return
	}
	switch w.state[i] {
	case inMemory:
		w.pushedOut[i] = true
		w.state[i] = gone
		w.held -= w.leaves(f)
		w.stats.Prefetched++
		w.stats.PrefetchedBytes += w.size(f)
		w.pushing[r] = append(w.pushing[r], Pushed{Sn: sn, File: f, Size: w.size(f), Status: w.status(f)})
		w.issue()
	case lost:
		w.fail(f, waiter{from: r, sn: sn})
	}
}

// pushFor returns the rank and position own file f is pushed to, or −1.
func (w *WindowRank) pushFor(f FileID) (int, int32) {
	p := w.pushAt[f-w.first]
	if p.rank < 0 {
		return -1, -1
	}
	return int(p.rank), p.sn
}

// flush sends this step's pushes, one message per rank.
func (w *WindowRank) flush() {
	for r, ps := range w.pushing {
		if len(ps) > 0 {
			w.rd.Sends = append(w.rd.Sends, Message{Type: MsgPush, From: int32(w.me), To: int32(r), Epoch: w.epoch, Pushes: ps})
			w.pushing[r] = nil
		}
	}
}
