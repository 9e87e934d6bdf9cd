package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// lockAll takes the lock of every shard's copy, in increasing shard
// order, so that two stages of overlapping shards cannot each wait for
// the other.
func (s *stager) lockAll() error {
	order := slices.Clone(s.shards)
	slices.SortFunc(order, func(a, b *shardCopy) int { return a.shard - b.shard })
	for _, sc := range order {
		unlock, err := lockFile(filepath.Join(s.cfg.Local, "."+sc.name+".lock"), s.cfg.Stop, func() { s.progress(sc.shard, Wait, 0, 0) })
		if err != nil {
			return err
		}
		sc.unlock = unlock
	}
	return nil
}

// unlockAll releases, and removes, the locks lockAll took.
func (s *stager) unlockAll() {
	for _, sc := range s.shards {
		if sc.unlock != nil {
			sc.unlock()
			sc.unlock = nil
		}
	}
}

// lockFile takes an exclusive flock on the file name (created if
// missing), waiting while another process holds it, until stop is
// closed; waiting is called once if it has to wait. unlock removes the
// file and releases the lock: a stage leaves no lock behind. A lock taken
// on a file its holder removed meanwhile is taken again on the file now
// at name. The lock goes through the operating system whatever the
// configured FS.
func lockFile(name string, stop <-chan struct{}, waiting func()) (unlock func(), err error) {
	for waited := false; ; {
		f, err := chunk.CreateFile(name, os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("stage: lock: %w", err)
		}
		if err := flockWait(f, stop, func() {
			if !waited {
				waited = true
				waiting()
			}
		}); err != nil {
			_ = f.Close()
			return nil, err
		}
		if sameFile(f, name) {
			return func() { _ = os.Remove(name); _ = f.Close() }, nil
		}
		_ = f.Close()
	}
}

// sameFile says whether the open file f is still the file at name.
func sameFile(f *os.File, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(name)
	return err == nil && os.SameFile(a, b)
}

// flockWait takes an exclusive flock on f, calling waiting each time it
// finds it held, until stop is closed.
func flockWait(f *os.File, stop <-chan struct{}, waiting func()) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("stage: lock %s: %w", f.Name(), err)
		}
		waiting()
		select {
		case <-stop:
			return ErrInterrupted
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeLeftovers removes what stages of this copy that crashed left in
// the local directory: temporary directories, and copies being retired.
// The lock makes sure that no live stage is using them.
func (sc *shardCopy) removeLeftovers() error {
	fsys, local := sc.st.cfg.FS, sc.st.cfg.Local
	entries, err := fsys.ReadDir(local)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "."+sc.name+".tmp-") && !strings.HasPrefix(n, "."+sc.name+".old-") {
			continue
		}
		if err := fsys.RemoveAll(filepath.Join(local, n)); err != nil {
			return fmt.Errorf("stage: remove %s, left by an earlier stage: %w", filepath.Join(local, n), err)
		}
	}
	return nil
}

// retire removes the copy that is not reused, if any: renamed first, so
// that a crash halfway through the removal leaves nothing with the
// copy's name.
func (sc *shardCopy) retire() error {
	fsys := sc.st.cfg.FS
	if _, err := fsys.Lstat(sc.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old := filepath.Join(sc.st.cfg.Local, fmt.Sprintf(".%s.old-%d", sc.name, os.Getpid()))
	if err := fsys.Rename(sc.dir, old); err != nil {
		return fmt.Errorf("stage: set aside the copy of shard %d that is not reused: %w", sc.shard, err)
	}
	if err := fsys.RemoveAll(old); err != nil {
		return fmt.Errorf("stage: remove the copy of shard %d that is not reused, %s: %w", sc.shard, old, err)
	}
	return nil
}
