package chunk

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
)

// stager writes the chunk files and index of shards into a temporary
// directory, with a pool of workers. An input that cannot be read does not
// stop it: it reads on, writing nothing more, to report every unreadable
// input in one error (maxProblems of them, and how many more).
type stager struct {
	fsys    FS
	plan    *Plan
	tmp     string // the temporary directory holding rank directories
	out     string // where they will end up, for error messages
	workers int
	stop    <-chan struct{} // closed: stop writing
	pool    bufPool
	files   atomic.Int64
	bytes   atomic.Int64
	failed  atomic.Bool
	mu      sync.Mutex
	bad     []badInput // the unreadable inputs of lowest ids, at most maxProblems
	more    int        // and how many others
}

// badInput is an input that could not be read.
type badInput struct {
	id  int64
	err error
}

// inputError is an input that could not be read as the scan found it.
type inputError struct{ error }

func (e inputError) Unwrap() error { return e.error }

// addBad records unreadable input id. It keeps those of lowest ids, so
// that the report does not depend on the workers' timing.
func (s *stager) addBad(id int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.bad, id, func(b badInput, id int64) int { return cmp.Compare(b.id, id) })
	s.bad = slices.Insert(s.bad, i, badInput{id, err})
	if len(s.bad) > maxProblems {
		s.bad, s.more = s.bad[:maxProblems], s.more+1
	}
}

// badInputs returns how many unreadable inputs were found and the error
// listing them.
func (s *stager) badInputs() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p problems
	for _, b := range s.bad {
		p.add("%w", b.err)
	}
	p.more = s.more
	return len(s.bad) + s.more, p.err()
}

// goOn says whether to hand out more chunks.
func (s *stager) goOn() bool { return !s.failed.Load() && !s.stopped() }

