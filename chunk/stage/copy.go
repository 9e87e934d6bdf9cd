package stage

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// copyShard copies the manifest (data, m decoded) and the rank's index
// and chunk files into the temporary directory, verifies them, copies
// what fails once more, then writes the marker and renames the copy into
// place.
func (s *stager) copyShard(data []byte, m *chunk.Manifest) error {
	rdir := chunk.RankDir(s.cfg.Rank)
	if err := s.cfg.FS.MkdirAll(filepath.Join(s.tmp, rdir)); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := writeFile(s.cfg.FS, filepath.Join(s.tmp, chunk.ManifestName), data); err != nil {
		return err
	}
	s.res.CopiedBytes += int64(len(data))
	files := []string{filepath.Join(rdir, chunk.IndexName)}
	for c := range m.Shards[s.cfg.Rank].Chunks {
		files = append(files, filepath.Join(rdir, chunk.ChunkName(c)))
	}
	want := s.want(data, m)
	if err := s.copyFiles(files, want.Bytes-int64(len(data))); err != nil {
		return err
	}
	probs, err := s.verify(s.tmp, m)
	if err == nil && len(probs) > 0 {
		// A fault on the way may not repeat: copy what failed once more.
		again, size := make([]string, len(probs)), int64(0)
		for i, p := range probs {
			again[i] = p.file
			if fi, err := s.cfg.FS.Stat(filepath.Join(s.tmp, p.file)); err == nil {
				size += fi.Size()
			}
		}
		if err = s.copyFiles(again, size); err == nil {
			probs, err = s.verify(s.tmp, m)
		}
	}
	if err != nil {
		return err
	}
	if len(probs) > 0 {
		return fmt.Errorf("stage: the copy of rank %d of %s failed verification twice and was removed (brandrt verify --chunks %s checks the source): %s",
			s.cfg.Rank, s.cfg.Source, s.cfg.Source, describe(probs))
	}
	return s.commit(want)
}

// commit writes the marker into the verified copy and renames it into
// place.
func (s *stager) commit(mk marker) error {
	fsys := s.cfg.FS
	if err := writeMarker(fsys, s.tmp, mk); err != nil {
		return err
	}
	if err := fsys.SyncDir(s.tmp); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := fsys.Rename(s.tmp, s.dir); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := fsys.SyncDir(s.cfg.Local); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	s.res.Bytes = mk.Bytes
	return nil
}

// bufSize is what one read from the source asks for.
const bufSize = 4 << 20

// copyFiles copies files (paths relative to the dataset directory) from
// the source into the temporary directory, the configured workers at
// once, reporting progress against total bytes. The first error stops
// them all.
func (s *stager) copyFiles(files []string, total int64) error {
	start := time.Now()
	defer func() { s.res.CopyTime += time.Since(start) }()
	s.progress(Copy, 0, total)
	var next, copied atomic.Int64
	var failed atomic.Bool
	errs := make(chan error, s.cfg.Workers)
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Page-aligned, as O_DIRECT reads need.
			buf, err := syscall.Mmap(-1, 0, bufSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				failed.Store(true)
				errs <- fmt.Errorf("stage: allocate %d bytes: %w", bufSize, err)
				return
			}
			defer syscall.Munmap(buf)
			for i := next.Add(1) - 1; i < int64(len(files)) && !failed.Load(); i = next.Add(1) - 1 {
				n, err := s.copyFile(files[i], buf)
				copied.Add(n)
				if err != nil {
					failed.Store(true)
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	s.res.CopiedBytes += copied.Load()
	return <-errs
}

// copyFile copies the source's file rel into the temporary directory
// through buf, syncs the copy and drops it from the page cache; it
// returns the bytes written.
func (s *stager) copyFile(rel string, buf []byte) (int64, error) {
	src, dst := filepath.Join(s.cfg.Source, rel), filepath.Join(s.tmp, rel)
	in, err := s.cfg.FS.Open(src, true)
	if err != nil {
		return 0, fmt.Errorf("stage: %w", &chunk.StorageError{File: src, Op: "open", Err: chunk.UnwrapPath(err)})
	}
	defer in.Close()
	out, err := s.cfg.FS.Create(dst)
	if err != nil {
		return 0, fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(err))
	}
	n, err := s.pump(in, out, src, dst, buf)
	if err == nil {
		if err = out.Sync(); err == nil {
			err = out.DropCache()
		}
		if err != nil {
			err = fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(err))
		}
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(cerr))
	}
	return n, err
}

// pump copies in (src) to out (dst) through buf until the end of in.
func (s *stager) pump(in, out chunk.File, src, dst string, buf []byte) (int64, error) {
	var off int64
	for {
		if s.stopped() {
			return off, ErrInterrupted
		}
		n, err := in.ReadAt(buf, off)
		s.srcBytes.Add(int64(n))
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return off, fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(werr))
			}
			off += int64(n)
			s.advance(int64(n))
		}
		switch {
		case n == len(buf) && err == nil:
			continue
		case err == nil || errors.Is(err, io.EOF):
			return off, nil
		default:
			return off, fmt.Errorf("stage: %w", &chunk.StorageError{File: src, Op: fmt.Sprintf("read at byte %d of", off), Err: chunk.UnwrapPath(err)})
		}
	}
}
