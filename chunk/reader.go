package chunk

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

// Shard reads one rank's chunks: whole (one sequential read of the chunk
// file) or selectively (only some slots, neighbouring slots coalesced
// into one read). Reads bypass the page cache where the file system
// allows (O_DIRECT), else drop what they brought in, so that memory holds
// only what the caller keeps. Every read file's checksum is verified. A
// Shard is safe for concurrent use.
type Shard struct {
	fsys FS
	dir  string
	idx  *Index
	pool bufPool
	mem  Memory // where chunks are read into: &pool unless SetMemory
	// Gap is the largest hole between two wanted slots that a selective
	// read reads through rather than issuing a second request.
	Gap int64
	// whole is set once a chunk file was found not to scatter: ReadInto
	// then reads whole (ReadWhole) without trying again.
	whole atomic.Bool
	// keep, when set (a Home's shards), holds chunk files open between
	// reads.
	keep *kept
}

// OpenShard opens rank's shard of the dataset in dir.
func OpenShard(fsys FS, dir string, rank int) (*Shard, error) {
	rdir := join(dir, RankDir(rank))
	idx, err := OpenIndex(fsys, rdir, rank)
	if err != nil {
		return nil, err
	}
	s := &Shard{fsys: fsys, dir: rdir, idx: idx, Gap: 256 << 10}
	s.mem = &s.pool
	return s, nil
}

// Memory lends the page-aligned buffers (as O_DIRECT needs) that chunks
// are read into. Alloc returns at least n bytes; Free takes back what
// Alloc returned, whole. Implementations are safe for concurrent use.
type Memory interface {
	Alloc(n int64) ([]byte, error)
	Free(b []byte)
}

// SetMemory makes the shard read chunks into buffers from m instead of
// its own anonymous mappings: memory shared with other processes, say.
// Call it before the first read.
func (s *Shard) SetMemory(m Memory) { s.mem = m }

// Index returns the shard's index.
func (s *Shard) Index() *Index { return s.idx }

// Close releases the index and the read buffers.
func (s *Shard) Close() error {
	if s.keep != nil {
		s.keep.close(s)
	}
	s.pool.drain()
	return s.idx.Close()
}

// Chunk holds the files read from one chunk. Release it when done.
type Chunk struct {
	// Rank and Index name the chunk; BytesRead is what was read from
	// storage for it.
	Rank, Index int
	BytesRead   int64
	files       [][]byte
	buf         []byte
	mem         Memory
	scattered   bool
}

// Scattered reports whether the chunk's files are in buffers the caller
// lent (Shard.ReadInto), not in a buffer of the chunk's.
func (c *Chunk) Scattered() bool { return c.scattered }

// File returns the bytes of slot i, or nil when the slot was not read. They
// stay valid until Release.
func (c *Chunk) File(i int) []byte { return c.files[i] }

// Slots returns the number of files in the chunk.
func (c *Chunk) Slots() int { return len(c.files) }

// Release returns the chunk's memory for reuse.
func (c *Chunk) Release() {
	if c.buf != nil {
		c.mem.Free(c.buf)
		c.buf, c.files = nil, nil
	}
}

// Held returns a chunk of files whose bytes live elsewhere (copies the
// caller keeps), a nil one for a slot not read: it has no buffer of its
// own, and Release gives nothing back.
func Held(rank, index int, files [][]byte) *Chunk {
	return &Chunk{Rank: rank, Index: index, files: files}
}

func (s *Shard) path(c int) string { return join(s.dir, ChunkName(c)) }

func (s *Shard) errorf(c int, format string, args ...any) error {
	return fmt.Errorf("chunk: shard %d chunk %d (%s): %w", s.idx.rank, c, s.path(c), fmt.Errorf(format, args...))
}

// entries returns the index entries of chunk c.
func (s *Shard) entries(c int) ([]Entry, error) {
	if c < 0 || c >= s.idx.Chunks() {
		return nil, fmt.Errorf("chunk: shard %d has no chunk %d (it has %d)", s.idx.rank, c, s.idx.Chunks())
	}
	es := make([]Entry, s.idx.ChunkFiles(c))
	for i := range es {
		es[i] = s.idx.Record(s.idx.ChunkFirst(c) + i)
		if es[i].Chunk != c || es[i].Slot != i {
			return nil, fmt.Errorf("chunk: shard %d index: %w: file %d names chunk %d slot %d, expected %d/%d",
				s.idx.rank, errCorrupt, es[i].ID, es[i].Chunk, es[i].Slot, c, i)
		}
	}
	return es, nil
}

