package proto

import "fmt"

// checkInvariants verifies the rank's internal consistency and panics with
// "proto: invariant violated" when it does not hold. It runs after every
// Step when built with the invariants tag, and whenever CheckInvariants is
// called.
func (r *Rank) checkInvariants() {
	if err := r.consistency(); err != nil {
		panic(fmt.Sprintf("proto: invariant violated: rank %d: %v", r.me, err))
	}
}

// CheckInvariants returns the first broken internal invariant, or nil:
// slot masks agree with slot states, the bytes of valid and counted slots
// add up to the held total, which stays within the budget, every slot's
// file is loaded and maps to that slot, and the buffer stays within the
// remote-memory limit.
func (r *Rank) CheckInvariants() error { return r.consistency() }

func (r *Rank) consistency() error {
	if !r.started {
		return nil
	}
	var held int64
	for x := range r.state {
		if err := r.checkSlot(int32(x)); err != nil {
			return err
		}
		if r.counted.has(x) {
			held += r.size(r.slotFile[x])
		}
	}
	if held != r.held {
		return fmt.Errorf("held bytes %d, slots add up to %d", r.held, held)
	}
	if r.held > r.budget {
		return fmt.Errorf("held bytes %d exceed the budget of %d", r.held, r.budget)
	}
	return r.checkBuffers()
}

func (r *Rank) checkSlot(x int32) error {
	v, o := int(x)/r.k, int(x)%r.k
	st, f := r.state[x], r.slotFile[x]
	isEmpty, isValid := bitset(r.emptyOf(v)).has(o), bitset(r.validOf(v)).has(o)
	if isEmpty != (st == slotEmpty) || isValid != (st == slotValid) {
		return fmt.Errorf("slot %d: state %d, masks empty=%v valid=%v", x, st, isEmpty, isValid)
	}
	if st == slotEmpty {
		if f != NoFile || r.counted.has(int(x)) || r.waiter[x].from >= 0 {
			return fmt.Errorf("empty slot %d holds file %d (counted %v, waiter %d)", x, f, r.counted.has(int(x)), r.waiter[x].from)
		}
		return nil
	}
	if !r.isLocal(f) || r.slotOf(f) != x {
		return fmt.Errorf("slot %d holds file %d, which maps elsewhere", x, f)
	}
	li := r.localIndex(f)
	if bitset(r.freeOf(li / r.k)).has(li % r.k) {
		return fmt.Errorf("slot %d holds file %d, which is not marked loaded", x, f)
	}
	if st == slotValid && (!r.counted.has(int(x)) || r.waiter[x].from >= 0) {
		return fmt.Errorf("valid slot %d: counted %v, waiter %d", x, r.counted.has(int(x)), r.waiter[x].from)
	}
	return nil
}

func (r *Rank) checkBuffers() error {
	var total int64
	for h := range r.owners {
		if h == r.me {
			continue
		}
		var sum int64
		for x, e := range r.owners[h].buf {
			if _, want := r.m.Locate(e.file); want != x {
				return fmt.Errorf("buffer slot %d of rank %d holds file %d of slot %d", x, h, e.file, want)
			}
			sum += e.size
		}
		if sum > r.share || sum != r.owners[h].bytes {
			return fmt.Errorf("buffer of rank %d holds %d bytes (counted %d), its share is %d", h, sum, r.owners[h].bytes, r.share)
		}
		total += sum
	}
	if total != r.buffered {
		return fmt.Errorf("buffered bytes %d, buffers add up to %d", r.buffered, total)
	}
	return nil
}
