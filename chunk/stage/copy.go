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

// copyShard copies the manifest and the shard's index and chunk files
// into the temporary directory, verifies them, copies what fails once
// more, then writes the marker and renames the copy into place. What it
// copied is removed if it fails.
func (sc *shardCopy) copyShard() error {
	err := sc.copyAndVerify()
	if err != nil {
		if rerr := sc.st.cfg.FS.RemoveAll(sc.tmp); rerr != nil {
			return errors.Join(err, fmt.Errorf("stage: remove %s: %w", sc.tmp, rerr))
		}
	}
	return err
}

func (sc *shardCopy) copyAndVerify() error {
	s := sc.st
	rdir := chunk.RankDir(sc.shard)
	if err := s.cfg.FS.MkdirAll(filepath.Join(sc.tmp, rdir)); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := s.writeFile(filepath.Join(sc.tmp, chunk.ManifestName), s.data); err != nil {
		return err
	}
	sc.res.CopiedBytes += int64(len(s.data))
	files := []string{filepath.Join(rdir, chunk.IndexName)}
	for c := range s.man.Shards[sc.shard].Chunks {
		files = append(files, filepath.Join(rdir, chunk.ChunkName(c)))
	}
	want := sc.want()
	if err := sc.copyFiles(files, want.Bytes-int64(len(s.data))); err != nil {
		return err
	}
	probs, err := sc.verify(sc.tmp)
	if err == nil && len(probs) > 0 {
		probs, err = sc.copyAgain(probs)
	}
	if err != nil {
		return err
	}
	if len(probs) > 0 {
		return fmt.Errorf("stage: the copy of shard %d of %s failed verification twice and was removed (brandrt verify --chunks %s checks the source): %s",
			sc.shard, s.cfg.Source, s.cfg.Source, describe(probs))
	}
	return sc.commit(want)
}

// copyAgain copies the files of probs once more, since a fault on the
// way may not repeat, and verifies the copy again.
func (sc *shardCopy) copyAgain(probs []problem) ([]problem, error) {
	again, size := make([]string, len(probs)), int64(0)
	for i, p := range probs {
		again[i] = p.file
		if fi, err := sc.st.cfg.FS.Stat(filepath.Join(sc.tmp, p.file)); err == nil {
			size += fi.Size()
		}
	}
	if err := sc.copyFiles(again, size); err != nil {
		return nil, err
	}
	return sc.verify(sc.tmp)
}

// commit writes the marker into the verified copy and renames it into
// place.
func (sc *shardCopy) commit(mk marker) error {
	s := sc.st
	fsys := s.cfg.FS
	if err := s.writeMarker(sc.tmp, mk); err != nil {
		return err
	}
	if err := fsys.SyncDir(sc.tmp); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := fsys.Rename(sc.tmp, sc.dir); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if err := fsys.SyncDir(s.cfg.Local); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	sc.res.Bytes = mk.Bytes
	return nil
}

// bufSize is what one read from the source asks for.
const bufSize = 4 << 20

// copyFiles copies files (paths relative to the dataset directory) from
// the source into the temporary directory, the configured workers at
// once, reporting progress against total bytes. The first error stops
// them all; of the errors then, the one of the file earliest in files
// is returned (a source gone names its index, whichever worker failed
// first).
func (sc *shardCopy) copyFiles(files []string, total int64) error {
	start := time.Now()
	defer func() { sc.res.CopyTime += time.Since(start) }()
	sc.st.progress(sc.shard, Copy, 0, total)
	var next, copied atomic.Int64
	var failed atomic.Bool
	type failure struct {
		i   int64
		err error
	}
	errs := make(chan failure, sc.st.cfg.Workers)
	var wg sync.WaitGroup
	for range min(sc.st.cfg.Workers, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Page-aligned, as O_DIRECT reads need.
			buf, err := syscall.Mmap(-1, 0, bufSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				failed.Store(true)
				errs <- failure{-1, fmt.Errorf("stage: allocate %d bytes: %w", bufSize, err)}
				return
			}
			defer syscall.Munmap(buf)
			for i := next.Add(1) - 1; i < int64(len(files)) && !failed.Load(); i = next.Add(1) - 1 {
				n, err := sc.copyFile(files[i], buf)
				copied.Add(n)
				if err != nil {
					failed.Store(true)
					errs <- failure{i, err}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	sc.res.CopiedBytes += copied.Load()
	first := failure{i: int64(len(files))}
	for f := range errs {
		if f.i < first.i {
			first = f
		}
	}
	return first.err
}

// copyFile copies the source's file rel into the temporary directory
// through buf, syncs the copy and drops it from the page cache; it
// returns the bytes written.
func (sc *shardCopy) copyFile(rel string, buf []byte) (int64, error) {
	src, dst := filepath.Join(sc.st.cfg.Source, rel), filepath.Join(sc.tmp, rel)
	in, err := sc.st.cfg.FS.Open(src, true)
	if err != nil {
		return 0, fmt.Errorf("stage: %w", &chunk.StorageError{File: src, Op: "open", Err: chunk.UnwrapPath(err)})
	}
	defer in.Close()
	out, err := sc.st.create(dst)
	if err != nil {
		return 0, fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(err))
	}
	n, err := sc.pump(in, out, src, dst, buf)
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
func (sc *shardCopy) pump(in, out chunk.File, src, dst string, buf []byte) (int64, error) {
	var off int64
	for {
		if sc.st.stopped() {
			return off, ErrInterrupted
		}
		n, err := in.ReadAt(buf, off)
		sc.srcBytes.Add(int64(n))
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return off, fmt.Errorf("stage: write %s: %w", dst, chunk.UnwrapPath(werr))
			}
			off += int64(n)
			sc.st.advance(int64(n))
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

// writeFile writes data to name and syncs it.
func (s *stager) writeFile(name string, data []byte) error {
	f, err := s.create(name)
	if err == nil {
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("stage: write %s: %w", name, err)
	}
	return nil
}
