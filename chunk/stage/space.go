package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
)

// blockSlack is what each file or directory may take beyond its size,
// in its last block.
const blockSlack = 4096

// need returns the bytes the copies of todo take in the local directory:
// each copy's size, and a block per file (its chunk files, index,
// manifest and marker) and directory (the copy and its shard directory)
// for their last blocks.
func (s *stager) need(todo []*shardCopy) int64 {
	var n int64
	for _, sc := range todo {
		files := int64(s.man.Shards[sc.shard].Chunks) + 3 + 2
		n += copySize(s.man, sc.shard, int64(len(s.data))) + files*blockSlack
	}
	return n
}

// reservation holds room in the local directory for what a stage is
// about to copy: a file (.NAME.space-PID) of that many bytes allocated
// (fallocate(2)) before the first copy, which gives back what each write
// of the stage takes as it takes it. Other stages into the directory
// (other ranks of the node) then find only the room that is left, and
// cannot take what this stage will write. The file is locked (flock) as
// long as its stage lives; one found unlocked is a dead stage's, and is
// removed. On a file system that cannot allocate ahead, the reservation
// holds nothing.
type reservation struct {
	f    *os.File // nil: nothing held
	name string
	mu   sync.Mutex
	left int64 // bytes held
	// need and free are what the stage needed and found free, for
	// messages.
	need, free int64
	shards     []int
}

// reserve checks that the local directory has room for todo and holds it
// (see reservation), under a lock on the directory, so that stages
// into it check one at a time; it refuses, with the totals, when it has
// not.
func (s *stager) reserve(todo []*shardCopy) (*reservation, error) {
	r := &reservation{need: s.need(todo)}
	for _, sc := range todo {
		r.shards = append(r.shards, sc.shard)
	}
	unlock, err := lockDir(s.cfg.Local, s.cfg.Stop)
	if err != nil {
		return nil, err
	}
	defer unlock()
	others, err := s.othersHold()
	if err != nil {
		return nil, err
	}
	if r.free, err = s.cfg.FreeSpace(s.cfg.Local); err != nil {
		return nil, fmt.Errorf("stage: free space in %s: %w", s.cfg.Local, err)
	}
	if r.need > r.free {
		return nil, s.noRoom(r, others)
	}
	if err := r.hold(filepath.Join(s.cfg.Local, fmt.Sprintf(".%s.space-%d", datasetName(s.cfg.Source), os.Getpid()))); err != nil {
		if isFull(err) {
			r.free, _ = s.cfg.FreeSpace(s.cfg.Local)
			return nil, s.noRoom(r, others)
		}
		return nil, err
	}
	return r, nil
}

// noRoom is the refusal of a stage that r does not fit.
func (s *stager) noRoom(r *reservation, others int64) error {
	them := "them"
	if len(r.shards) == 1 {
		them = "it"
	}
	held := ""
	if others > 0 {
		held = fmt.Sprintf(" (%s more are set aside for other stages copying there)", humanize.IBytes(uint64(others)))
	}
	return fmt.Errorf("stage: not enough space in %s for %s of %s: copying %s needs %s, %s are free%s; nothing was written",
		s.cfg.Local, shardList(r.shards), s.cfg.Source, them, humanize.IBytes(uint64(r.need)), humanize.IBytes(uint64(max(r.free, 0))), held)
}

// hold creates the reservation's file, locks it and allocates it.
func (r *reservation) hold(name string) error {
	f, err := chunk.CreateFile(name, os.O_RDWR|os.O_EXCL)
	if err != nil {
		return fmt.Errorf("stage: reserve space: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = os.Remove(name)
		_ = f.Close()
		return fmt.Errorf("stage: lock %s: %w", name, err)
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, r.need)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		_ = os.Remove(name)
		_ = f.Close()
		return nil // the file system cannot hold room ahead: the check alone
	}
	if err != nil {
		_ = os.Remove(name)
		_ = f.Close()
		return fmt.Errorf("stage: reserve %s in %s: %w", humanize.IBytes(uint64(r.need)), filepath.Dir(name), err)
	}
	r.f, r.name, r.left = f, name, r.need
	return nil
}

// use gives back n bytes of the reservation, about to be written.
func (r *reservation) use(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || n <= 0 {
		return
	}
	r.left = max(r.left-n, 0)
	_ = r.f.Truncate(r.left)
}

// release removes what the reservation still holds.
func (r *reservation) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		_ = os.Remove(r.name)
		_ = r.f.Close()
		r.f = nil
	}
}

// create creates name in the copy through a file whose writes take
// their room from the reservation.
func (s *stager) create(name string) (chunk.File, error) {
	f, err := s.cfg.FS.Create(name)
	if err != nil || s.space == nil {
		return f, err
	}
	return &reservedFile{File: f, r: s.space}, nil
}

// reservedFile gives back to its reservation the blocks each write adds
// to the file.
type reservedFile struct {
	chunk.File
	r    *reservation
	size int64
}

func (f *reservedFile) Write(p []byte) (int, error) {
	f.r.use(blocks(f.size+int64(len(p))) - blocks(f.size))
	n, err := f.File.Write(p)
	f.size += int64(n)
	return n, err
}

// blocks is n rounded up to whole blocks.
func blocks(n int64) int64 { return (n + blockSlack - 1) / blockSlack * blockSlack }

// othersHold returns the bytes the reservations of other stages in
// progress in the local directory hold, and removes those of stages that
// died.
func (s *stager) othersHold() (int64, error) {
	entries, err := os.ReadDir(s.cfg.Local)
	if err != nil {
		return 0, fmt.Errorf("stage: %w", err)
	}
	var held int64
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, ".space-") {
			held += holds(filepath.Join(s.cfg.Local, n))
		}
	}
	return held, nil
}

// holds returns the bytes the reservation in the file name holds, or
// removes it, and returns 0, when no stage holds its lock.
func holds(name string) int64 {
	f, err := os.Open(name)
	if err != nil {
		return 0
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		_ = os.Remove(name) // its stage died
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// lockDir takes an exclusive flock on the directory dir itself (no file
// is made for it), waiting while another stage holds it, until stop is
// closed.
func lockDir(dir string, stop <-chan struct{}) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("stage: lock %s: %w", dir, err)
	}
	if err := flockWait(f, stop, func() {}); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// isFull says whether err is a file system that is full, or a quota that
// is.
func isFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFull is the error of a stage whose local directory filled up while
// it copied sc (todo all it copies), err: the room it checked was taken
// by someone else, or the file system needs more than it counted.
func (s *stager) diskFull(sc *shardCopy, err error) error {
	r := s.space
	return fmt.Errorf("stage: %s filled up while copying shard %d of %s: copying %s needs %s, %s were free when it began; removed what it copied: %w",
		s.cfg.Local, sc.shard, s.cfg.Source, shardList(r.shards), humanize.IBytes(uint64(r.need)), humanize.IBytes(uint64(max(r.free, 0))), err)
}

// statfsFree returns the bytes unprivileged users may still write in dir.
func statfsFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
