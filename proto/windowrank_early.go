package proto

import (
	"fmt"
	"slices"
)

// The next epoch read ahead while this one drains.

// earlyEpoch is the next epoch while the current one drains: its plan,
// and the reads of its first chunks, made within what the current
// epoch's files leave of the budget.
type earlyEpoch struct {
	epoch   uint32
	traces  [][]FileID
	home    *HomePlan   // its plan of this rank's pool; nil when planning it failed: nothing is read ahead
	state   []fileState // per own file, as WindowRank.state
	damaged []bool      // per own file, as WindowRank.damaged
	held    int64
	nextRd  int
	keep    []bool // as WindowRank.keep and kept
	kept    int64
	stats   Stats // its reads, counted in its own epoch
}

// issueEarly, once every read of the epoch is issued, reads the next
// epoch's chunks in its plan's order, while this epoch's files and those
// read ahead leave the budget room.
func (w *WindowRank) issueEarly() {
	if w.cfg.Traces == nil || w.epoch >= w.cfg.Epochs {
		return
	}
	if w.early == nil {
		e := w.epoch + 1
		in := w.input(e, w.cfg.Traces(e))
		in.After, in.Resident = w.home.after(w.cfg.Mapping.Ranks()), w.home.Resident
		w.early = &earlyEpoch{epoch: e, traces: in.Traces}
		hp, err := PlanHome(in, w.me)
		if err != nil {
			return // nothing read ahead (tried once, not on every call); the epoch's start plans again and reports it
		}
		_, n := w.cfg.Mapping.RankFiles(w.me)
		w.early.home, w.early.state, w.early.damaged, w.early.keep = hp, make([]fileState, n), make([]bool, n), w.keptOf(hp)
	}
	x := w.early
	if x.home == nil {
		return
	}
	for rds := x.home.Reads; x.nextRd < len(rds); x.nextRd++ {
		pc := rds[x.nextRd].PC
		b := w.in.ChunkBytes(pc)
		if w.held-w.kept+x.held+b > w.cfg.Mapping.MemBytes(w.me) { // the chunks this epoch keeps are the next one's first
			return
		}
		x.held += b
		if x.keep[pc-w.firstPC()] {
			x.kept += b
		}
		w.stats.PeakHeld = max(w.stats.PeakHeld, w.held-w.kept+x.held)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held-w.kept+x.held+w.buffered)
		w.startRead(pc, x.epoch, x.state, x.keep, &x.stats)
		x.stats.EarlyReads++
	}
}

// earlyDone takes a read of the next epoch's, made while this one drains.
func (w *WindowRank) earlyDone(e ReadDone) error {
	x := w.early
	lo, hi := w.cfg.Mapping.PCFiles(e.PC)
	if w.cfg.Mapping.Home(lo) != w.me || x.state[lo-w.first] != reading {
		return fmt.Errorf("proto: rank %d: read of chunk %d done for epoch %d, which it is not reading", w.me, e.PC, e.Epoch)
	}
	if err := e.checkDamaged(w.me, lo, hi); err != nil {
		return err
	}
	if e.Failed {
		x.stats.FailedReads++
	}
	for f := lo; f < hi; f++ {
		if e.Failed {
			x.state[f-w.first] = lost
			x.held -= w.size(f)
			if x.keep[e.PC-w.firstPC()] {
				x.kept -= w.size(f)
			}
			continue
		}
		x.state[f-w.first] = inMemory
		x.damaged[f-w.first] = slices.Contains(e.Damaged, f)
		x.stats.FilesLoaded++
		x.stats.BytesLoaded += w.size(f)
		w.rd.Early = append(w.rd.Early, f)
	}
	w.issue()
	return nil
}
