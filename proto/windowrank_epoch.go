package proto

import (
	"fmt"
	"slices"
)

// A window rank's epochs: each planned at its start, from the previous
// epoch's drains, or resumed mid-way.

func (w *WindowRank) startEpoch(e EpochStart) error {
	if w.started && e.Epoch <= w.epoch {
		return fmt.Errorf("proto: epoch %d after epoch %d", e.Epoch, w.epoch)
	}
	if e.Start != nil && e.Delivered != nil {
		return fmt.Errorf("proto: rank %d: epoch %d resumes both at start positions and after delivered files", w.me, e.Epoch)
	}
	if e.Start != nil && len(e.Start) != len(e.Traces) {
		return fmt.Errorf("proto: rank %d: epoch %d starts with %d start positions for %d traces", w.me, e.Epoch, len(e.Start), len(e.Traces))
	}
	for r, sn := range e.Start {
		if sn < 0 || int(sn) > len(e.Traces[r]) {
			return fmt.Errorf("proto: rank %d: epoch %d starts at position %d of rank %d, whose trace has %d", w.me, e.Epoch, sn, r, len(e.Traces[r]))
		}
	}
	x := w.early
	if x != nil && x.home == nil { // its planning failed: plan again, and report it
		x = nil
	}
	if x != nil && (x.epoch != e.Epoch || e.Start != nil || e.Delivered != nil || !sameTraces(x.traces, e.Traces)) {
		return fmt.Errorf("proto: rank %d: epoch %d starts (on other traces, or mid-way), but epoch %d was read ahead on its own",
			w.me, e.Epoch, x.epoch)
	}
	var hp *HomePlan
	_, n := w.cfg.Mapping.RankFiles(w.me)
	if x != nil {
		hp = x.home
	} else {
		var err error
		if hp, err = w.planEpoch(e); err != nil {
			return err
		}
		x = &earlyEpoch{state: make([]fileState, n), damaged: make([]bool, n), keep: w.keptOf(hp)}
	}
	var whole *WindowPlan
	if w.cfg.Whole {
		var err error
		if whole, err = w.planWhole(e); err != nil {
			return err
		}
	}
	ranks := w.cfg.Mapping.Ranks()
	steps := len(e.Traces[w.me])
	*w = WindowRank{cfg: w.cfg, in: w.in, me: w.me, first: w.first, rd: w.rd, epoch: e.Epoch, started: true, traces: e.Traces,
		home: hp, answers: hp.ByRank(ranks), fromHomes: make([][]Answer, ranks), aheadIn: make([]bool, ranks), whole: whole,
		deferred: w.deferred, state: x.state, held: x.held, keep: x.keep, kept: x.kept, nextRd: x.nextRd, damaged: x.damaged, stats: x.stats, dropped: make([]bool, n),
		done: make([]bool, ranks), waiters: map[FileID][]waiter{},
		asked: make([]bool, steps), fetched: make([]bool, steps), arrived: make([]bool, steps), arrivedAs: make([]Status, steps),
		failed: make([]bool, steps)}
	w.stats.PeakHeld, w.stats.PeakMem = w.held, w.held
	w.skip(e.Start)
	for f := range e.Delivered {
		if e.Delivered[f] && w.cfg.Mapping.Home(FileID(f)) == w.me {
			w.dropped[FileID(f)-w.first] = true
		}
	}
	w.issue()
	w.setPushes(e.Start)
	if err := w.tellAnswers(); err != nil {
		return err
	}
	held := w.deferred
	w.deferred = nil
	for _, m := range held {
		if err := w.message(m); err != nil {
			w.rd.Dropped = append(w.rd.Dropped, err)
		}
	}
	return nil
}

// sameTraces reports whether a and b are the same traces.
func sameTraces(a, b [][]FileID) bool {
	return slices.EqualFunc(a, b, func(x, y []FileID) bool { return slices.Equal(x, y) })
}

