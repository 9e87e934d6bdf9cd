package proto

import (
	"fmt"
	"slices"
)

// refill serves rq, whose slot x is empty, from a physical chunk of x's
// physical chunk set (Redox Alg. 3): a chunk already being read if one can
// fill x, else a new read.
func (r *Rank) refill(rq req, x int32) {
	v, o := int(x)/r.k, int(x)%r.k
	pc := r.choose(v, o)
	if pc < 0 {
		panic(fmt.Sprintf("proto: invariant violated: rank %d: no unloaded file left for slot %d of vc %d", r.me, o, v))
	}
	if rd := r.reads[pc]; rd != nil {
		r.fill(rd, x, false)
		r.waiter[x] = rq
		return
	}
	r.issue(pc, v, x, rq)
}

// choose returns the local PC that refills slot o of VC v, or -1 when
// none can. Eligible PCs still hold an unloaded file for slot o. A PC
// already being read is preferred (no second read); otherwise the variant
// decides: the PCs with the most fillable slots (empty slot, unloaded file)
// or all eligible ones; ties are broken at random.
func (r *Rank) choose(v, o int) int {
	lo, hi := groupStart(v, r.nVC, r.nPC), groupStart(v+1, r.nVC, r.nPC)
	r.cand = r.cand[:0]
	for pc := lo; pc < hi; pc++ {
		if r.reads[pc] != nil && bitset(r.freeOf(pc)).has(o) {
			r.cand = append(r.cand, pc)
		}
	}
	if len(r.cand) == 0 {
		r.cand = r.eligible(v, o, lo, hi)
	}
	if len(r.cand) == 0 {
		return -1
	}
	return r.cand[r.rng.IntN(len(r.cand))]
}

// eligible collects the PCs in [lo, hi) that can refill slot o of VC v,
// keeping only those of maximal fill when the variant maximises fill.
func (r *Rank) eligible(v, o, lo, hi int) []int {
	best := -1
	empty := r.emptyOf(v)
	for pc := lo; pc < hi; pc++ {
		free := r.freeOf(pc)
		if !bitset(free).has(o) {
			continue
		}
		if !r.cfg.Variant.MaxFill() {
			r.cand = append(r.cand, pc)
			continue
		}
		switch n := andCount(empty, free); {
		case n > best:
			best, r.cand = n, append(r.cand[:0], pc)
		case n == best:
			r.cand = append(r.cand, pc)
		}
	}
	return r.cand
}

// issue starts the read of local PC pc into VC v for rq, whose slot is x.
// The read will fill x and every other empty slot whose file in pc is
// unloaded, as far as the memory budget allows; those files count as
// loaded from now on.
func (r *Rank) issue(pc, v int, x int32, rq req) {
	rd := &read{pc: pc}
	r.reads[pc] = rd
	r.fill(rd, x, false)
	r.waiter[x] = rq
	r.topUp(rd, v, func(y int32) { r.fill(rd, y, true) })
	lo, hi := r.pcRange(pc)
	// a budget that holds the shard keeps every chunk it reads: later
	// reads of it come from memory
	keep := r.budget >= r.cfg.Mapping.ShardBytes(r.me)
	r.rd.Reads = append(r.rd.Reads, Read{PC: r.firstPC + pc, VC: r.firstVC + v, Epoch: r.epoch, Keep: keep})
	r.stats.ChunkReads++
	r.stats.FilesRead += int64(hi - lo)
	r.stats.ChunkBytes += r.pcBytes[pc]
}

// fill makes slot x pending on rd with x's file of rd's PC.
func (r *Rank) fill(rd *read, x int32, count bool) {
	o := int(x) % r.k
	bitset(r.freeOf(rd.pc)).clear(o)
	r.setPending(x, r.firstFile+FileID(rd.pc*r.k+o), count)
	rd.slots = append(rd.slots, x)
}