// ReadChunk reads chunk c whole and verifies its header against the index
// and every file's checksum: any damage is an error.
func (s *Shard) ReadChunk(c int) (*Chunk, error) {
	ch, damage, err := s.ReadWhole(c)
	if err != nil {
		return nil, err
	}
	if len(damage) > 0 {
		ch.Release()
		return nil, &damage[0]
	}
	return ch, nil
}

// Damage is a file of a chunk whose bytes are not intact: they fail
// their checksum, or the chunk file ends before them. (A chunk file that
// cannot be opened or read is not damage but a StorageError.) Slot -1 is
// the chunk's header and table, which the index makes redundant: its
// damage costs no file.
type Damage struct {
	Rank, Chunk, Slot int
	// ID is the file's global id, Path its path in the packed input (""
	// for the header); File is the chunk file, and [Lo, Hi) the file's
	// bytes in it.
	ID     int64
	Path   string
	File   string
	Lo, Hi int64
	// Reason says what is wrong.
	Reason string
}

func (d *Damage) Error() string {
	what := fmt.Sprintf("slot %d (%s)", d.Slot, d.Path)
	if d.Slot < 0 {
		what = "header"
	}
	return fmt.Sprintf("chunk: shard %d chunk %d (%s): %v: %s, bytes %d–%d: %s", d.Rank, d.Chunk, d.File, errCorrupt, what, d.Lo, d.Hi, d.Reason)
}

// Unwrap makes damage count as corruption (ErrCorrupt).
func (d *Damage) Unwrap() error { return errCorrupt }

// ReadWhole reads chunk c whole, as ReadChunk does, but keeps what is
// intact: each damaged file is left out of the chunk (File returns nil)
// and named in the damage, which lists the header first when it fails
// too. A chunk file that ends early damages the files it does not hold.
// The error is for what is not the data's fault: a chunk file that could
// not be opened or read (a StorageError: see Unreachable), no such chunk,
// no memory to read into.
func (s *Shard) ReadWhole(c int) (*Chunk, []Damage, error) {
	es, err := s.entries(c)
	if err != nil {
		return nil, nil, err
	}
	last := es[len(es)-1]
	ch, got, short, err := s.readRanges(c, []extent{{0, last.Offset + int64(last.Size)}})
	if err != nil {
		return nil, nil, err
	}
	if Unreachable(short) {
		ch.Release()
		return nil, nil, short
	}
	data := got[0]
	var damage []Damage
	ch.files, damage = s.check(c, es, data, int64(len(data)), short, func(i int) []byte {
		return data[es[i].Offset : es[i].Offset+int64(es[i].Size)]
	})
	return ch, damage, nil
}

// check checks what a read of chunk c brought: the header and table
// (head, from the chunk's start), whole, against the index, and each
// file the read holds whole (the got bytes from the start: file gives
// its bytes) against its checksum. It returns the intact files and the
// damage: the header's first, then each file not intact or not read
// (past got: the read ended early, for the reason short gives).
func (s *Shard) check(c int, es []Entry, head []byte, got int64, short error, file func(i int) []byte) ([][]byte, []Damage) {
	cause := ""
	if short != nil {
		cause = short.Error()
	}
	var damage []Damage
	if int64(len(head)) >= HeaderSize(len(es)) {
		if reason := s.checkHeader(c, es, head); reason != "" {
			damage = append(damage, Damage{Rank: s.idx.rank, Chunk: c, Slot: -1, ID: -1, File: s.path(c), Hi: HeaderSize(len(es)), Reason: reason})
		}
	}
	files := make([][]byte, len(es))
	for i, e := range es {
		lo, hi := e.Offset, e.Offset+int64(e.Size)
		reason := cause
		if hi <= got {
			data := file(i)
			if sum := Checksum(data); sum != e.CRC {
				reason = fmt.Sprintf("checksum %08x, expected %08x", sum, e.CRC)
			} else {
				files[i] = data
				continue
			}
		}
		damage = append(damage, Damage{Rank: s.idx.rank, Chunk: c, Slot: i, ID: e.ID, Path: s.idx.path(int(e.ID - s.idx.first)),
			File: s.path(c), Lo: lo, Hi: hi, Reason: reason})
	}
	return files, damage
}

