package proto_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// shardedInput returns the window input of a dataset of shards shards of
// K-file chunks (sizes drawn from seed) served by ranks ranks, each a run
// of consecutive shards, with a quarter of each rank's bytes as budget
// (at least its largest chunk).
func shardedInput(t *testing.T, seed uint64, shards, ranks, k int) proto.WindowInput {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var all [][]int64 // per shard, its files' sizes
	for range shards {
		n := k * (1 + rng.IntN(8))
		s := make([]int64, n)
		for i := range s {
			s[i] = 100 + rng.Int64N(2000)
		}
		all = append(all, s)
	}
	d := proto.Dataset{K: k}
	var sizes [][]int64
	for r := range ranks {
		var own []int64
		for _, s := range all[r*shards/ranks : (r+1)*shards/ranks] {
			own = append(own, s...)
		}
		var total, largest int64
		for i := 0; i < len(own); i += k {
			var b int64
			for _, x := range own[i:min(i+k, len(own))] {
				b += x
			}
			total, largest = total+b, max(largest, b)
		}
		sizes = append(sizes, own)
		d.Shards = append(d.Shards, proto.Shard{Files: len(own), Bytes: total, MemBytes: max(total/4, largest)})
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		t.Fatal(err)
	}
	in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: seed, Lead: proto.DefaultLead, Ramp: 4, Keep: float64(seed%3) / 2}
	for h := range ranks {
		in.Budget = append(in.Budget, m.MemBytes(h))
	}
	return in
}

// TestRestTracesWithoutDelivered: with nothing delivered the rest is the
// whole epoch's traces.
func TestRestTracesWithoutDelivered(t *testing.T) {
	for _, ranks := range []int{1, 2, 3, 7} {
		a, b := proto.Traces(100, ranks, 9, 2), proto.RestTraces(100, ranks, 9, 2, make([]bool, 100))
		if !slices.EqualFunc(a, b, slices.Equal) {
			t.Errorf("%d ranks: RestTraces with nothing delivered differs from Traces", ranks)
		}
	}
}

// TestResumeOnOtherRanks: an epoch served by a stretch of 3 ranks, then
// one of 2, then one of 4, and finished by 3 ranks again delivers every
// file exactly once; a chunk none of whose files is left is not read
// again; the rest plans keep their budgets; the same stretches give the
// same plan twice.
func TestResumeOnOtherRanks(t *testing.T) {
	const shards, k = 12, 4
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		e := uint32(1 + rng.IntN(3))
		var stretches []proto.Stretch
		for _, ranks := range []int{3, 2, 4} {
			in := shardedInput(t, seed, shards, ranks, k)
			stretches = append(stretches, proto.Stretch{In: in, Position: rng.IntN(in.Mapping.Files()/ranks/3 + 1)})
		}
		delivered, err := proto.Delivered(e, stretches)
		if err != nil {
			t.Fatal(err)
		}
		before := 0
		for _, d := range delivered {
			if d {
				before++
			}
		}
		last := shardedInput(t, seed, shards, 3, k)
		p, err := proto.RestPlan(last, e, delivered)
		if err != nil {
			t.Fatal(err)
		}
		seen := slices.Clone(delivered)
		rest := 0
		for r, fs := range p.Files {
			rest += len(fs)
			for sn, f := range fs {
				if seen[f] {
					t.Fatalf("seed %d: file %d at position %d of rank %d was delivered already", seed, f, sn, r)
				}
				seen[f] = true
			}
		}
		if before+rest != len(delivered) {
			t.Fatalf("seed %d: %d files delivered before the last stretch and %d in it, for %d files", seed, before, rest, len(delivered))
		}
		m := last.Mapping
		for h, rds := range p.Reads {
			if p.PeakBytes[h] > last.Budget[h] {
				t.Errorf("seed %d: rank %d's pool peaks at %d bytes, over its budget of %d", seed, h, p.PeakBytes[h], last.Budget[h])
			}
			for _, rd := range rds {
				lo, hi := m.PCFiles(rd.PC)
				if !slices.Contains(delivered[lo:hi], false) {
					t.Errorf("seed %d: rank %d reads chunk %d, all of whose files were delivered", seed, h, rd.PC)
				}
			}
		}
		again, err := proto.RestPlan(last, e, delivered)
		if err != nil || !slices.EqualFunc(p.Files, again.Files, slices.Equal) {
			t.Errorf("seed %d: the same rest planned twice differs (%v)", seed, err)
		}
		fresh, err := proto.FreshPlan(last, e)
		if err != nil || !slices.EqualFunc(fresh.Drains, p.Drains, func(a, b proto.Drain) bool {
			return a.LastDue == b.LastDue && slices.Equal(a.Held, b.Held)
		}) {
			t.Errorf("seed %d: the rest's drains are not the fresh job's (%v)", seed, err)
		}
	}
}

// TestDeliveredFromTheStart: a stretch that stopped at position 0 left
// nothing delivered, one past every trace's end delivered everything.
func TestDeliveredFromTheStart(t *testing.T) {
	in := shardedInput(t, 5, 6, 2, 3)
	for _, c := range []struct {
		pos  int
		want bool
	}{{0, false}, {in.Mapping.Files(), true}} {
		d, err := proto.Delivered(2, []proto.Stretch{{In: in, Position: c.pos}})
		if err != nil {
			t.Fatal(err)
		}
		for f, got := range d {
			if got != c.want {
				t.Fatalf("stopped at position %d: file %d delivered %v", c.pos, f, got)
			}
		}
	}
	if _, err := proto.Delivered(2, []proto.Stretch{{In: in, Position: -1}}); err == nil {
		t.Error("a stretch ending at position -1 was taken")
	}
}

// imageNetInput is 1.28 M files of 110 kB (K=64) on ranks ranks, a
// quarter of each shard in memory.
func imageNetInput(b *testing.B, ranks int) proto.WindowInput {
	const files, k = 1_281_167, 64
	d := proto.Dataset{K: k}
	sizes := make([][]int64, ranks)
	for h := range ranks {
		n := (h+1)*files/ranks/k*k - h*files/ranks/k*k
		if h == ranks-1 {
			n = files - h*files/ranks/k*k
		}
		sizes[h] = make([]int64, n)
		for i := range sizes[h] {
			sizes[h][i] = 110_000
		}
		d.Shards = append(d.Shards, proto.Shard{Files: n, Bytes: int64(n) * 110_000, MemBytes: int64(n) * 110_000 / 4})
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		b.Fatal(err)
	}
	in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: 1, Lead: proto.DefaultLead, Ramp: proto.DefaultRamp}
	for h := range ranks {
		in.Budget = append(in.Budget, m.MemBytes(h))
	}
	return in
}

// BenchmarkResumeImageNet is what a job of 2 ranks does at start-up when
// it resumes, at 40 % of epoch 2, the state of a job of 3 ranks at
// ImageNet scale: it plans the 3-rank job's epochs 1 and 2 to learn the
// files trained on (Delivered), then the rest of the epoch and a fresh
// 2-rank job's epochs 1 and 2 for the drains (RestPlan).
func BenchmarkResumeImageNet(b *testing.B) {
	old, now := imageNetInput(b, 3), imageNetInput(b, 2)
	b.ResetTimer()
	for range b.N {
		d, err := proto.Delivered(2, []proto.Stretch{{In: old, Position: 1_281_167 / 3 * 4 / 10}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := proto.RestPlan(now, 2, d); err != nil {
			b.Fatal(err)
		}
	}
}
