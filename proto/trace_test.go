package proto_test

import (
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
