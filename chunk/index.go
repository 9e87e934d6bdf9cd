package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"
)

// A rank's index file (index.bri in its directory) maps each of the rank's
// files to its chunk, slot, extent, checksum, label and original path:
//
//	off  size field
//	  0     8 magic "BRTINDEX"
//	  8     4 format version (1)
//	 12     4 rank
//	 16     8 global id of the rank's first file
//	 24     8 n: the rank's files
//	 32     4 K
//	 36     4 record size (40)
//	 40     8 length of the path table
//	 48     4 CRC32C of the records and the path table
//	 52     4 CRC32C of bytes [0, 64) with this field zero
//	 56     8 zero
//	 64  40×n records, in file id order:
//	        chunk u32, slot u32, offset u64, size u32, crc32c u32,
//	        label i32, path length u32, path offset u64 (in the table)
//	        the path table: the files' relative paths, UTF-8, back to back
//
// The file is memory-mapped on open, so opening costs one checksum pass.
const (
	indexMagic   = "BRTINDEX"
	indexVersion = 1
	indexHeader  = 64
	recordSize   = 40
	indexName    = "index.bri"
)

// Entry is what the index knows of one file.
type Entry struct {
	ID     int64 // global file id
	Rank   int
	Chunk  int // index among the rank's chunks
	Slot   int // position in the chunk, 0..K-1
	Offset int64
	Size   uint32
	CRC    uint32
	Label  int32 // -1 when the dataset has no labels
	Path   string
}

// Index is one rank's part of the dataset index.
type Index struct {
	crc     uint32 // checksum of the records and paths
	rank    int
	first   int64
	n       int
	k       int
	records []byte
	paths   []byte
	starts  []int32 // chunk c holds records [starts[c], starts[c+1])
	release func() error
}

// writeIndexTo writes the index of a rank's entries (in file id order) to
// f and returns the checksum of its records and paths.
func writeIndexTo(f io.Writer, rank, k int, first int64, entries []Entry) (uint32, error) {
	le := binary.LittleEndian
	var paths []byte
	recs := make([]byte, recordSize*len(entries))
	for i, e := range entries {
		r := recs[recordSize*i:]
		le.PutUint32(r, uint32(e.Chunk))
		le.PutUint32(r[4:], uint32(e.Slot))
		le.PutUint64(r[8:], uint64(e.Offset))
		le.PutUint32(r[16:], e.Size)
		le.PutUint32(r[20:], e.CRC)
		le.PutUint32(r[24:], uint32(e.Label))
		le.PutUint32(r[28:], uint32(len(e.Path)))
		le.PutUint64(r[32:], uint64(len(paths)))
		paths = append(paths, e.Path...)
	}
	h := make([]byte, indexHeader)
	copy(h, indexMagic)
	le.PutUint32(h[8:], indexVersion)
	le.PutUint32(h[12:], uint32(rank))
	le.PutUint64(h[16:], uint64(first))
	le.PutUint64(h[24:], uint64(len(entries)))
	le.PutUint32(h[32:], uint32(k))
	le.PutUint32(h[36:], recordSize)
	le.PutUint64(h[40:], uint64(len(paths)))
	c := crc32Update(Checksum(recs), paths)
	le.PutUint32(h[48:], c)
	le.PutUint32(h[52:], Checksum(h))
	for _, b := range [][]byte{h, recs, paths} {
		if _, err := f.Write(b); err != nil {
			return 0, err
		}
	}
	return c, nil
}

// OpenIndex opens the index of rank (the shard) in the rank directory dir
// and checks its checksums. Close it when done. An index that cannot be
// opened or read is a StorageError (see Unreachable), one whose bytes are
// wrong is not.
func OpenIndex(fsys FS, dir string, rank int) (*Index, error) {
	name := join(dir, indexName)
	data, release, err := mapFile(fsys, name, fmt.Sprintf("shard %d index", rank))
	if err != nil {
		return nil, err
	}
	ix, err := parseIndex(data, rank)
	if err != nil {
		_ = release()
		return nil, fmt.Errorf("chunk: index %s: %w", name, err)
	}
	ix.release = release
	return ix, nil
}

func parseIndex(b []byte, rank int) (*Index, error) {
	le := binary.LittleEndian
	if len(b) < indexHeader || string(b[:8]) != indexMagic {
		return nil, fmt.Errorf("%w: not an index file (bad magic)", errCorrupt)
	}
	if v := le.Uint32(b[8:]); v != indexVersion {
		return nil, fmt.Errorf("index format version %d, this brandrt reads %d", v, indexVersion)
	}
	h := append([]byte(nil), b[:indexHeader]...)
	want := le.Uint32(h[52:])
	le.PutUint32(h[52:], 0)
	if got := Checksum(h); got != want {
		return nil, fmt.Errorf("%w: header checksum %08x, stored %08x", errCorrupt, got, want)
	}
	ix := &Index{rank: int(le.Uint32(b[12:])), first: int64(le.Uint64(b[16:])), n: int(le.Uint64(b[24:])), k: int(le.Uint32(b[32:]))}
	plen := int64(le.Uint64(b[40:]))
	if ix.k > MaxK {
		return nil, fmt.Errorf("%w: chunk size K=%d files is more than the limit of %d", errCorrupt, ix.k, MaxK)
	}
	if ix.n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d files, more than a shard's limit of %d", errCorrupt, ix.n, math.MaxInt32)
	}
	if ix.rank != rank || le.Uint32(b[36:]) != recordSize || ix.k < 1 || ix.n < 0 ||
		int64(len(b)) != indexHeader+recordSize*int64(ix.n)+plen {
		return nil, fmt.Errorf("%w: header (shard %d, %d files, K=%d) does not fit the file (%d bytes)", errCorrupt, ix.rank, ix.n, ix.k, len(b))
	}
	ix.records = b[indexHeader : indexHeader+recordSize*ix.n]
	ix.paths = b[indexHeader+recordSize*ix.n:]
	if got := crc32Update(Checksum(ix.records), ix.paths); got != le.Uint32(b[48:]) {
		return nil, fmt.Errorf("%w: records checksum %08x, stored %08x", errCorrupt, got, le.Uint32(b[48:]))
	}
	ix.crc = le.Uint32(b[48:])
	if err := ix.findChunks(); err != nil {
		return nil, err
	}
	return ix, nil
}