// ReadInto reads chunk c whole and checks it, as ReadWhole does, but
// where the chunk file allows it (a Scatterer, see FS.Open) each file
// goes straight from storage into a buffer of its own that lend gives
// (for slot i, n bytes; not for an empty file), in one request: a file
// can then leave memory alone, whatever becomes of the others, without
// a copy. The chunk is then Scattered: it has no buffer, and every
// buffer lent stays the caller's to give back, a damaged file's too
// (File returns nil for it). Elsewhere (O_DIRECT on a local disk needs
// aligned buffers) it is ReadWhole's chunk, in a chunk buffer, and lend
// is not called.
func (s *Shard) ReadInto(c int, lend func(i, n int) []byte) (*Chunk, []Damage, error) {
	if s.whole.Load() {
		return s.ReadWhole(c)
	}
	es, err := s.entries(c)
	if err != nil {
		return nil, nil, err
	}
	if !inOrder(es) { // an index that ReadWhole's checks catch
		return s.ReadWhole(c)
	}
	f, err := s.open(c)
	if err != nil {
		return nil, nil, s.storageError(c, "open", err) // as ReadWhole says it
	}
	sc, ok := f.(Scatterer)
	if !ok || !sc.Scatters() {
		s.done(c, f, false)
		s.whole.Store(true) // every chunk file of a shard is on one file system
		return s.ReadWhole(c)
	}
	head := make([]byte, es[0].Offset)
	iov, gap, at := [][]byte{head}, []byte(nil), es[0].Offset
	bufs := make([][]byte, len(es))
	for i, e := range es {
		if e.Offset > at { // bytes between files (none from pack): read through
			if int64(len(gap)) < e.Offset-at {
				gap = make([]byte, e.Offset-at)
			}
			iov = append(iov, gap[:e.Offset-at])
		}
		bufs[i] = []byte{}
		if e.Size > 0 {
			bufs[i] = lend(i, int(e.Size))[:e.Size:e.Size]
			iov = append(iov, bufs[i])
		}
		at = e.Offset + int64(e.Size)
	}
	n, err := sc.ReadAtv(iov, 0)
	var short error
	if int64(n) < at {
		short = s.readShort(c, int64(n), at, err)
	}
	s.done(c, f, short != nil)
	if Unreachable(short) {
		return nil, nil, short
	}
	ch := &Chunk{Rank: s.idx.rank, Index: c, BytesRead: int64(n), scattered: true}
	var damage []Damage
	ch.files, damage = s.check(c, es, head[:min(int64(n), int64(len(head)))], int64(n), short, func(i int) []byte { return bufs[i] })
	return ch, damage, nil
}

// inOrder reports whether the files of a chunk follow its header and one
// another, as pack writes them.
func inOrder(es []Entry) bool {
	at := HeaderSize(len(es))
	for _, e := range es {
		if e.Offset < at {
			return false
		}
		at = e.Offset + int64(e.Size)
	}
	return true
}

// checkHeader returns what is wrong with the chunk's header and table
// against the index, or "".
func (s *Shard) checkHeader(c int, es []Entry, b []byte) string {
	h, err := decodeHeader(b, s.idx.rank, c, len(es))
	if err != nil {
		return err.Error()
	}
	for i, e := range es {
		if t := h.Files[i]; t.Offset != e.Offset || t.Size != e.Size || t.CRC != e.CRC {
			return fmt.Sprintf("slot %d: chunk table and index disagree", i)
		}
	}
	return ""
}

func (s *Shard) verify(c int, e Entry, data []byte) error {
	if got := Checksum(data); got != e.CRC {
		return s.errorf(c, "%w: slot %d (%s): checksum %08x, expected %08x", errCorrupt, e.Slot, s.idx.path(int(e.ID-s.idx.first)), got, e.CRC)
	}
	return nil
}

// ReadSlots reads only the given slots of chunk c, coalescing slots whose
// gap is at most Gap into one request, and verifies their checksums.
func (s *Shard) ReadSlots(c int, slots []int) (*Chunk, error) {
	es, err := s.entries(c)
	if err != nil {
		return nil, err
	}
	want := slices.Clone(slots)
	slices.Sort(want)
	want = slices.Compact(want)
	var exts []extent
	for _, i := range want {
		if i < 0 || i >= len(es) {
			return nil, s.errorf(c, "no slot %d (the chunk has %d)", i, len(es))
		}
		e := es[i]
		exts = append(exts, extent{e.Offset, e.Offset + int64(e.Size)})
	}
	ranges := coalesce(exts, s.Gap)
	ch, data, err := s.read(c, ranges)
	if err != nil {
		return nil, err
	}
	for _, i := range want {
		e := es[i]
		b := locate(data, ranges, e.Offset, int64(e.Size))
		if err := s.verify(c, e, b); err != nil {
			ch.Release()
			return nil, err
		}
		ch.files[i] = b
	}
	return ch, nil
}

// extent is a byte range [lo, hi) of a chunk file.
type extent struct{ lo, hi int64 }

// coalesce merges sorted extents whose gap is at most gap.
func coalesce(exts []extent, gap int64) []extent {
	var out []extent
	for _, e := range exts {
		if n := len(out); n > 0 && e.lo-out[n-1].hi <= gap {
			out[n-1].hi = max(out[n-1].hi, e.hi)
			continue
		}
		out = append(out, e)
	}
	return out
}