// topUp calls place for every empty slot of VC v whose file in rd's PC is
// unloaded and fits in the memory budget, in slot order.
func (r *Rank) topUp(rd *read, v int, place func(y int32)) {
	free := bitset(r.freeOf(rd.pc))
	empty := bitset(r.emptyOf(v))
	for o := 0; o < r.k; o++ {
		if !empty.has(o) || !free.has(o) {
			continue
		}
		if r.held+r.sizes[rd.pc*r.k+o] > r.budget {
			continue
		}
		place(int32(v*r.k + o))
	}
}

// readDone completes the read of a PC: its pending slots become valid,
// empty slots it can still fill are filled, and the requests waiting on
// its slots are answered.
func (r *Rank) readDone(e ReadDone) error {
	if r.started && e.Epoch < r.epoch {
		r.stats.Stale++
		return nil
	}
	pc := e.PC - r.firstPC
	if !r.started || e.Epoch != r.epoch || pc < 0 || pc >= r.nPC || r.reads[pc] == nil {
		return fmt.Errorf("proto: rank %d: read of pc %d in epoch %d completed but none is in flight", r.me, e.PC, e.Epoch)
	}
	lo, hi := r.pcRange(pc)
	if err := e.checkDamaged(r.me, r.firstFile+FileID(lo), r.firstFile+FileID(hi)); err != nil {
		return err
	}
	rd := r.reads[pc]
	r.reads[pc] = nil
	if e.Failed {
		r.failRead(rd)
		return nil
	}
	v := r.vcOfPC(pc)
	for _, x := range rd.slots {
		if r.waiter[x].from < 0 {
			r.load(x, e.Damaged)
		}
	}
	r.topUp(rd, v, func(y int32) {
		bitset(r.freeOf(pc)).clear(int(y) % r.k)
		r.slotFile[y] = r.firstFile + FileID(pc*r.k+int(y)%r.k)
		r.load(y, e.Damaged)
	})
	for _, x := range rd.slots {
		if w := r.waiter[x]; w.from >= 0 {
			r.waiter[x] = noReq
			f := r.slotFile[x]
			r.loaded(f, e.Damaged)
			r.setEmpty(x)
			r.answer(w, f, FromRead, x)
			r.next(x)
		}
	}
	return nil
}

// load makes slot x, whose file just arrived, valid.
func (r *Rank) load(x int32, damaged []FileID) {
	r.setValid(x)
	r.loaded(r.slotFile[x], damaged)
}

// loaded counts file f, just read, as loaded, and notes whether its read
// found it damaged.
func (r *Rank) loaded(f FileID, damaged []FileID) {
	r.rd.Loaded = append(r.rd.Loaded, f)
	r.stats.FilesLoaded++
	r.stats.BytesLoaded += r.size(f)
	if slices.Contains(damaged, f) {
		if r.damaged == nil {
			r.damaged = make(map[FileID]bool)
		}
		r.damaged[f] = true
	}
}

// failRead undoes a failed read: its files count as unloaded again, its
// waiters get a failure, and requests queued behind them are retried.
func (r *Rank) failRead(rd *read) {
	r.stats.FailedReads++
	for _, x := range rd.slots {
		o := int(x) % r.k
		bitset(r.freeOf(rd.pc)).set(o)
		r.setEmpty(x)
		if w := r.waiter[x]; w.from >= 0 {
			r.waiter[x] = noReq
			r.fail(w)
		}
	}
	for _, x := range rd.slots {
		r.next(x)
	}
}

// next serves the requests queued on slot x, which has just lost its
// waiter, until the slot has a waiter again or the queue is empty.
func (r *Rank) next(x int32) {
	for len(r.queue[x]) > 0 && (r.state[x] != slotPending || r.waiter[x].from < 0) {
		q := r.queue[x]
		if len(q) == 1 {
			delete(r.queue, x)
		} else {
			r.queue[x] = q[1:]
		}
		if !r.fromMemory(q[0], x) {
			r.wait(q[0], x)
		}
	}
}
