package proto_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

func TestTracesCutOnePermutation(t *testing.T) {
	for _, c := range []struct{ files, ranks int }{{0, 1}, {1, 3}, {10, 3}, {1000, 4}, {1001, 7}} {
		traces := proto.Traces(c.files, c.ranks, 9, 2)
		seen := make([]bool, c.files)
		for r, tr := range traces {
			if n := len(tr); n < c.files/c.ranks || n > c.files/c.ranks+1 || n != proto.TraceLen(c.files, c.ranks, r) {
				t.Fatalf("%+v: rank %d has %d positions, TraceLen says %d", c, r, n, proto.TraceLen(c.files, c.ranks, r))
			}
			for _, f := range tr {
				if seen[f] {
					t.Fatalf("%+v: file %d twice", c, f)
				}
				seen[f] = true
			}
		}
		if slices.Contains(seen, false) {
			t.Fatalf("%+v: a file in no trace", c)
		}
	}
	a, b, c := proto.Traces(1000, 2, 1, 1), proto.Traces(1000, 2, 1, 1), proto.Traces(1000, 2, 1, 2)
	if !slices.Equal(a[0], b[0]) || slices.Equal(a[0], c[0]) {
		t.Fatal("the same seed and epoch must give the same traces, another epoch others")
	}
	// A rank's trace does not alias its neighbour's: appending to it
	// leaves the next one alone.
	next := slices.Clone(a[1])
	_ = append(a[0], -1)
	if !slices.Equal(a[1], next) {
		t.Fatal("appending to rank 0's trace changed rank 1's")
	}
}

// The traces are rand.Perm's permutation of the files, cut into runs:
// the order every earlier build drew (held as FileIDs now).
func TestTracesArePerm(t *testing.T) {
	for _, c := range []struct {
		files, ranks int
		seed         uint64
	}{{1, 1, 0}, {1000, 3, 7}, {4099, 8, 1}} {
		perm := rand.New(rand.NewPCG(c.seed, 0x7ace_0000_0000|uint64(2))).Perm(c.files)
		var got []int
		for _, tr := range proto.Traces(c.files, c.ranks, c.seed, 2) {
			for _, f := range tr {
				got = append(got, int(f))
			}
		}
		if !slices.Equal(got, perm) {
			t.Errorf("%d files, %d ranks, seed %d: the traces are not rand.Perm's permutation", c.files, c.ranks, c.seed)
		}
	}
}

// What drawing an epoch's traces costs at ImageNet-21k's size (14.2
// million files, 256 ranks): every rank draws them all, a plan per rank
// as well (go test -run '^$' -bench Traces ./proto).
func BenchmarkTraces(b *testing.B) {
	b.ReportAllocs()
	for i := range b.N {
		proto.Traces(14_200_000, 256, 1, uint32(i+1))
	}
}
