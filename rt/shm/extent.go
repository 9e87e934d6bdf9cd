package shm

import (
	"cmp"
	"slices"
)

// extent is a run of the arena's pages: n bytes from off. The arena's
// free pages are extents, kept sorted and disjoint.
type extent struct{ off, n uint64 }

// bestFit returns the start of the smallest extent of xs of at least n
// bytes (the first of those).
func bestFit(xs []extent, n uint64) (uint64, bool) {
	best := -1
	for i, x := range xs {
		if x.n >= n && (best < 0 || x.n < xs[best].n) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	return xs[best].off, true
}

// lastFit returns the top n bytes of the last extent of xs that has them.
func lastFit(xs []extent, n uint64) (uint64, bool) {
	for i := len(xs) - 1; i >= 0; i-- {
		if xs[i].n >= n {
			return xs[i].off + xs[i].n - n, true
		}
	}
	return 0, false
}

// minus returns the parts of e that lie outside xs (sorted, disjoint).
func minus(e extent, xs []extent) []extent {
	var out []extent
	at, end := e.off, e.off+e.n
	i, _ := slices.BinarySearchFunc(xs, e.off, func(x extent, off uint64) int { return cmp.Compare(x.off+x.n, off+1) })
	for ; i < len(xs) && xs[i].off < end; i++ {
		if xs[i].off > at {
			out = append(out, extent{at, xs[i].off - at})
		}
		at = max(at, xs[i].off+xs[i].n)
	}
	if at < end {
		out = append(out, extent{at, end - at})
	}
	return out
}

// merge inserts e into xs (sorted, disjoint from e), joining neighbours.
func merge(xs []extent, e extent) []extent {
	i, _ := slices.BinarySearchFunc(xs, e.off, func(x extent, off uint64) int { return cmp.Compare(x.off, off) })
	if i < len(xs) && e.off+e.n == xs[i].off { // merge with the next
		e.n += xs[i].n
		xs = slices.Delete(xs, i, i+1)
	}
	if i > 0 && xs[i-1].off+xs[i-1].n == e.off { // and the previous
		xs[i-1].n += e.n
		return xs
	}
	return slices.Insert(xs, i, e)
}

// cut removes e from xs (sorted, disjoint) and returns how many of e's
// bytes were in xs.
func cut(xs []extent, e extent) ([]extent, uint64) {
	end := e.off + e.n
	i, _ := slices.BinarySearchFunc(xs, e.off, func(x extent, off uint64) int { return cmp.Compare(x.off+x.n, off+1) })
	var got uint64
	for i < len(xs) && xs[i].off < end {
		x := xs[i]
		lo, hi := max(x.off, e.off), min(x.off+x.n, end)
		got += hi - lo
		var rest []extent
		if x.off < lo {
			rest = append(rest, extent{x.off, lo - x.off})
		}
		if hi < x.off+x.n {
			rest = append(rest, extent{hi, x.off + x.n - hi})
		}
		xs = slices.Replace(xs, i, i+1, rest...)
		i += len(rest)
	}
	return xs, got
}