// stageShard writes rank r's chunks and index under tmp/rank-r and
// returns its index checksum and size.
func (s *stager) stageShard(r int) (crc uint32, size int64, err error) {
	c0, c1, f0, f1 := s.plan.Shard(r)
	dir := join(s.tmp, RankDir(r))
	if err := s.fsys.MkdirAll(dir); err != nil {
		return 0, 0, fmt.Errorf("chunk: %w", err)
	}
	entries := make([]Entry, f1-f0)
	jobs := make(chan int)
	errs := make(chan error, s.workers)
	var wg sync.WaitGroup
	for w := 0; w < s.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, out := &scratch{pool: &s.pool}, &scratch{pool: &s.pool}
			defer in.release()
			defer out.release()
			for c := range jobs {
				if s.failed.Load() || s.stopped() {
					continue
				}
				if err := s.writeChunk(r, c-c0, c, in, out, entries[s.plan.chunkFirst(c)-f0:]); err != nil {
					s.failed.Store(true)
					errs <- err
				}
			}
		}()
	}
	for c := c0; c < c1 && s.goOn(); c++ {
		select {
		case jobs <- c:
		case <-s.stop:
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	if s.stopped() {
		return 0, 0, ErrInterrupted
	}
	if n, _ := s.badInputs(); n > 0 {
		return 0, 0, nil // the pack fails: no index needed
	}
	return s.writeIndex(r, f0, entries)
}

// stopped says whether the pack was asked to stop.
func (s *stager) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// packPiece is the most of one chunk a pack worker holds at once, in
// each of its two buffers: a longer chunk (a chunk of large files) is
// read and written in pieces, its header last, so that packing a 1 GiB
// file holds 16 MiB, not the file twice.
const packPiece = 8 << 20

// packDirty is the most of a long chunk written and not yet made durable
// and dropped from the page cache, which a memory cgroup counts: a chunk
// of a 1 GiB file would hold 1 GiB of it.
const packDirty = 64 << 20

// writeChunk reads the inputs of global chunk c (chunk local of rank r)
// through the scratch buffer in, writes the chunk file through out, and
// fills the entries of its files.
func (s *stager) writeChunk(r, local, c int, in, out *scratch, entries []Entry) error {
	ins, ext, length := s.plan.chunkLayout(c)
	w, err := s.newChunkWriter(join(RankDir(r), ChunkName(local)), length, HeaderSize(len(ins)), out)
	if err != nil {
		return err
	}
	defer w.abort()
	bad := false
	for i, input := range ins {
		s.files.Add(1)
		s.bytes.Add(input.Size)
		crc, put := uint32(0), w.write
		if bad {
			put = func([]byte) error { return nil } // the pack fails: only look for more unreadable inputs
		}
		err := s.readInput(input, in, func(p []byte) error { crc = crc32Update(crc, p); return put(p) })
		if errors.As(err, new(inputError)) {
			s.addBad(s.plan.chunkFirst(c)+int64(i), err)
			bad = true
			continue
		} else if err != nil {
			return err
		}
		ext[i].CRC = crc
		entries[i] = Entry{ID: s.plan.chunkFirst(c) + int64(i), Rank: r, Chunk: local, Slot: i, Offset: ext[i].Offset,
			Size: ext[i].Size, CRC: ext[i].CRC, Label: input.Label, Path: input.Rel}
	}
	if n, _ := s.badInputs(); bad || n > 0 {
		return nil // the pack fails: only look for more unreadable inputs
	}
	h := &ChunkHeader{Rank: r, Chunk: local, FirstFile: s.plan.chunkFirst(c), Length: length, Files: ext}
	return w.finish(encodeHeader(h))
}

// readInput reads in whole, uncached (O_DIRECT where allowed, through an
// aligned scratch buffer), and gives put its bytes in order, in pieces of
// at most packPiece. It checks that the file still has the size the scan
// found: the last read asks for more than that size, so it also tells
// whether the file grew.
func (s *stager) readInput(in Input, sc *scratch, put func([]byte) error) error {
	f, err := s.fsys.Open(in.Source, true)
	if err != nil {
		return inputError{fmt.Errorf("chunk: %w", err)}
	}
	defer f.Close()
	b, err := sc.get(min(alignUp(in.Size+1, int64(f.Align())), packPiece))
	if err != nil {
		return fmt.Errorf("chunk: read %s: %w", in.Source, err)
	}
	for off := int64(0); ; {
		n, err := f.ReadAt(b, off)
		got := off + int64(n)
		switch short := n < len(b); {
		case got > in.Size:
			return inputError{fmt.Errorf("chunk: read %s: file grew while packing (was %d bytes)", in.Source, in.Size)}
		case short && err != nil && !errors.Is(err, io.EOF):
			return inputError{fmt.Errorf("chunk: read %s: %w", in.Source, UnwrapPath(err))}
		case short && got < in.Size:
			return inputError{fmt.Errorf("chunk: read %s: file shrank to %d bytes while packing (was %d)", in.Source, got, in.Size)}
		}
		if err := put(b[:n]); err != nil {
			return err
		}
		if n < len(b) {
			return nil
		}
		off = got
	}
}

// chunkWriter writes one chunk file: a chunk of at most packPiece bytes
// is assembled in memory and written at once; a longer one is written in
// pieces behind a header of zeros, which finish overwrites.
type chunkWriter struct {
	s     *stager
	name  string // relative to the temporary directory
	buf   []byte // what is not yet written
	f     File   // open once a long chunk's first piece is written
	dirty int64  // bytes written to f since it was last synced
}

// newChunkWriter starts the chunk file name, length bytes of which the
// header and table of files take the first head.
func (s *stager) newChunkWriter(name string, length, head int64, out *scratch) (*chunkWriter, error) {
	buf, err := out.get(min(length, packPiece))
	if err != nil {
		return nil, fmt.Errorf("chunk: %w", err)
	}
	buf = buf[:head] // cap(buf) > min(length, packPiece) ≥ head
	clear(buf)
	return &chunkWriter{s: s, name: name, buf: buf}, nil
}

// write appends p to the chunk.
func (w *chunkWriter) write(p []byte) error {
	for len(p) > 0 {
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return err
			}
		}
		n := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:n]...)
		p = p[n:]
	}
	return nil
}

// flush writes what the buffer holds to the chunk file, creating it first.
func (w *chunkWriter) flush() error {
	if w.f == nil {
		f, err := w.s.fsys.Create(join(w.s.tmp, w.name))
		if err != nil {
			return w.fail(err)
		}
		w.f = f
	}
	if _, err := w.f.Write(w.buf); err != nil {
		return w.fail(err)
	}
	w.dirty += int64(len(w.buf))
	w.buf = w.buf[:0]
	if w.dirty >= packDirty {
		w.dirty = 0
		if err := durable(w.f); err != nil {
			return w.fail(err)
		}
	}
	return nil
}