// planEpoch plans this rank's pool in the epoch e starts: from what the
// previous epoch's left, or, resumed after delivered files, as RestPlan
// plans it.
func (w *WindowRank) planEpoch(e EpochStart) (*HomePlan, error) {
	in := w.input(e.Epoch, e.Traces)
	if e.Delivered == nil {
		before, err := w.before(e.Epoch)
		if err != nil {
			return nil, err
		}
		if before != nil {
			in.After, in.Resident = before.after(w.cfg.Mapping.Ranks()), before.Resident
		}
		return PlanHome(in, w.me)
	}
	in.Delivered = e.Delivered
	hp, err := PlanHome(in, w.me)
	if err != nil || w.cfg.Traces == nil {
		return hp, err
	}
	// the epochs after it are planned as a job that was not interrupted
	// plans them
	fresh, err := w.planOf(e.Epoch)
	if err != nil {
		return nil, err
	}
	hp.Drain, hp.Resident = fresh.Drain, fresh.Resident
	return hp, nil
}

// before returns the pool epoch e's starts from, for its drain and the
// chunks it left resident: the previous epoch's (nil before epoch 2). A
// rank that did not just plan that epoch plans the epochs before e
// again, from epoch 1, on cfg.Traces.
func (w *WindowRank) before(e uint32) (*HomePlan, error) {
	switch {
	case e <= 1:
		return nil, nil
	case w.home != nil && w.epoch == e-1:
		return w.home, nil
	}
	return w.planOf(e - 1)
}

// planOf plans this rank's pool in epochs 1 to e on cfg.Traces and
// returns epoch e's.
func (w *WindowRank) planOf(e uint32) (*HomePlan, error) {
	if w.cfg.Traces == nil {
		return nil, fmt.Errorf("proto: rank %d: epoch %d plans from epoch %d's, whose traces it does not know", w.me, e+1, e)
	}
	hp, err := homeThrough(w.in, w.me, e, w.cfg.Traces)
	if err != nil {
		return nil, fmt.Errorf("proto: rank %d: planning the epochs before epoch %d again: %w", w.me, e+1, err)
	}
	return hp, nil
}

// planWhole plans the whole epoch e starts (WindowConfig.Whole), as
// planEpoch plans this rank's pool of it.
func (w *WindowRank) planWhole(e EpochStart) (*WindowPlan, error) {
	in := w.input(e.Epoch, e.Traces)
	if e.Delivered != nil {
		in.Delivered = e.Delivered
		p, err := PlanWindow(in)
		if err != nil || w.cfg.Traces == nil {
			return p, err
		}
		fresh, err := planThrough(w.in, e.Epoch, w.cfg.Traces)
		if err != nil {
			return nil, err
		}
		p.Drains, p.Resident = fresh.Drains, fresh.Resident
		return p, nil
	}
	before := w.whole
	if e.Epoch <= 1 {
		before = nil
	} else if before == nil || w.epoch != e.Epoch-1 {
		if w.cfg.Traces == nil {
			return nil, fmt.Errorf("proto: rank %d: epoch %d plans from epoch %d's, whose traces it does not know", w.me, e.Epoch, e.Epoch-1)
		}
		var err error
		if before, err = planThrough(w.in, e.Epoch-1, w.cfg.Traces); err != nil {
			return nil, err
		}
	}
	if before != nil {
		in.After, in.Resident = before.Drains, before.Resident
	}
	return PlanWindow(in)
}

// skip takes the positions before start (a resumed epoch) as delivered:
// this rank's clients will not ask for them, and the own files planned
// for any rank's are not kept. Chunks left with no file to keep are not
// read (issue).
func (w *WindowRank) skip(start []int32) {
	if start == nil {
		return
	}
	for r, n := range start {
		for _, a := range w.answers[r] {
			if a.Sn >= n {
				break
			}
			w.dropped[a.File-w.first] = true
		}
	}
	w.start = start[w.me]
	for sn := range w.start {
		w.asked[sn] = true
	}
}

// setPushes lays out what the epoch's pushes need before the share and
// the other ranks' lists of positions pushed ahead come: none granted
// before the positions the epoch starts at.
func (w *WindowRank) setPushes(start []int32) {
	m := w.cfg.Mapping
	ranks := m.Ranks()
	_, n := m.RankFiles(w.me)
	w.pushTo, w.pushNext, w.grantOf, w.pushing = make([][]Answer, ranks), make([]int, ranks), make([]int32, ranks), make([][]Pushed, ranks)
	w.pushAt, w.pushedOut = make([]pushTarget, n), make([]bool, n)
	for i := range w.pushAt {
		w.pushAt[i].rank = -1
	}
	for r := range ranks {
		w.grantOf[r] = -1
		if start != nil {
			w.grantOf[r] = start[r] - 1
		}
	}
	w.low, w.granted, w.told = w.start, w.start-1, w.start-1
}
