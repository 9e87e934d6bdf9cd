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
	if x != nil && x.plan == nil { // its planning failed: plan again, and report it
		x = nil
	}
	if x != nil && (x.epoch != e.Epoch || e.Start != nil || e.Delivered != nil || !sameTraces(x.traces, e.Traces)) {
		return fmt.Errorf("proto: rank %d: epoch %d starts (on other traces, or mid-way), but epoch %d was read ahead on its own",
			w.me, e.Epoch, x.epoch)
	}
	var p *WindowPlan
	_, n := w.cfg.Mapping.RankFiles(w.me)
	if x != nil {
		p = x.plan
	} else {
		var err error
		if p, err = w.planEpoch(e); err != nil {
			return err
		}
		x = &earlyEpoch{state: make([]fileState, n), damaged: make([]bool, n), keep: w.keptOf(p)}
	}
	steps := len(p.Files[w.me])
	*w = WindowRank{cfg: w.cfg, in: w.in, me: w.me, first: w.first, rd: w.rd, epoch: e.Epoch, started: true, plan: p,
		deferred: w.deferred, state: x.state, held: x.held, keep: x.keep, kept: x.kept, nextRd: x.nextRd, damaged: x.damaged, stats: x.stats, dropped: make([]bool, n),
		done: make([]bool, w.cfg.Mapping.Ranks()), waiters: map[FileID][]waiter{},
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

// planEpoch plans the epoch e starts: from the previous epoch's drains,
// or, resumed after delivered files, as RestPlan does.
func (w *WindowRank) planEpoch(e EpochStart) (*WindowPlan, error) {
	in := w.input(e.Epoch, e.Traces)
	if e.Delivered == nil {
		before, err := w.before(e.Epoch)
		if err != nil {
			return nil, err
		}
		if before != nil {
			in.After, in.Resident = before.Drains, before.Resident
		}
		return PlanWindow(in)
	}
	in.Delivered = e.Delivered
	p, err := PlanWindow(in)
	if err != nil || w.cfg.Traces == nil {
		return p, err
	}
	// the epochs after it are planned as a job that was not interrupted
	// plans them
	fresh, err := w.planOf(e.Epoch)
	if err != nil {
		return nil, err
	}
	p.Drains, p.Resident = fresh.Drains, fresh.Resident
	return p, nil
}

// before returns the plan epoch e's starts from, for its drains and the
// chunks it left resident: the previous epoch's (nil before epoch 2). A
// rank that did not just plan that epoch plans the epochs before e
// again, from epoch 1, on cfg.Traces.
func (w *WindowRank) before(e uint32) (*WindowPlan, error) {
	switch {
	case e <= 1:
		return nil, nil
	case w.plan != nil && w.epoch == e-1:
		return w.plan, nil
	}
	return w.planOf(e - 1)
}

// planOf plans epochs 1 to e on cfg.Traces and returns epoch e's plan.
func (w *WindowRank) planOf(e uint32) (*WindowPlan, error) {
	if w.cfg.Traces == nil {
		return nil, fmt.Errorf("proto: rank %d: epoch %d plans from epoch %d's, whose traces it does not know", w.me, e+1, e)
	}
	p, err := planThrough(w.in, e, w.cfg.Traces)
	if err != nil {
		return nil, fmt.Errorf("proto: rank %d: planning the epochs before epoch %d again: %w", w.me, e+1, err)
	}
	return p, nil
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
		for _, f := range w.plan.Files[r][:n] {
			if w.cfg.Mapping.Home(f) == w.me {
				w.dropped[f-w.first] = true
			}
		}
	}
	w.start = start[w.me]
	for sn := range w.start {
		w.asked[sn] = true
	}
}

// setPushes lays out the epoch's planned pushes: those to this rank's
// positions (planned), those of its own files to other ranks' (pushTo,
// pushAt), none granted before the positions the epoch starts at; then
// the rank grants its first ones.
func (w *WindowRank) setPushes(start []int32) {
	m := w.cfg.Mapping
	ranks := m.Ranks()
	_, n := m.RankFiles(w.me)
	w.planned = make([]bool, len(w.asked))
	w.pushTo, w.pushNext, w.grantOf, w.pushing = make([][]int32, ranks), make([]int, ranks), make([]int32, ranks), make([][]Pushed, ranks)
	w.pushAt, w.pushedOut = make([]pushTarget, n), make([]bool, n)
	for i := range w.pushAt {
		w.pushAt[i].rank = -1
	}
	for r := range ranks {
		w.grantOf[r] = -1
		if start != nil {
			w.grantOf[r] = start[r] - 1
		}
		for sn, at := range w.plan.PushAt[r] {
			if at < 0 || int(at) >= sn { // its own file, or sent on demand
				continue
			}
			f := w.plan.Files[r][sn]
			switch {
			case r == w.me:
				w.planned[sn] = true
			case m.Home(f) == w.me:
				w.pushTo[r] = append(w.pushTo[r], int32(sn))
				w.pushAt[f-w.first] = pushTarget{rank: int32(r), sn: int32(sn)}
			}
		}
	}
	w.low, w.granted, w.told = w.start, w.start-1, w.start-1
	w.grant(-1)
}
