package chunk

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Assign splits the manifest's shards over ranks ranks: rank r serves the
// shards [lo[r], lo[r+1]) (len(lo) is ranks+1), a run of consecutive
// shards, so that its files are consecutive ids and its chunks, whole
// but for the dataset's last, consecutive too. The runs are balanced by
// bytes: run r ends at the shard boundary nearest to (r+1)/ranks of the
// dataset's bytes, and none is empty. The same manifest and rank count give the
// same runs everywhere. With as many ranks as shards, each rank serves
// its own shard, as datasets packed for a rank count always were.
func Assign(m *Manifest, ranks int) ([]int, error) {
	s := len(m.Shards)
	switch {
	case ranks < 1:
		return nil, fmt.Errorf("chunk: %d ranks, want at least 1", ranks)
	case ranks > s:
		return nil, fmt.Errorf("chunk: %d ranks for %d shards: each rank serves at least one shard; run at most %d ranks, or pack again with --shards %d or more",
			ranks, s, s, ranks)
	}
	var total int64
	for _, sh := range m.Shards {
		total += sh.Bytes
	}
	lo := make([]int, ranks+1)
	lo[ranks] = s
	var sum int64
	next := 0
	for r := 1; r < ranks; r++ {
		// the boundary nearest r/ranks of the bytes, leaving a shard to
		// each rank before and after it
		want := float64(total) * float64(r) / float64(ranks)
		for next < s-(ranks-r) && (float64(sum)+float64(m.Shards[next].Bytes)/2 < want || next < lo[r-1]+1) {
			sum += m.Shards[next].Bytes
			next++
		}
		lo[r] = next
	}
	return lo, nil
}

// AssignDir is Assign for the dataset m that a job reads at chunks, which
// may name a node-local copy per rank (RankPlaceholder): each such copy
// holds its rank's shard alone, so the job must have a rank per shard.
func AssignDir(chunks string, m *Manifest, ranks int) ([]int, error) {
	if strings.Contains(chunks, RankPlaceholder) && len(m.Shards) != ranks {
		return nil, fmt.Errorf("chunk: %s is node-local (%s), its rank's shard alone: run as many ranks as the dataset has shards (%d), or read a copy of the whole dataset",
			chunks, RankPlaceholder, len(m.Shards))
	}
	lo, err := Assign(m, ranks)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", chunks, err)
	}
	return lo, nil
}

// Shards returns the shards rank r serves, from the runs Assign
// returned: homes[r] up to homes[r+1].
func Shards(homes []int, r int) []int {
	var s []int
	for shard := homes[r]; shard < homes[r+1]; shard++ {
		s = append(s, shard)
	}
	return s
}

// Sizes reads a packed dataset's manifest and, from its indexes,
// the size of every file, one list per rank of a job of ranks ranks (0:
// one per shard) with the shards split as serve splits them
// (Assign), and its label by file id (nil when the dataset has
// none).
func Sizes(fsys FS, dir string, ranks int) (*Manifest, [][]int64, []int32, error) {
	m, err := ReadManifest(fsys, dir)
	if err != nil {
		return nil, nil, nil, err
	}
	if ranks == 0 {
		ranks = m.Ranks
	}
	homes, err := AssignDir(dir, m, ranks)
	if err != nil {
		return nil, nil, nil, err
	}
	home := make([]int, m.Ranks) // the rank serving each shard
	for r := range ranks {
		for s := homes[r]; s < homes[r+1]; s++ {
			home[s] = r
		}
	}
	// grown as the indexes are read, not sized from the manifest's claim
	sizes := make([][]int64, ranks)
	var labels []int32
	labelled := false
	err = Each(fsys, dir, func(e Entry) error {
		if e.ID != int64(len(labels)) || e.ID >= m.Files {
			return fmt.Errorf("%s: file id %d where id %d of %d was due: the indexes and the manifest disagree", dir, e.ID, len(labels), m.Files)
		}
		if e.Rank < 0 || e.Rank >= len(home) {
			return fmt.Errorf("%s: file id %d is in shard %d of %d", dir, e.ID, e.Rank, len(home))
		}
		sizes[home[e.Rank]] = append(sizes[home[e.Rank]], int64(e.Size))
		labels, labelled = append(labels, e.Label), labelled || e.Label >= 0
		return nil
	})
	if err == nil && int64(len(labels)) != m.Files {
		err = fmt.Errorf("%s: the manifest says %d files, the indexes hold %d", dir, m.Files, len(labels))
	}
	if !labelled {
		labels = nil
	}
	return m, sizes, labels, err
}

// Home reads the chunks of a run of consecutive shards as one shard: what
// one rank serves. Its chunks and files are numbered from 0 over the run,
// the shards' in order (shards hold whole chunks). A Home is safe for
// concurrent use.
type Home struct {
	shards []*Shard
	lo     int     // the first shard's number
	chunk0 []int   // the run's number of each shard's first chunk
	file0  []int64 // the run's number of each shard's first file
	chunks int
	files  int
	// pool lends the read buffers of every shard of the run: a shard's
	// own would keep its buffers while the others read (a run of many
	// small shards held a buffer per shard, 300 MiB of 3,000 files).
	pool bufPool
}

