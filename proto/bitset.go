package proto

import "math/bits"

// bitset is a fixed-size set of small non-negative integers.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }
func (b bitset) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) clear(i int)    { b[i>>6] &^= 1 << (uint(i) & 63) }

// setRange sets bits [lo, hi).
func (b bitset) setRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		b.set(i)
	}
}

func (b bitset) reset() { clear(b) }

// andCount returns |a ∩ b| for equally long sets.
func andCount(a, b []uint64) int {
	n := 0
	for i := range a {
		n += bits.OnesCount64(a[i] & b[i])
	}
	return n
}
