package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
)

// lock takes an exclusive flock on the file name (created if missing),
// waiting while another process holds it, until stop is closed; waiting
// is called once if it has to wait. The lock goes through the operating
// system whatever the configured FS.
func lock(name string, stop <-chan struct{}, waiting func()) (unlock func(), err error) {
	f, err := chunk.CreateFile(name, os.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("stage: lock: %w", err)
	}
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("stage: lock %s: %w", name, err)
		}
		if !waited {
			waiting()
		}
		select {
		case <-stop:
			_ = f.Close()
			return nil, ErrInterrupted
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeLeftovers removes what stages of this copy that crashed left in
// the local directory: temporary directories, and copies being retired.
// The lock makes sure that no live stage is using them.
func (s *stager) removeLeftovers() error {
	entries, err := s.cfg.FS.ReadDir(s.cfg.Local)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "."+s.name+".tmp-") && !strings.HasPrefix(n, "."+s.name+".old-") {
			continue
		}
		if err := s.cfg.FS.RemoveAll(filepath.Join(s.cfg.Local, n)); err != nil {
			return fmt.Errorf("stage: remove %s, left by an earlier stage: %w", filepath.Join(s.cfg.Local, n), err)
		}
	}
	return nil
}

// retire removes the copy that is not reused, if any: renamed first, so
// that a crash halfway through the removal leaves nothing with the
// copy's name.
func (s *stager) retire() error {
	if _, err := s.cfg.FS.Lstat(s.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old := filepath.Join(s.cfg.Local, fmt.Sprintf(".%s.old-%d", s.name, os.Getpid()))
	if err := s.cfg.FS.Rename(s.dir, old); err != nil {
		return fmt.Errorf("stage: set aside the copy that is not reused: %w", err)
	}
	if err := s.cfg.FS.RemoveAll(old); err != nil {
		return fmt.Errorf("stage: remove the copy that is not reused, %s: %w", old, err)
	}
	return nil
}

// blockSlack is what each file may take beyond its size, in its last
// block.
const blockSlack = 4096

// checkSpace refuses a copy that the local directory has no room for.
func (s *stager) checkSpace(m *chunk.Manifest, manifest int64) error {
	files := int64(m.Shards[s.cfg.Rank].Chunks) + 3 // the index, the manifest and the marker
	need := copySize(m, s.cfg.Rank, manifest) + files*blockSlack
	free, err := s.cfg.FreeSpace(s.cfg.Local)
	if err != nil {
		return fmt.Errorf("stage: free space in %s: %w", s.cfg.Local, err)
	}
	if need > free {
		return fmt.Errorf("stage: not enough space in %s for rank %d of %s: the copy needs %s, %s are free",
			s.cfg.Local, s.cfg.Rank, s.cfg.Source, humanize.IBytes(uint64(need)), humanize.IBytes(uint64(max(free, 0))))
	}
	return nil
}

// statfsFree returns the bytes unprivileged users may still write in dir.
func statfsFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
