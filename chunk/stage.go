package chunk

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// stager writes the chunk files and index of shards into a temporary
// directory, with a pool of workers.
type stager struct {
	fsys    FS
	plan    *Plan
	tmp     string // the temporary directory holding rank directories
	out     string // where they will end up, for error messages
	workers int
	files   atomic.Int64
	bytes   atomic.Int64
	failed  atomic.Bool
}

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
			var buf []byte
			for c := range jobs {
				if s.failed.Load() {
					continue
				}
				var err error
				if buf, err = s.writeChunk(r, c-c0, c, buf, entries[int64(c-c0)*int64(s.plan.K):]); err != nil {
					s.failed.Store(true)
					errs <- err
				}
			}
		}()
	}
	for c := c0; c < c1 && !s.failed.Load(); c++ {
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return s.writeIndex(r, f0, entries)
}

// writeChunk reads the inputs of global chunk c (chunk local of rank r)
// into buf, writes the chunk file, and fills the entries of its files.
func (s *stager) writeChunk(r, local, c int, buf []byte, entries []Entry) ([]byte, error) {
	ins, ext, length := s.plan.chunkLayout(c)
	if int64(cap(buf)) < length {
		buf = make([]byte, length)
	}
	buf = buf[:length]
	for i, in := range ins {
		data := buf[ext[i].Offset : ext[i].Offset+in.Size]
		if err := s.readInput(in, data); err != nil {
			return buf, err
		}
		ext[i].CRC = checksum(data)
		entries[i] = Entry{ID: int64(c*s.plan.K + i), Rank: r, Chunk: local, Slot: i, Offset: ext[i].Offset,
			Size: ext[i].Size, CRC: ext[i].CRC, Label: in.Label, Path: in.Rel}
		s.files.Add(1)
		s.bytes.Add(in.Size)
	}
	_, _, first, _ := s.plan.Shard(r)
	h := &ChunkHeader{Rank: r, Chunk: local, FirstFile: first + int64(local*s.plan.K), Length: length, Files: ext}
	copy(buf, encodeHeader(h))
	name := join(RankDir(r), ChunkName(local))
	return buf, s.writeFile(name, buf)
}

// readInput reads in whole into data and checks that the file still has
// the size the scan found.
func (s *stager) readInput(in Input, data []byte) error {
	f, err := s.fsys.Open(in.Source, false)
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	defer f.Close()
	n, err := f.ReadAt(data, 0)
	if n < len(data) {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("file shrank to %d bytes while packing (was %d)", n, len(data))
		}
		return fmt.Errorf("chunk: read %s: %w", in.Source, err)
	}
	var probe [1]byte
	if n, _ := f.ReadAt(probe[:], int64(len(data))); n > 0 {
		return fmt.Errorf("chunk: read %s: file grew while packing (was %d bytes)", in.Source, len(data))
	}
	_ = f.DropCache()
	return nil
}

// writeFile writes data to tmp/name durably, and drops it from the page
// cache. Errors name the file's final place.
func (s *stager) writeFile(name string, data []byte) error {
	f, err := s.fsys.Create(join(s.tmp, name))
	if err == nil {
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			_ = f.DropCache()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("chunk: write %s: %w", join(s.out, name), unwrapPath(err))
	}
	return nil
}

func (s *stager) writeIndex(r int, first int64, entries []Entry) (uint32, int64, error) {
	var b sizedBuffer
	crc, err := writeIndexTo(&b, r, s.plan.K, first, entries)
	if err != nil {
		return 0, 0, err
	}
	return crc, int64(len(b.data)), s.writeFile(join(RankDir(r), indexName), b.data)
}

type sizedBuffer struct{ data []byte }

func (b *sizedBuffer) Write(p []byte) (int, error) { b.data = append(b.data, p...); return len(p), nil }

// unwrapPath strips the path of an fs.PathError, so that messages name
// the final file rather than the temporary one.
func unwrapPath(err error) error {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) {
		if inner := pe.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
