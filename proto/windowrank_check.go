package proto

import "fmt"

// CheckInvariants returns the first broken internal invariant of the
// window rank, or nil: the bytes of its own files being read or in memory,
// and those of the chunks it keeps to the epoch's end, add up to the held
// total, which stays within the budget, with the next epoch's reads
// ahead beside what it keeps for that epoch; the bytes of files arrived ahead of their positions
// add up to the buffered total, and those of the pushes granted and not
// yet asked for to grantBytes, both within its Remote limit; only
// positions of files of other ranks are fetched, planned as pushed,
// arrived or failed, and a file arrives only for a position granted and
// not asked for; only files not yet in have waiters; and its reads
// follow the plan. It runs after every Step when
// built with the invariants tag.
func (w *WindowRank) CheckInvariants() error {
	if !w.started {
		return nil
	}
	held := w.kept + w.heldBeside(w.state, w.keep)
	if held != w.held {
		return fmt.Errorf("own files being read or in memory hold %d bytes, counted %d", held, w.held)
	}
	budget := w.cfg.Mapping.MemBytes(w.me)
	if held > budget {
		return fmt.Errorf("holds %d bytes of its own files, over its budget of %d", held, budget)
	}
	if x := w.early; x != nil && x.home != nil {
		if early := x.kept + w.heldBeside(x.state, x.keep); early != x.held {
			return fmt.Errorf("epoch %d's files read ahead hold %d bytes, counted %d", x.epoch, early, x.held)
		}
		if held-w.kept+x.held > budget {
			return fmt.Errorf("holds %d bytes of its own files, and %d of the next epoch's beside the %d it keeps for it, over its budget of %d",
				held-w.kept, x.held, w.kept, budget)
		}
	}
	var files []FileID
	if w.share != nil {
		files = w.share.Files
	}
	var buffered, granted int64
	for sn, f := range files {
		own := w.cfg.Mapping.Home(f) == w.me
		if (w.fetched[sn] || w.planned[sn] || w.arrived[sn] || w.failed[sn]) && own {
			return fmt.Errorf("position %d: its own file %d was fetched, planned as pushed, arrived or failed", sn, f)
		}
		if w.arrived[sn] && (w.asked[sn] || !w.planned[sn] || int32(sn) > w.told) {
			return fmt.Errorf("position %d (file %d) arrived, but asked for already, not pushed or not granted", sn, f)
		}
		if w.arrived[sn] {
			buffered += w.size(f)
		}
		if w.planned[sn] && !w.asked[sn] && int32(sn) >= w.low && int32(sn) <= w.granted {
			granted += w.size(f)
		}
	}
	if buffered != w.buffered {
		return fmt.Errorf("files arrived ahead hold %d bytes, counted %d", buffered, w.buffered)
	}
	if granted != w.grantBytes {
		return fmt.Errorf("pushes granted and not yet asked for hold %d bytes, counted %d", granted, w.grantBytes)
	}
	if limit := w.remoteLimit(); w.buffered > limit || (!w.clientsDone && w.grantBytes > limit) {
		return fmt.Errorf("holds %d bytes of other ranks' files and granted %d, over its limit of %d", w.buffered, w.grantBytes, limit)
	}
	if w.told > w.granted || (int(w.low) < len(w.asked) && w.asked[w.low]) {
		return fmt.Errorf("told %d, granted %d, lowest position not asked %d", w.told, w.granted, w.low)
	}
	for f, qs := range w.waiters {
		if w.cfg.Mapping.Home(f) != w.me {
			return fmt.Errorf("requests wait for file %d of rank %d", f, w.cfg.Mapping.Home(f))
		}
		if s := w.state[f-w.first]; s != notRead && s != reading && len(qs) > 0 {
			return fmt.Errorf("%d requests wait for file %d, which is %s", len(qs), f, s)
		}
	}
	if w.nextRd > len(w.home.Reads) {
		return fmt.Errorf("read %d of %d planned", w.nextRd, len(w.home.Reads))
	}
	return nil
}

// checkInvariants panics when CheckInvariants finds a broken invariant.
func (w *WindowRank) checkInvariants() {
	if err := w.CheckInvariants(); err != nil {
		panic(fmt.Sprintf("proto: invariant violated: rank %d: %v", w.me, err))
	}
}

// String names a file's state, for dumps and errors.
func (s fileState) String() string {
	switch s {
	case notRead:
		return "not read"
	case reading:
		return "being read"
	case inMemory:
		return "in memory"
	case gone:
		return "gone"
	case lost:
		return "lost"
	}
	return fmt.Sprintf("fileState(%d)", s)
}

// heldBeside counts the bytes of own files being read or in memory in
// state whose chunks keep does not mark.
func (w *WindowRank) heldBeside(state []fileState, keep []bool) int64 {
	var held int64
	for i, s := range state {
		if f := w.first + FileID(i); (s == reading || s == inMemory) && !keep[w.cfg.Mapping.PC(f)-w.firstPC()] {
			held += w.size(f)
		}
	}
	return held
}
