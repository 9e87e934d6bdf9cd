package proto

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestPairsAgainAndEdges(t *testing.T) {
	m, err := NewMapping(Dataset{K: 16, Shards: []Shard{{Files: 20000, Bytes: 20000}}})
	if err != nil {
		t.Fatal(err)
	}
	a := Traces(20000, 1, 1, 1)
	b := Traces(20000, 1, 1, 2)
	const batch = 100
	if got := *pairsAgain(20000, a, a, batch, Cores{}); got != 1 {
		t.Fatalf("the same order twice: %.3f of pairs again, want 1", got)
	}
	want := float64(batch-1) / float64(20000-1)
	if got := *pairsAgain(20000, a, b, batch, Cores{}); got < 0.7*want || got > 1.3*want {
		t.Fatalf("two shuffles: %.5f of pairs again, want about %.5f", got, want)
	}
	if pairsAgain(20000, [][]FileID{{}}, a, batch, Cores{}) != nil {
		t.Fatal("no pairs must give no figure")
	}
	sorted := make([]FileID, 20000)
	for i := range sorted {
		sorted[i] = FileID(i)
	}
	first, last := edges(m.PCs(), chunkSeqs(m, [][]FileID{sorted}, Cores{}), batch, Cores{})
	if first > 7 || last > 7 { // 100 files in order span 7 chunks of 16
		t.Fatalf("files in chunk order: %.1f and %.1f distinct chunks per batch at the edges", first, last)
	}
	if first, _ := edges(m.PCs(), chunkSeqs(m, a, Cores{}), batch, Cores{}); first < 90 {
		t.Fatalf("a shuffle: %.1f distinct chunks per batch at the start", first)
	}
}

// The order's figures are the same measured on one core or on several
// (MeasureOrder measures the ranks' sequences at once), to the bit: the
// ranks' figures are added in rank order either way.
func TestMeasureOnCores(t *testing.T) {
	const files, ranks, batch = 30000, 7, 64
	m, err := NewMapping(Dataset{K: 16, Shards: []Shard{{Files: files, Bytes: files}}})
	if err != nil {
		t.Fatal(err)
	}
	cur, prev := Traces(files, ranks, 1, 2), Traces(files, ranks, 1, 1)
	cur[3] = cur[3][:len(cur[3])/2] // ranks of different lengths
	cur[5][7] = NoFile
	seqs := chunkSeqs(m, cur, Cores{})
	for _, w := range []int{2, 3, 8} {
		c := Cores{Workers: w, Each: goroutines(w)}
		d1, s1 := randomness(m.PCs(), seqs, batch, Cores{})
		dw, sw := randomness(m.PCs(), seqs, batch, c)
		f1, l1 := edges(m.PCs(), seqs, batch, Cores{})
		fw, lw := edges(m.PCs(), seqs, batch, c)
		p1, pw := *pairsAgain(files, prev, cur, batch, Cores{}), *pairsAgain(files, prev, cur, batch, c)
		if sc := chunkSeqs(m, cur, c); len(sc) != len(seqs) || !slices.EqualFunc(sc, seqs, slices.Equal) {
			t.Errorf("%d cores: the chunks of the ranks' sequences differ from one core's", w)
		}
		if d1 != dw || s1 != sw || f1 != fw || l1 != lw || p1 != pw {
			t.Errorf("%d cores: %v %v %v %v %v, one: %v %v %v %v %v", w, dw, sw, fw, lw, pw, d1, s1, f1, l1, p1)
		}
	}
	if p := *pairsAgain(files, prev, prev, batch, Cores{Workers: 4, Each: goroutines(4)}); p != 1 {
		t.Errorf("the same order twice on 4 cores: %v of the pairs again, want 1", p)
	}
}

// goroutines is a Cores.Each on w goroutines, the calls dealt out in
// turn, from the last i down (any order must do).
func goroutines(w int) func(n int, f func(i, w int)) {
	return func(n int, f func(i, w int)) {
		done := make(chan bool)
		for g := range w {
			go func() {
				for i := n - 1 - g; i >= 0; i -= w {
					f(i, g)
				}
				done <- true
			}()
		}
		for range w {
			<-done
		}
	}
}

func TestLabelEntropy(t *testing.T) {
	labels := []int32{0, 0, 1, 1, 2, 3, -1, -1}
	seqs := [][]FileID{{0, 1, 2, 3}, {4, 5, 6, 7}}
	// batches of 2: {0,0}=0 bits, {1,1}=0, {2,3}=1, {-1,-1} has none
	if got := *labelEntropy(labels, seqs, 2); math.Abs(got-1.0/3) > 1e-12 {
		t.Fatalf("entropy %.4f, want 1/3", got)
	}
	// batches of 4: {0,0,1,1}=1 bit, {2,3}=1 bit
	if got := *labelEntropy(labels, seqs, 4); math.Abs(got-1) > 1e-12 {
		t.Fatalf("entropy %.4f, want 1", got)
	}
	if labelEntropy(labels, [][]FileID{{6, 7}}, 2) != nil {
		t.Fatal("no labelled file must give no figure")
	}
}

// BenchmarkMeasure21k: the two halves of rank 0's measure at
// ImageNet-21k's size (14.2 M files, 256 ranks, K=64, batch 256): the
// shuffle's, which serve measures while the epoch is served, and the
// order's, which the epoch's end waits for, on one core and on two.
func BenchmarkMeasure21k(b *testing.B) {
	const files, ranks = 14_200_000, 256
	var sh []Shard
	for r := range ranks {
		n := (r+1)*files/ranks - r*files/ranks
		sh = append(sh, Shard{Files: n, Bytes: int64(n)})
	}
	m, err := NewMapping(Dataset{K: 64, Shards: sh})
	if err != nil {
		b.Fatal(err)
	}
	cur := Orders{Files: Traces(files, ranks, 1, 2), Traces: Traces(files, ranks, 1, 3)}
	prev := Orders{Files: Traces(files, ranks, 1, 1), Traces: Traces(files, ranks, 1, 4)}
	b.Run("shuffle", func(b *testing.B) {
		for range b.N {
			MeasureShuffle(m, 256, nil, cur.Traces, prev.Traces, true)
		}
	})
	for _, c := range []Cores{{}, {Workers: 2, Each: goroutines(2)}} {
		b.Run(fmt.Sprintf("order-on-%d-cores", c.workers()), func(b *testing.B) {
			for range b.N {
				var x Mix
				MeasureOrder(m, 256, nil, cur.Files, prev.Files, &x, c)
			}
		})
	}
}

// BenchmarkMeasureMix: what serve's rank 0 spends each epoch on the order's
// figures at ImageNet's size (1,281,167 files, 3 ranks, K=64, batch 256).
func BenchmarkMeasureMix(b *testing.B) {
	const files = 1281167
	m, err := NewMapping(Dataset{K: 64, Shards: []Shard{{Files: files / 3, Bytes: files / 3}, {Files: files / 3, Bytes: files / 3}, {Files: files - 2*(files/3), Bytes: files - 2*(files/3)}}})
	if err != nil {
		b.Fatal(err)
	}
	cur := Orders{Files: Traces(files, 3, 1, 2), Traces: Traces(files, 3, 1, 3)}
	prev := Orders{Files: Traces(files, 3, 1, 1), Traces: Traces(files, 3, 1, 4)}
	b.ResetTimer()
	for range b.N {
		MeasureMix(m, 256, nil, cur, prev)
	}
}
