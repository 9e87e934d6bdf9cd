package chunk_test

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/chunk"
)

// Assign gives each of M ranks a non-empty run of consecutive shards, the
// runs covering the dataset in order; each rank as many shards as there
// are ranks alone; and no rank more bytes than its share plus the
// largest shard (each boundary is the one nearest its share).
func TestAssign(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		s := 1 + rng.IntN(40)
		m := &chunk.Manifest{}
		var total, largest int64
		for range s {
			b := int64(1 + rng.IntN(1000))
			if trial%3 == 0 {
				b = 100 // even shards
			}
			m.Shards = append(m.Shards, chunk.ShardInfo{Bytes: b})
			total, largest = total+b, max(largest, b)
		}
		for ranks := 1; ranks <= s; ranks++ {
			lo, err := chunk.Assign(m, ranks)
			if err != nil {
				t.Fatal(err)
			}
			if len(lo) != ranks+1 || lo[0] != 0 || lo[ranks] != s {
				t.Fatalf("%d shards, %d ranks: %v", s, ranks, lo)
			}
			for r := range ranks {
				if lo[r+1] <= lo[r] {
					t.Fatalf("%d shards, %d ranks: rank %d gets none: %v", s, ranks, r, lo)
				}
				var b int64
				for _, sh := range m.Shards[lo[r]:lo[r+1]] {
					b += sh.Bytes
				}
				// each end within half the largest shard of its mark
				if b > total/int64(ranks)+largest+1 {
					t.Fatalf("%d shards, %d ranks: rank %d gets %d bytes of %d: %v", s, ranks, r, b, total, lo)
				}
			}
			if ranks == s {
				for r := range ranks {
					if lo[r] != r {
						t.Fatalf("as many ranks as shards: %v", lo)
					}
				}
			}
			if trial%3 == 0 && s%ranks == 0 { // even shards that divide: as many each
				for r := range ranks {
					if lo[r+1]-lo[r] != s/ranks {
						t.Fatalf("%d even shards, %d ranks: %v", s, ranks, lo)
					}
				}
			}
		}
		if _, err := chunk.Assign(m, s+1); err == nil || !strings.Contains(err.Error(), "run at most") {
			t.Fatalf("%d ranks for %d shards: %v", s+1, s, err)
		}
	}
}

