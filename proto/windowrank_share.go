package proto

import (
	"fmt"
	"slices"
)

// A window rank's share of the epoch's plan, put together from messages
// (windowhome.go): at the epoch's start it tells every other rank the
// answers its pool gives that rank's positions (MsgAnswers); once every
// home's answers are in, it plans its positions and pushes (PlanShare),
// serves the requests its clients made meanwhile, and tells every other
// rank which of its positions that rank's files are pushed to ahead
// (MsgAhead), which the home then pushes as this rank grants.

// tellAnswers sends each other rank the answers of this rank's pool to
// that rank's positions, and takes its own.
func (w *WindowRank) tellAnswers() error {
	for r, as := range w.answers {
		if r != w.me {
			w.rd.Sends = append(w.rd.Sends, Message{Type: MsgAnswers, From: int32(w.me), To: int32(r), Epoch: w.epoch, Answers: as})
		}
	}
	return w.answersFrom(w.me, w.answers[w.me])
}

// answersFrom takes home h's answers to this rank's positions; with the
// last home's, the rank plans its share.
func (w *WindowRank) answersFrom(h int, as []Answer) error {
	if w.share != nil || w.fromHomes[h] != nil {
		return fmt.Errorf("proto: rank %d: rank %d answers its positions of epoch %d twice", w.me, h, w.epoch)
	}
	if err := w.checkAnswers(h, as); err != nil {
		return err
	}
	if as == nil {
		as = []Answer{}
	}
	w.fromHomes[h] = as
	if w.answersIn++; w.answersIn < len(w.fromHomes) {
		return nil
	}
	rs, err := PlanShare(w.input(w.epoch, w.traces), w.me, w.fromHomes)
	if err != nil { // the rank as it was: bad answers are refused
		w.fromHomes[h] = nil
		w.answersIn--
		return err
	}
	w.share, w.fromHomes = rs, nil
	w.planned = make([]bool, len(w.asked))
	for sn, at := range rs.PushAt {
		w.planned[sn] = at >= 0 && int(at) < sn // another rank's file, pushed ahead
	}
	if !w.clientsDone { // after its done, the homes keep nothing for it
		for h, sns := range rs.AheadBy(w.cfg.Mapping) {
			if h != w.me {
				w.rd.Sends = append(w.rd.Sends, Message{Type: MsgAhead, From: int32(w.me), To: int32(h), Epoch: w.epoch, Ahead: sns})
			}
		}
	}
	queued := w.queued
	w.queued = nil
	for _, sn := range queued {
		w.serve(sn, false) // asked for before any grant
	}
	w.grant(-1)
	return nil
}

// checkAnswers refuses home h's answers unless they answer, in position
// order, every position of this rank that asks for a file of h's, each
// with a file of h's of the size this rank knows, no file twice: so that
// one home's answers cannot spoil another's.
func (w *WindowRank) checkAnswers(h int, as []Answer) error {
	m, trace := w.cfg.Mapping, w.traces[w.me]
	lo, files := m.RankFiles(h)
	hi := lo + FileID(files)
	next := 0 // the next position of h's
	seen := newBitset(files)
	for i, a := range as {
		for next < len(trace) && (trace[next] < lo || trace[next] >= hi) {
			next++
		}
		switch {
		case int(a.Sn) != next:
			return fmt.Errorf("proto: rank %d: rank %d's answer %d is for position %d; its next position asking for a file of rank %d's is %d (of %d)",
				w.me, h, i, a.Sn, h, next, len(trace))
		case a.File < lo || a.File >= hi:
			return fmt.Errorf("proto: rank %d: rank %d answers position %d with file %d, not one of its own", w.me, h, a.Sn, a.File)
		case a.Size != w.size(a.File):
			return fmt.Errorf("proto: rank %d: rank %d answers position %d with file %d of %d bytes; its index says %d", w.me, h, a.Sn, a.File, a.Size, w.size(a.File))
		case seen.has(int(a.File - lo)):
			return fmt.Errorf("proto: rank %d: rank %d answers two positions with file %d", w.me, h, a.File)
		}
		seen.set(int(a.File - lo))
		next++
	}
	for next < len(trace) && (trace[next] < lo || trace[next] >= hi) {
		next++
	}
	if next < len(trace) {
		return fmt.Errorf("proto: rank %d: rank %d leaves its position %d (file %d of rank %d's) unanswered", w.me, h, next, trace[next], h)
	}
	return nil
}

// aheadFrom takes rank r's positions that this rank's files are pushed
// to ahead, and pushes those r granted already.
func (w *WindowRank) aheadFrom(r int, sns []int32) error {
	if w.aheadIn[r] {
		return fmt.Errorf("proto: rank %d: rank %d says twice which of its positions of epoch %d it is pushed", w.me, r, w.epoch)
	}
	as := w.answers[r]
	list := make([]Answer, 0, len(sns))
	j := 0
	for i, sn := range sns {
		if i > 0 && sn <= sns[i-1] {
			return fmt.Errorf("proto: rank %d: rank %d lists its positions pushed ahead out of order (%d after %d)", w.me, r, sn, sns[i-1])
		}
		k := slices.IndexFunc(as[j:], func(a Answer) bool { return a.Sn >= sn })
		if k < 0 || as[j+k].Sn != sn {
			return fmt.Errorf("proto: rank %d: rank %d is pushed a file of this rank ahead to its position %d, which no file of this rank answers", w.me, r, sn)
		}
		j += k
		list = append(list, as[j])
	}
	w.aheadIn[r] = true
	for _, a := range list {
		w.pushAt[a.File-w.first] = pushTarget{rank: int32(r), sn: a.Sn}
	}
	w.pushTo[r] = list
	if !w.done[r] {
		w.pushGranted(r)
	}
	return nil
}

// answerOf returns the file of this rank's that answers rank r's
// position sn, or false.
func (w *WindowRank) answerOf(r int, sn int32) (FileID, bool) {
	as := w.answers[r]
	i, ok := slices.BinarySearchFunc(as, sn, func(a Answer, sn int32) int { return int(a.Sn) - int(sn) })
	if !ok {
		return NoFile, false
	}
	return as[i].File, true
}
