package proto

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// testRank returns rank me of a dataset of ranks×files one-byte files,
// K=k, with vcs VCs per rank, in an epoch whose traces are a random
// permutation cut evenly.
func testRank(t *testing.T, rng *rand.Rand, ranks, files, k, vcs, me int, v Variant) *Rank {
	t.Helper()
	d := Dataset{K: k}
	for r := 0; r < ranks; r++ {
		d.Shards = append(d.Shards, Shard{Files: files, Bytes: int64(files), MemBytes: int64(vcs * k)})
	}
	m, err := NewMapping(d)
	if err != nil {
		t.Fatal(err)
	}
	sizes := slices.Repeat([]int64{1}, files)
	cfg := Config{Rank: me, Mapping: m, Sizes: sizes, Variant: v, Window: 1 + rng.IntN(8), RemoteMemBytes: 1 << 20, Seed: rng.Uint64()}
	r, err := NewRank(cfg)
	if err != nil {
		t.Fatal(err)
	}
	perm := rng.Perm(ranks * files)
	traces := make([][]FileID, ranks)
	for i, f := range perm {
		traces[i*ranks/len(perm)] = append(traces[i*ranks/len(perm)], FileID(f))
	}
	if err := r.Step(EpochStart{Epoch: 1, Traces: traces}); err != nil {
		t.Fatal(err)
	}
	return r
}

// naiveChoice lists the PCs the refill of slot o of VC v may pick, by the
// definition: PCs of PCS(v) already being read whose file for o is
// unloaded, if any; else those whose file for o is unloaded, keeping for
// max-fill only those filling the most empty slots.
func naiveChoice(r *Rank, v, o int) []int {
	lo, hi := groupStart(v, r.nVC, r.nPC), groupStart(v+1, r.nVC, r.nPC)
	unloaded := func(pc, i int) bool {
		f := pc*r.k + i
		return f < r.nFiles && bitset(r.freeOf(pc)).has(i)
	}
	var reading, eligible []int
	fill := map[int]int{}
	for pc := lo; pc < hi; pc++ {
		if !unloaded(pc, o) {
			continue
		}
		if r.reads[pc] != nil {
			reading = append(reading, pc)
		}
		eligible = append(eligible, pc)
		for i := 0; i < r.k; i++ {
			if r.state[v*r.k+i] == slotEmpty && unloaded(pc, i) {
				fill[pc]++
			}
		}
	}
	if len(reading) > 0 {
		return reading
	}
	if !r.cfg.Variant.MaxFill() {
		return eligible
	}
	best := -1
	var out []int
	for _, pc := range eligible {
		switch {
		case fill[pc] > best:
			best, out = fill[pc], []int{pc}
		case fill[pc] == best:
			out = append(out, pc)
		}
	}
	return out
}

// scramble sets random slot states, loaded files and reads in flight. The
// result need not be reachable; choose only reads these fields.
func scramble(r *Rank, rng *rand.Rand) {
	for x := range r.state {
		r.state[x] = slotState(rng.IntN(3))
		v, o := x/r.k, x%r.k
		if r.state[x] == slotEmpty {
			bitset(r.emptyOf(v)).set(o)
		} else {
			bitset(r.emptyOf(v)).clear(o)
		}
	}
	for pc := 0; pc < r.nPC; pc++ {
		lo, hi := r.pcRange(pc)
		for i := 0; i < hi-lo; i++ {
			if rng.IntN(3) == 0 {
				bitset(r.freeOf(pc)).clear(i)
			}
		}
		r.reads[pc] = nil
		if rng.IntN(6) == 0 {
			r.reads[pc] = &read{pc: pc}
		}
	}
}

func TestRefillChoiceMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 400; trial++ {
		k := 1 + rng.IntN(70) // more than 64 exercises multi-word masks
		v := Variants[rng.IntN(len(Variants))]
		r := testRank(t, rng, 1, 1+rng.IntN(40*k), k, 1+rng.IntN(4), 0, v)
		scramble(r, rng)
		for vc := 0; vc < r.nVC; vc++ {
			o := rng.IntN(r.k)
			want := naiveChoice(r, vc, o)
			seen := map[int]bool{}
			for draw := 0; draw < 64; draw++ {
				got := r.choose(vc, o)
				if len(want) == 0 {
					if got != -1 {
						t.Fatalf("trial %d: choose(%d, %d) = %d, want none", trial, vc, o, got)
					}
					break
				}
				if !slices.Contains(want, got) {
					t.Fatalf("trial %d (%s, K=%d): choose(%d, %d) = %d, reference allows %v", trial, v, k, vc, o, got, want)
				}
				seen[got] = true
			}
			if len(want) > 0 && len(want) <= 4 && len(seen) != len(want) {
				t.Fatalf("trial %d: ties %v, but 64 draws only picked %v", trial, want, seen)
			}
		}
	}
}