// findChunks reads where each chunk starts from the records (chunk and
// slot of each file), and checks that they number the chunks and slots
// in order: chunk c's files take slots 0, 1, … of it, at most K.
func (ix *Index) findChunks() error {
	le := binary.LittleEndian
	ix.starts = []int32{0}
	for i := range ix.n {
		r := ix.records[recordSize*i:]
		c, slot := int(le.Uint32(r)), int(le.Uint32(r[4:]))
		first := int(ix.starts[len(ix.starts)-1])
		if i > first && slot == 0 {
			ix.starts, first = append(ix.starts, int32(i)), i
		}
		if c != len(ix.starts)-1 || slot != i-first || slot >= ix.k {
			return fmt.Errorf("%w: file %d's record says chunk %d slot %d, after files of %d chunks (at most K=%d files each)", errCorrupt, ix.first+int64(i), c, slot, len(ix.starts)-1, ix.k)
		}
	}
	if ix.n > 0 {
		ix.starts = append(ix.starts, int32(ix.n))
	}
	return nil
}

// CRC returns the checksum of the index's records and paths, which the
// manifest records.
func (ix *Index) CRC() uint32 { return ix.crc }

// Rank returns the rank the index belongs to.
func (ix *Index) Rank() int { return ix.rank }

// First returns the global id of the rank's first file.
func (ix *Index) First() int64 { return ix.first }

// Len returns the number of the rank's files.
func (ix *Index) Len() int { return ix.n }

// K returns the number of files per chunk, or the most a chunk holds
// (chunks cut by size).
func (ix *Index) K() int { return ix.k }

// Chunks returns the number of the rank's chunks.
func (ix *Index) Chunks() int { return len(ix.starts) - 1 }

// ChunkFiles returns the number of files in chunk c.
func (ix *Index) ChunkFiles(c int) int { return int(ix.starts[c+1] - ix.starts[c]) }

// ChunkFirst returns the index among the rank's files of chunk c's first.
func (ix *Index) ChunkFirst(c int) int { return int(ix.starts[c]) }

// Entry returns the i-th file of the rank (0 ≤ i < Len). Its path is
// checked to lie inside the path table; a damaged record gives an entry
// whose checks fail later rather than a panic.
func (ix *Index) Entry(i int) Entry {
	e := ix.Record(i)
	e.Path = ix.path(i)
	return e
}

// Record returns the i-th entry without its path, which costs an
// allocation and which readers need only to name a damaged file.
func (ix *Index) Record(i int) Entry {
	le := binary.LittleEndian
	r := ix.records[recordSize*i:]
	return Entry{
		ID: ix.first + int64(i), Rank: ix.rank,
		Chunk: int(le.Uint32(r)), Slot: int(le.Uint32(r[4:])), Offset: int64(le.Uint64(r[8:])),
		Size: le.Uint32(r[16:]), CRC: le.Uint32(r[20:]), Label: int32(le.Uint32(r[24:])),
	}
}

// path returns the i-th file's input path, or "" when its record points
// outside the path table.
func (ix *Index) path(i int) string {
	le := binary.LittleEndian
	r := ix.records[recordSize*i:]
	plen, poff := uint64(le.Uint32(r[28:])), le.Uint64(r[32:])
	if poff > uint64(len(ix.paths)) || plen > uint64(len(ix.paths))-poff {
		return ""
	}
	return string(ix.paths[poff : poff+plen])
}

// Close releases the index's memory.
func (ix *Index) Close() error {
	if ix.release == nil {
		return nil
	}
	err := ix.release()
	ix.release, ix.records, ix.paths = nil, nil, nil
	return err
}

// mapper is implemented by files that can be memory-mapped.
type mapper interface {
	mmap() ([]byte, func() error, error)
}

// mapFile maps name read-only, or reads it whole when the FS cannot map.
// Its errors are StorageErrors of of ("shard 3 index").
func mapFile(fsys FS, name, of string) ([]byte, func() error, error) {
	unreachable := func(op string, err error) error {
		return &StorageError{Of: of, File: name, Op: op, Err: UnwrapPath(err)}
	}
	f, err := fsys.Open(name, false)
	if err != nil {
		return nil, nil, unreachable("open", err)
	}
	if m, ok := f.(mapper); ok {
		data, unmap, err := m.mmap()
		cerr := f.Close()
		if err != nil {
			return nil, nil, unreachable("map", err)
		}
		return data, unmap, cerr
	}
	defer f.Close()
	fi, err := fsys.Stat(name)
	if err != nil {
		return nil, nil, unreachable("stat", err)
	}
	data := make([]byte, fi.Size())
	if n, err := f.ReadAt(data, 0); n != len(data) {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%d of %d bytes: %w", n, len(data), io.ErrUnexpectedEOF)
		}
		return nil, nil, unreachable("read", err)
	}
	return data, func() error { return nil }, nil
}

func (o *osFile) mmap() ([]byte, func() error, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, func() error { return nil }, nil
	}
	data, err := syscall.Mmap(int(o.f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, &os.PathError{Op: "mmap", Path: o.f.Name(), Err: err}
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