// OpenHome opens shards lo, lo+1, … of the dataset that m describes,
// shard lo+i in the dataset directory dirs[i] (the dataset's, or a staged
// copy holding that shard), and checks each index against m.
func OpenHome(fsys FS, dirs []string, m *Manifest, lo int) (*Home, error) {
	hi := lo + len(dirs)
	if lo < 0 || hi > len(m.Shards) || lo >= hi {
		return nil, fmt.Errorf("chunk: shards %d–%d of a dataset of %d", lo, hi-1, len(m.Shards))
	}
	h := &Home{lo: lo}
	keep := newKept(keepRoom())
	for s := lo; s < hi; s++ {
		dir := dirs[s-lo]
		sh, err := OpenShard(fsys, dir, s)
		if err != nil {
			h.Close()
			return nil, err
		}
		sh.SetMemory(&h.pool)
		sh.keep = keep
		h.shards = append(h.shards, sh)
		idx, info := sh.Index(), m.Shards[s]
		if idx.First() != info.FirstFile || int64(idx.Len()) != info.Files || idx.CRC() != info.IndexCRC || idx.K() != m.K || !m.ChunksAgree(idx, s) {
			h.Close()
			return nil, fmt.Errorf("chunk: %s: the index of shard %d does not match the manifest; run brandrt verify", dir, s)
		}
		h.chunk0 = append(h.chunk0, h.chunks)
		h.file0 = append(h.file0, int64(h.files))
		h.chunks, h.files = h.chunks+idx.Chunks(), h.files+idx.Len()
	}
	return h, nil
}

// KeepOpen lets the run keep at most n chunk files open between reads
// (0: it opens a chunk file for each read); OpenHome's is half the
// process's limit of open files, less 64, at most 65,536. Call it
// before the first read.
func (h *Home) KeepOpen(n int) {
	var k *kept
	if n > 0 {
		k = newKept(n)
	}
	for _, s := range h.shards {
		s.keep = k
	}
}

// Shards returns the run's shards [lo, hi).
func (h *Home) Shards() (lo, hi int) { return h.lo, h.lo + len(h.shards) }

// Len returns the run's files; First the dataset id of its first file.
func (h *Home) Len() int { return h.files }

// First returns the dataset id of the run's first file.
func (h *Home) First() int64 { return h.shards[0].Index().First() }

// Chunks returns the run's chunks.
func (h *Home) Chunks() int { return h.chunks }

// at returns the position in h.shards of the shard holding the run's
// chunk c.
func (h *Home) at(c int) int {
	return sort.Search(len(h.chunk0), func(s int) bool { return h.chunk0[s] > c }) - 1
}

// holding returns the position in h.shards of the shard holding the
// run's file i.
func (h *Home) holding(i int) int {
	return sort.Search(len(h.file0), func(s int) bool { return h.file0[s] > int64(i) }) - 1
}

// Record returns the index entry of the run's file i (see Index.Record).
func (h *Home) Record(i int) Entry {
	s := h.holding(i)
	return h.shards[s].Index().Record(i - int(h.file0[s]))
}

// Locate returns the index entry of the run's file i (Record's) and the
// run's chunk holding it (e.Chunk is its shard's; e.Slot its slot).
func (h *Home) Locate(i int) (e Entry, c int) {
	s := h.holding(i)
	e = h.shards[s].Index().Record(i - int(h.file0[s]))
	return e, h.chunk0[s] + e.Chunk
}

// ChunkFirst returns the run's number of the first file of its chunk c.
func (h *Home) ChunkFirst(c int) int {
	s := h.at(c)
	return int(h.file0[s]) + h.shards[s].Index().ChunkFirst(c-h.chunk0[s])
}

// ReadWhole reads the run's chunk c whole (see Shard.ReadWhole); the
// chunk's Index is c, its Rank the shard it came from.
func (h *Home) ReadWhole(c int) (*Chunk, []Damage, error) {
	return h.read(c, (*Shard).ReadWhole)
}

// read reads the run's chunk c with read, from the shard that holds it.
func (h *Home) read(c int, read func(s *Shard, c int) (*Chunk, []Damage, error)) (*Chunk, []Damage, error) {
	if c < 0 || c >= h.Chunks() {
		return nil, nil, fmt.Errorf("chunk: chunk %d of shards %d–%d, which have %d", c, h.lo, h.lo+len(h.shards)-1, h.Chunks())
	}
	s := h.at(c)
	ch, damage, err := read(h.shards[s], c-h.chunk0[s])
	if ch != nil {
		ch.Index = c
	}
	return ch, damage, err
}

// ReadInto reads chunk c as Shard.ReadInto does, each file into a buffer
// lend gives.
func (h *Home) ReadInto(c int, lend func(i, n int) []byte) (*Chunk, []Damage, error) {
	return h.read(c, func(s *Shard, c int) (*Chunk, []Damage, error) { return s.ReadInto(c, lend) })
}

// SetMemory makes every shard read into m (see Shard.SetMemory).
func (h *Home) SetMemory(m Memory) {
	for _, s := range h.shards {
		s.SetMemory(m)
	}
}

// CheckSizes checks every chunk file of the run (see Shard.CheckSizes).
func (h *Home) CheckSizes(most int) ([]error, int) {
	var out []error
	bad := 0
	for _, s := range h.shards {
		probs, n := s.CheckSizes(most - len(out))
		out, bad = append(out, probs...), bad+n
	}
	return out, bad
}

// Close closes every shard.
func (h *Home) Close() error {
	var errs []error
	for _, s := range h.shards {
		errs = append(errs, s.Close())
	}
	h.pool.drain()
	return errors.Join(errs...)
}
