package chunk

import (
	"sync"
	"syscall"
)

// kept holds chunk files open between reads, so that a chunk read again
// (each epoch) is not opened again. On a NAS an open is round trips
// (open, fstat, close) that cost the client, the server and the link
// a good part of reading a chunk of 64 small files: through the emulated
// NAS, reading 600 chunk files of 0.5 MB took its client, server and
// link 2.26–2.37 CPU s opened one by one, 1.83–2.29 s kept open, and the
// reader 0.20 s against 0.09 (BENCHMARKS, "Chunk files kept open"). It
// keeps at most room files; a read that failed closes its file, so that
// the next read opens it again (it may have been replaced, or its mount
// come back). Safe for concurrent use: a file is lent to one read at a
// time, and a second read of the same chunk opens its own.
type kept struct {
	mu     sync.Mutex
	room   int
	files  map[keptKey]File
	closed map[*Shard]bool // a read in flight gives its file back closed
}

type keptKey struct {
	s *Shard
	c int
}

func newKept(room int) *kept {
	return &kept{room: room, files: make(map[keptKey]File), closed: make(map[*Shard]bool)}
}

// keepRoom is how many chunk files a process keeps open: half its limit
// of open files (Go raises the soft limit to the hard one at start),
// less 64 for everything else, at most 65,536. A limit of 128 or less
// keeps none.
func keepRoom() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return int(max(0, min(int64(l.Cur/2)-64, 1<<16)))
}

// take returns chunk c's file of s if one is kept, and no longer keeps it.
func (k *kept) take(s *Shard, c int) File {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.files[keptKey{s, c}]
	if ok {
		delete(k.files, keptKey{s, c})
		k.room++
	}
	return f
}

// give keeps f as chunk c's file of s, if there is room and none is kept.
func (k *kept) give(s *Shard, c int, f File) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.files[keptKey{s, c}]; ok || k.room <= 0 || k.closed[s] {
		return false
	}
	k.files[keptKey{s, c}] = f
	k.room--
	return true
}

// close closes the files kept of s, and those of its reads in flight as
// they end.
func (k *kept) close(s *Shard) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed[s] = true
	for key, f := range k.files {
		if key.s == s {
			f.Close()
			delete(k.files, key)
			k.room++
		}
	}
}

// open opens chunk c's file, or takes the one kept open.
func (s *Shard) open(c int) (File, error) {
	if s.keep != nil {
		if f := s.keep.take(s, c); f != nil {
			return f, nil
		}
	}
	return s.fsys.Open(s.path(c), true)
}

// done gives back chunk c's file after a read: kept open for the next
// one where the shard keeps files, closed where it does not, where there
// is no room, or where the read failed.
func (s *Shard) done(c int, f File, failed bool) {
	if s.keep == nil || failed || !s.keep.give(s, c, f) {
		f.Close()
	}
}
