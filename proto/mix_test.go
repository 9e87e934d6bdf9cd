package proto

import (
	"math"
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
	if got := *pairsAgain(20000, a, a, batch); got != 1 {
		t.Fatalf("the same order twice: %.3f of pairs again, want 1", got)
	}
	want := float64(batch-1) / float64(20000-1)
	if got := *pairsAgain(20000, a, b, batch); got < 0.7*want || got > 1.3*want {
		t.Fatalf("two shuffles: %.5f of pairs again, want about %.5f", got, want)
	}
	if pairsAgain(20000, [][]FileID{{}}, a, batch) != nil {
		t.Fatal("no pairs must give no figure")
	}
	sorted := make([]FileID, 20000)
	for i := range sorted {
		sorted[i] = FileID(i)
	}
	first, last := edges(m.PCs(), chunkSeqs(m, [][]FileID{sorted}), batch)
	if first > 7 || last > 7 { // 100 files in order span 7 chunks of 16
		t.Fatalf("files in chunk order: %.1f and %.1f distinct chunks per batch at the edges", first, last)
	}
	if first, _ := edges(m.PCs(), chunkSeqs(m, a), batch); first < 90 {
		t.Fatalf("a shuffle: %.1f distinct chunks per batch at the start", first)
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