// locate returns the bytes [off, off+n) of the chunk file from the
// buffers holding the ranges.
func locate(data [][]byte, ranges []extent, off, n int64) []byte {
	for i, r := range ranges {
		if off >= r.lo && off+n <= r.hi {
			return data[i][off-r.lo : off-r.lo+n]
		}
	}
	return nil
}

// read reads the given ranges of chunk c into one pooled buffer, each at
// an aligned place, and returns the chunk (files not yet set) and the
// bytes of each range; a range it cannot read whole is an error.
func (s *Shard) read(c int, ranges []extent) (*Chunk, [][]byte, error) {
	ch, data, short, err := s.readRanges(c, ranges)
	if err == nil && short != nil {
		ch.Release()
		if Unreachable(short) {
			return nil, nil, short
		}
		return nil, nil, s.errorf(c, "%w: %v", errCorrupt, short)
	}
	return ch, data, err
}

// readRanges reads as read does, but returns what it could read: the
// bytes of each range, those of the first range it could not read whole
// cut short (and of the ranges after it none), with why as short (the
// file could not be opened or read: a StorageError, or it ends early:
// endsEarly). The error is
// for a failed allocation.
func (s *Shard) readRanges(c int, ranges []extent) (ch *Chunk, data [][]byte, short, err error) {
	ch = &Chunk{Rank: s.idx.rank, Index: c, files: make([][]byte, s.idx.ChunkFiles(c)), mem: s.mem}
	data = make([][]byte, len(ranges))
	f, err := s.open(c)
	if err != nil {
		return ch, data, s.storageError(c, "open", err), nil
	}
	defer func() { s.done(c, f, short != nil || err != nil) }()
	a := int64(f.Align())
	total := int64(0)
	for _, r := range ranges {
		total += alignUp(r.hi, a) - alignDown(r.lo, a)
	}
	if ch.buf, err = s.mem.Alloc(total); err != nil {
		return nil, nil, nil, s.errorf(c, "%w", err)
	}
	at := int64(0)
	for i, r := range ranges {
		lo, hi := alignDown(r.lo, a), alignUp(r.hi, a)
		n, err := f.ReadAt(ch.buf[at:at+hi-lo], lo)
		ch.BytesRead += int64(n)
		if int64(n) < r.hi-lo {
			data[i] = ch.buf[at+min(r.lo-lo, int64(n)) : at+int64(n)]
			return ch, data, s.readShort(c, lo+int64(n), r.hi, err), nil
		}
		data[i] = ch.buf[at+r.lo-lo : at+r.hi-lo]
		at += hi - lo
	}
	return ch, data, nil, nil
}

// readShort is why a read of chunk c's file stopped at byte at, short of
// need: the file ends early (no error, or EOF), or storage failed.
func (s *Shard) readShort(c int, at, need int64, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return &endsEarly{at, need}
	}
	return s.storageError(c, "read", err)
}

// endsEarly says that a chunk file ends before the bytes its index needs.
type endsEarly struct{ at, need int64 }

func (e *endsEarly) Error() string {
	return fmt.Sprintf("the chunk file ends at %d bytes, the index needs %d", e.at, e.need)
}

func alignUp(x, a int64) int64   { return (x + a - 1) / a * a }
func alignDown(x, a int64) int64 { return x / a * a }

// bufPool is the default Memory: anonymous mappings (page-aligned, as
// O_DIRECT needs, without unsafe), a few of them kept for reuse.
type bufPool struct {
	mu   sync.Mutex
	free [][]byte
}

// poolKeep bounds the buffers kept. A buffer is only made when none is
// free (a free one too small for the read is unmapped first), so the
// buffers, lent and kept, were all in use at one time: they cost no more
// than the reads once in flight together (a caller with W workers reading
// chunks keeps at most W: rt counts them, Node.Footprint).
const poolKeep = 8

// Alloc returns a buffer of at least n bytes.
func (p *bufPool) Alloc(n int64) ([]byte, error) {
	p.mu.Lock()
	var small []byte
	for i, b := range p.free {
		if int64(len(b)) >= n {
			p.free = slices.Delete(p.free, i, i+1)
			p.mu.Unlock()
			return b, nil
		}
	}
	if last := len(p.free) - 1; last >= 0 {
		small, p.free = p.free[last], p.free[:last]
	}
	p.mu.Unlock()
	if small != nil {
		_ = syscall.Munmap(small)
	}
	size := alignUp(max(n, 1), 1<<20)
	m, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes: %w", size, err)
	}
	return m, nil
}

// Free keeps b for reuse or unmaps it.
func (p *bufPool) Free(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < poolKeep {
		p.free = append(p.free, b)
		return
	}
	_ = syscall.Munmap(b)
}

func (p *bufPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.free {
		_ = syscall.Munmap(b)
	}
	p.free = nil
}