// A Home over shards 1–3 of 4 reads what the shards read one by one, its
// chunks and files numbered from 0 across them.
func TestHomeReadsItsShards(t *testing.T) {
	input, _ := gen(t, 300)
	out := filepath.Join(t.TempDir(), "chunks")
	m, err := pack(t, input, out, packOpts{k: 8, ranks: 4, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	h, err := chunk.OpenHome(chunk.OS, []string{out, out, out}, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if lo, hi := h.Shards(); lo != 1 || hi != 4 || h.First() != m.Shards[1].FirstFile || int64(h.Len()) != m.Files-m.Shards[1].FirstFile {
		t.Fatalf("shards %d–%d, first file %d, %d files", lo, hi, h.First(), h.Len())
	}
	if probs, bad := h.CheckSizes(5); bad != 0 {
		t.Fatal(probs)
	}
	c, f := 0, 0
	for s := 1; s < 4; s++ {
		sh, err := chunk.OpenShard(chunk.OS, out, s)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sh.Index().Len() {
			if got, want := h.Record(f+i), sh.Index().Record(i); got != want {
				t.Fatalf("shard %d file %d: the home's file %d is %+v, want %+v", s, i, f+i, got, want)
			}
		}
		for local := range sh.Index().Chunks() {
			want, _, err := sh.ReadWhole(local)
			if err != nil {
				t.Fatal(err)
			}
			got, damage, err := h.ReadWhole(c + local)
			if err != nil || len(damage) != 0 {
				t.Fatal(err, damage)
			}
			if got.Index != c+local || got.Rank != s || got.Slots() != want.Slots() {
				t.Fatalf("chunk %d: index %d, shard %d, %d slots; want shard %d chunk %d, %d slots", c+local, got.Index, got.Rank, got.Slots(), s, local, want.Slots())
			}
			for i := range want.Slots() {
				if !bytes.Equal(got.File(i), want.File(i)) {
					t.Fatalf("chunk %d slot %d differs", c+local, i)
				}
			}
			got.Release()
			want.Release()
		}
		c, f = c+sh.Index().Chunks(), f+sh.Index().Len()
		sh.Close()
	}
	if c != h.Chunks() {
		t.Fatalf("%d chunks, the home says %d", c, h.Chunks())
	}
	// one read at a time: the shards share one buffer, kept for the next
	if home, shards := chunk.PoolFree(h); home != 1 || shards != 0 {
		t.Fatalf("after reading one chunk at a time, the home keeps %d read buffers and its shards %d, want 1 and 0", home, shards)
	}
	if _, _, err := h.ReadWhole(c); err == nil {
		t.Fatal("a chunk past the home's last was read")
	}
}

// A node-local dataset ({rank}) holds one shard per rank's copy: AssignDir
// refuses another rank count, and gives the usual runs otherwise.
func TestAssignDirNodeLocal(t *testing.T) {
	m := &chunk.Manifest{Shards: []chunk.ShardInfo{{Bytes: 1}, {Bytes: 1}, {Bytes: 1}}}
	if _, err := chunk.AssignDir("/local/chunks-{rank}", m, 2); err == nil || !strings.Contains(err.Error(), "run as many ranks as the dataset has shards (3)") {
		t.Fatalf("2 ranks on a node-local dataset of 3 shards: %v", err)
	}
	if lo, err := chunk.AssignDir("/local/chunks-{rank}", m, 3); err != nil || lo[1] != 1 || lo[2] != 2 {
		t.Fatalf("3 ranks: %v %v", lo, err)
	}
	if lo, err := chunk.AssignDir("/shared/chunks", m, 2); err != nil || len(lo) != 3 {
		t.Fatalf("2 ranks on shared storage: %v %v", lo, err)
	}
}

// Sizes gives each file's size, by the rank that serves it for any rank
// count, and each label, as the shards' indexes hold them.
func TestSizes(t *testing.T) {
	input, _ := gen(t, 300)
	out := filepath.Join(t.TempDir(), "chunks")
	m, err := pack(t, input, out, packOpts{k: 8, ranks: 4, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	var labels []int32
	if err := chunk.Each(chunk.OS, out, func(e chunk.Entry) error {
		want, labels = append(want, int64(e.Size)), append(labels, e.Label)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{0, 1, 3, 4} {
		got, sizes, gotLabels, err := chunk.Sizes(chunk.OS, out, ranks)
		if err != nil {
			t.Fatal(err)
		}
		n := ranks
		if n == 0 { // one per shard
			n = m.Ranks
		}
		lo, err := chunk.Assign(m, n)
		if err != nil {
			t.Fatal(err)
		}
		if got.Files != m.Files || len(sizes) != len(lo)-1 {
			t.Fatalf("%d ranks: %d files in %d lists", ranks, got.Files, len(sizes))
		}
		var all []int64
		for r, s := range sizes {
			first, end := m.Shards[lo[r]].FirstFile, m.Files
			if lo[r+1] < len(m.Shards) {
				end = m.Shards[lo[r+1]].FirstFile
			}
			if int64(len(s)) != end-first {
				t.Fatalf("%d ranks: rank %d has %d sizes for files %d-%d", ranks, r, len(s), first, end)
			}
			all = append(all, s...)
		}
		if !slices.Equal(all, want) || (gotLabels != nil && !slices.Equal(gotLabels, labels)) {
			t.Fatalf("%d ranks: sizes or labels differ from the indexes'", ranks)
		}
	}
	if _, _, _, err := chunk.Sizes(chunk.OS, input, 1); err == nil {
		t.Fatal("Sizes read a directory that holds no dataset")
	}
}