// naivePushes is the prefetch rule written out: walk R's trace from the
// frontier, take the next Window positions stored here, and push each one
// never seen nor reserved whose slot is valid, is not the on-demand slot,
// is not promised to an outstanding push, and fits in R's grant.
func naivePushes(r *Rank, from int32, sn int32, x int32) []Pushed {
	p := &r.peers[from]
	trace := r.traces[from]
	busy := map[int32]bool{}
	for y := range p.busy {
		busy[y] = true
	}
	bytes := p.outBytes
	var out []Pushed
	taken := 0
	for q := max(sn+1, p.frontier); int(q) < len(trace) && taken < r.cfg.Window; q++ {
		if !r.isLocal(trace[q]) {
			continue
		}
		taken++
		_, reserved := p.reserved[q]
		y := r.slotOf(trace[q])
		if p.seen.has(int(q)) || reserved || y == x || r.state[y] != slotValid || busy[y] {
			continue
		}
		f := r.slotFile[y]
		if bytes+r.size(f) > p.limit {
			continue
		}
		busy[y] = true
		bytes += r.size(f)
		out = append(out, Pushed{Sn: q, File: f, Size: r.size(f)})
	}
	return out
}

func TestPrefetchMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for trial := 0; trial < 2000; trial++ {
		k := 1 + rng.IntN(6)
		r := testRank(t, rng, 2, 4+rng.IntN(60), k, 1+rng.IntN(4), 1, Full)
		fillRandomly(r, rng)
		p := &r.peers[0]
		trace := r.traces[0]
		for q := range trace {
			if rng.IntN(4) == 0 {
				p.seen.set(q)
			}
		}
		for i := 0; i < rng.IntN(4); i++ {
			q := int32(rng.IntN(len(trace)))
			if r.isLocal(trace[q]) {
				y := r.slotOf(trace[q])
				if _, ok := p.busy[y]; !ok {
					id := p.nextID
					p.nextID++
					p.out[id], p.busy[y], p.reserved[q] = outPush{sn: q, slot: y, size: 1}, id, id
					p.outBytes++
				}
			}
		}
		p.limit = int64(rng.IntN(12))
		p.frontier = int32(rng.IntN(len(trace) + 1))
		sn := int32(rng.IntN(len(trace)))
		x := int32(rng.IntN(r.nVC * r.k))
		want := naivePushes(r, 0, sn, x)
		r.prefetch(req{from: 0, sn: sn, file: trace[sn]}, x)
		var got []Pushed
		for _, m := range r.Ready().Sends {
			got = append(got, m.Pushes...)
		}
		r.Advance(r.Ready())
		if len(got) != len(want) {
			t.Fatalf("trial %d: pushed %v, reference %v", trial, got, want)
		}
		for i := range got {
			if got[i].Sn != want[i].Sn || got[i].File != want[i].File || got[i].Size != want[i].Size {
				t.Fatalf("trial %d: pushed %v, reference %v", trial, got, want)
			}
		}
		if err := r.CheckInvariants(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
	}
}

// fillRandomly makes random slots valid with a file of their chunk set,
// consistently (marked loaded, counted).
func fillRandomly(r *Rank, rng *rand.Rand) {
	for v := 0; v < r.nVC; v++ {
		lo, hi := groupStart(v, r.nVC, r.nPC), groupStart(v+1, r.nVC, r.nPC)
		for o := 0; o < r.k; o++ {
			pc := lo + rng.IntN(hi-lo)
			if rng.IntN(2) == 0 || pc*r.k+o >= r.nFiles || !bitset(r.freeOf(pc)).has(o) {
				continue
			}
			x := int32(v*r.k + o)
			bitset(r.freeOf(pc)).clear(o)
			r.slotFile[x] = r.firstFile + FileID(pc*r.k+o)
			r.setValid(x)
		}
	}
}
