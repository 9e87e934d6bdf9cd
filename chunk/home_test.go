package chunk_test

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// countFS counts the files opened and not yet closed, and the opens of
// each name; a read of a name in fail fails once.
type countFS struct {
	chunk.FS
	mu    sync.Mutex
	open  int
	opens map[string]int
	fail  map[string]bool
}

type countFile struct {
	chunk.File
	fs   *countFS
	name string
}

func (c *countFS) Open(name string, uncached bool) (chunk.File, error) {
	f, err := c.FS.Open(name, uncached)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open++
	name = filepath.Join(filepath.Base(filepath.Dir(name)), filepath.Base(name))
	c.opens[name]++
	return &countFile{f, c, name}, nil
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	fail := f.fs.fail[f.name]
	delete(f.fs.fail, f.name)
	f.fs.mu.Unlock()
	if fail {
		return 0, syscall.EIO
	}
	return f.File.ReadAt(p, off)
}

func (f *countFile) Close() error {
	f.fs.mu.Lock()
	f.fs.open--
	f.fs.mu.Unlock()
	return f.File.Close()
}

// A home keeps its chunk files open between reads: read twice, each
// chunk file is opened once, and stays open until the home closes. A
// read that fails closes its file, and the next read opens it again.
// With room for one file, every read but one opens its file; with none
// (KeepOpen(0)), every read.
func TestHomeKeepsChunkFilesOpen(t *testing.T) {
	input, _ := gen(t, 300)
	out := filepath.Join(t.TempDir(), "chunks")
	m, err := pack(t, input, out, packOpts{k: 8, ranks: 2, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, room := range []int{-1, 1, 0} {
		fsys := &countFS{FS: chunk.OSNoDirect, opens: map[string]int{}, fail: map[string]bool{}}
		h, err := chunk.OpenHome(fsys, []string{out, out}, m, 0)
		if err != nil {
			t.Fatal(err)
		}
		if room >= 0 {
			h.KeepOpen(room)
		}
		chunks := h.Chunks()
		for round := range 2 {
			for c := range chunks {
				ch, damage, err := h.ReadWhole(c)
				if err != nil || len(damage) != 0 {
					t.Fatal(round, c, err, damage)
				}
				ch.Release()
			}
		}
		opens := 0
		for name, n := range fsys.opens {
			if strings.HasSuffix(name, ".brc") { // not the indexes
				opens += n
			}
		}
		if room < 0 && (opens != chunks || fsys.open != chunks) {
			t.Fatalf("%d chunks read twice: %d opens, %d files open", chunks, opens, fsys.open)
		}
		if room == 1 && (opens != 2*chunks-1 || fsys.open != 1) {
			t.Fatalf("room for 1: %d chunks read twice: %d opens, %d files open", chunks, opens, fsys.open)
		}
		if room == 0 && (opens != 2*chunks || fsys.open != 0) {
			t.Fatalf("no room: %d chunks read twice: %d opens, %d files open", chunks, opens, fsys.open)
		}
		if room < 0 {
			name := filepath.Join(chunk.RankDir(0), chunk.ChunkName(2))
			fsys.fail[name] = true
			if _, _, err := h.ReadWhole(2); err == nil {
				t.Fatal("a read that fails: no error")
			}
			if fsys.open != chunks-1 {
				t.Fatalf("after a failed read, %d files open, want %d", fsys.open, chunks-1)
			}
			ch, _, err := h.ReadWhole(2)
			if err != nil {
				t.Fatal(err)
			}
			ch.Release()
			if fsys.opens[name] != 2 || fsys.open != chunks {
				t.Fatalf("read again: %s opened %d times, %d files open", name, fsys.opens[name], fsys.open)
			}
		}
		h.Close()
		if fsys.open != 0 {
			t.Fatalf("closed: %d files still open", fsys.open)
		}
	}
}
