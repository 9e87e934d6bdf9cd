package shm

import (
	"math/bits"
	"slices"
)

// slabMax bounds the buffers that share pages: below it, a file's own
// pages would waste up to a page (a file of 61 bytes took 4 KiB, one of
// 8 KB about a quarter more); from it, at most an eighth (sizeClass).
const slabMax = 32 << 10

// slotted reports whether a buffer of size bytes takes a slot in a slab:
// one under slabMax that is not whole pages (those, chunk reads among
// them, start a page of their own).
func slotted(size uint64) bool { return size < slabMax && size%arenaGrain != 0 }

// slab is pages cut into slots of one size, each lent to one buffer.
type slab struct {
	off, bytes uint64 // its pages
	class      uint64 // the bytes of each slot
	free       []uint32
	used       int
}

// slotClass rounds a small buffer's size up to a multiple of 16 bytes,
// and from 256 bytes to one of sixteen steps per doubling (at most 1/16
// more).
func slotClass(n uint64) uint64 {
	if n <= 256 {
		return (n + 15) &^ 15
	}
	step := uint64(1) << (bits.Len64(n-1) - 5)
	return (n + step - 1) / step * step
}

// slabBytes is the pages of a slab of slots of class bytes: room for 8
// of them at least.
func slabBytes(class uint64) uint64 {
	return (8*class + arenaGrain - 1) &^ (arenaGrain - 1)
}

// slot lends a slot of class bytes, from a slab of that class with one
// free, or a new slab. Called with a.mu held.
func (a *Arena) slot(class uint64) ([]byte, bool) {
	part := a.partial[class]
	if len(part) == 0 {
		n := slabBytes(class)
		off, ok := a.takePages(n, bestFit)
		if !ok {
			return nil, false
		}
		sl := &slab{off: off, bytes: n, class: class}
		for i := n / class; i > 0; i-- {
			sl.free = append(sl.free, uint32(i-1))
		}
		for p := off / arenaGrain; p < (off+n)/arenaGrain; p++ {
			a.slabOf[p] = sl
		}
		part = append(part, sl)
	}
	sl := part[len(part)-1]
	i := sl.free[len(sl.free)-1]
	sl.free = sl.free[:len(sl.free)-1]
	sl.used++
	if len(sl.free) == 0 {
		part = part[:len(part)-1]
	}
	a.partial[class] = part
	a.lend(class)
	at := sl.off + uint64(i)*class
	return a.mem[at : at+class : at+class], true
}

// unslot takes back the slot at off of slab sl; the slab's pages go back
// with its last slot. Called with a.mu held.
func (a *Arena) unslot(sl *slab, off uint64) {
	sl.free = append(sl.free, uint32((off-sl.off)/sl.class))
	sl.used--
	a.lent -= sl.class
	part := a.partial[sl.class]
	if len(sl.free) == 1 {
		part = append(part, sl) // it was full
	}
	if sl.used == 0 {
		part = slices.DeleteFunc(part, func(x *slab) bool { return x == sl })
		for p := sl.off / arenaGrain; p < (sl.off+sl.bytes)/arenaGrain; p++ {
			delete(a.slabOf, p)
		}
		a.givePages(extent{sl.off, sl.bytes})
	}
	a.partial[sl.class] = part
}

// sizeClass rounds a buffer's size (whole pages) up to one of eight
// steps per doubling: a file's place freed then fits the many files of
// its class or smaller, at the cost of 1/16 of the memory on average.
func sizeClass(n uint64) uint64 {
	pages := n / arenaGrain
	if pages <= 8 {
		return n
	}
	step := uint64(1) << (bits.Len64(pages) - 4)
	return (pages + step - 1) / step * step * arenaGrain
}
