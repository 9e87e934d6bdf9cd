package chunk

import (
	"errors"
	"fmt"
	"sync"
)

// CheckSizes checks that every chunk file of the shard exists with the
// size its index gives it, without reading any: what a missing or cut
// chunk file costs is known before the first epoch. It returns up to
// most problems, one per chunk file, and how many chunk files have one.
// Stats run a few at once: on a parallel file system each is a round
// trip to a server.
func (s *Shard) CheckSizes(most int) ([]error, int) {
	n := s.idx.Chunks()
	probs := make([]error, n)
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := w; c < n; c += workers {
				probs[c] = s.checkSize(c)
			}
		}()
	}
	wg.Wait()
	var out []error
	bad := 0
	for _, p := range probs {
		if p != nil {
			if bad++; len(out) < most {
				out = append(out, p)
			}
		}
	}
	return out, bad
}

func (s *Shard) checkSize(c int) error {
	first := s.idx.ChunkFirst(c)
	last := s.idx.Record(first + s.idx.ChunkFiles(c) - 1)
	want := last.Offset + int64(last.Size)
	fi, err := s.fsys.Stat(s.path(c))
	switch {
	case err != nil:
		return s.storageError(c, "stat", err)
	case !fi.Mode().IsRegular():
		return s.errorf(c, "%w: not a regular file (%v); %s", errCorrupt, fi.Mode(), s.lostFiles(c, 0))
	case fi.Size() != want:
		return s.errorf(c, "%w: %d bytes, the index says %d; %s", errCorrupt, fi.Size(), want, s.lostFiles(c, fi.Size()))
	}
	return nil
}

// lostFiles names the files of chunk c that a chunk file of size bytes
// lacks: how many, and the first of them.
func (s *Shard) lostFiles(c int, size int64) string {
	first, n := s.idx.ChunkFirst(c), s.idx.ChunkFiles(c)
	for i := range n {
		if e := s.idx.Record(first + i); e.Offset+int64(e.Size) > size {
			return fmt.Sprintf("%d of its %d files are lost, from slot %d (%s, bytes %d–%d) on",
				n-i, n, i, s.idx.path(first+i), e.Offset, e.Offset+int64(e.Size))
		}
	}
	return "no file is lost, but the chunk file is longer than the index says"
}

// SizesError joins what CheckSizes found into one error (nil for none).
func SizesError(probs []error, bad int) error {
	if bad > len(probs) {
		probs = append(probs, fmt.Errorf("and %d more chunk files", bad-len(probs)))
	}
	return errors.Join(probs...)
}