// finish writes the chunk's header and table, and makes the file durable.
func (w *chunkWriter) finish(header []byte) error {
	if w.f == nil { // the whole chunk in memory: one write
		copy(w.buf, header)
		return writeDurable(w.s.fsys, w.s.tmp, w.s.out, w.name, w.buf)
	}
	if err := w.flush(); err != nil {
		return err
	}
	f := w.f
	w.f = nil
	_, err := f.WriteAt(header, 0)
	if err := closeDurable(f, err); err != nil {
		return w.fail(err)
	}
	return nil
}

// abort closes a chunk file left unfinished (the pack fails, and removes
// the temporary directory).
func (w *chunkWriter) abort() {
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}

func (w *chunkWriter) fail(err error) error {
	return fmt.Errorf("chunk: write %s: %w", join(w.s.out, w.name), UnwrapPath(err))
}

// scratch is a worker's page-aligned buffer (as O_DIRECT reads need),
// grown as needed and reused from chunk to chunk.
type scratch struct {
	pool *bufPool
	buf  []byte
}

func (sc *scratch) get(n int64) ([]byte, error) {
	n = max(n, 0)
	room := alignUp(n+1, directAlign)
	if sc.buf == nil || int64(len(sc.buf)) < room {
		sc.release()
		b, err := sc.pool.Alloc(room)
		if err != nil {
			return nil, err
		}
		sc.buf = b
	}
	return sc.buf[:n:room], nil
}

func (sc *scratch) release() {
	if sc.buf != nil {
		sc.pool.Free(sc.buf)
		sc.buf = nil
	}
}

func (s *stager) writeFile(name string, data []byte) error {
	return writeDurable(s.fsys, s.tmp, s.out, name, data)
}

// writeDurable writes data to tmp/name durably and drops it from the page
// cache. Errors name the file's final place, out/name. (Buffered writes
// followed by fsync measured faster here than O_DIRECT writes, and leave
// the cache as clean.)
func writeDurable(fsys FS, tmp, out, name string, data []byte) error {
	f, err := fsys.Create(join(tmp, name))
	if err == nil {
		_, err = f.Write(data)
		err = closeDurable(f, err)
	}
	if err != nil {
		return fmt.Errorf("chunk: write %s: %w", join(out, name), UnwrapPath(err))
	}
	return nil
}

// durable makes what was written to f durable and drops it from the page
// cache.
func durable(f File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	return f.DropCache()
}

// closeDurable closes f, made durable first (durable) unless writing it
// failed with err; it returns the first error.
func closeDurable(f File, err error) error {
	if err == nil {
		err = durable(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *stager) writeIndex(r int, first int64, entries []Entry) (uint32, int64, error) {
	var b bytes.Buffer
	crc, err := writeIndexTo(&b, r, s.plan.K, first, entries)
	if err != nil {
		return 0, 0, err
	}
	return crc, int64(b.Len()), s.writeFile(join(RankDir(r), indexName), b.Bytes())
}

// UnwrapPath strips the path of an fs.PathError: for messages that name
// the file themselves (the final file rather than a temporary one, say).
func UnwrapPath(err error) error {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) {
		if inner := pe.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// ReadInputs reads every input whole, in file id order, with workers
// readers, as pack reads them (uncached, each file's size checked) but
// keeping nothing, and returns the bytes read: what pack's reading side
// alone gets from the storage. For benchmarks.
func ReadInputs(fsys FS, inputs []Input, workers int) (int64, error) {
	s := &stager{fsys: fsys}
	defer s.pool.drain()
	var next, total atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() {
			sc := &scratch{pool: &s.pool}
			defer sc.release()
			for i := next.Add(1) - 1; i < int64(len(inputs)); i = next.Add(1) - 1 {
				in := inputs[i]
				if err := s.readInput(in, sc, func([]byte) error { return nil }); err != nil {
					next.Store(int64(len(inputs))) // the others stop too
					errs <- err
					return
				}
				total.Add(in.Size)
			}
			errs <- nil
		}()
	}
	var err error
	for range workers {
		if e := <-errs; err == nil {
			err = e
		}
	}
	return total.Load(), err
}
