package shm

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// arenaGrain is the unit the arena lends in: a multiple of the page size,
// as O_DIRECT reads need, and coarse enough that its free list stays
// short with chunks of a few MiB.
const arenaGrain = 64 << 10

// Arena is memory shared with the clients: the rank reads chunks into it
// (it is the chunk.Memory of the rank's shard), and a file that lives in
// it reaches a client as its place in the arena, not as a copy in the
// client's ring. Clients map it read-only.
//
// The arena is one memfd of a fixed size, mapped once; its pages are
// allocated by the kernel when first written, so a large arena costs
// only what is used. Buffers are lent first-fit from a free list, which
// keeps the pages in use near the start. When no extent is large enough
// the arena lends anonymous memory instead, which reaches clients by
// copy as before.
type Arena struct {
	fd  int
	mem []byte

	mu   sync.Mutex
	free []extent // sorted by offset, neighbours merged
	// Overflows counts the buffers lent from outside the arena.
	Overflows atomic.Int64
}

type extent struct{ off, n uint64 }

// NewArena creates an arena of size bytes (rounded up to its grain).
func NewArena(size uint64) (*Arena, error) {
	size = (max(size, 1) + arenaGrain - 1) &^ (arenaGrain - 1)
	fd, err := memfd("brandrt-arena")
	if err != nil {
		return nil, err
	}
	if err := syscall.Ftruncate(fd, int64(size)); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("shm: size an arena of %d bytes: %w", size, err)
	}
	mem, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("shm: map an arena of %d bytes: %w", size, err)
	}
	return &Arena{fd: fd, mem: mem, free: []extent{{0, size}}}, nil
}

// Size returns the arena's size in bytes.
func (a *Arena) Size() uint64 { return uint64(len(a.mem)) }

// Alloc lends at least n bytes, from the arena when an extent is free.
func (a *Arena) Alloc(n int64) ([]byte, error) {
	want := (uint64(max(n, 1)) + arenaGrain - 1) &^ (arenaGrain - 1)
	a.mu.Lock()
	for i, e := range a.free {
		if e.n < want {
			continue
		}
		if e.n == want {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = extent{e.off + want, e.n - want}
		}
		a.mu.Unlock()
		return a.mem[e.off : e.off+want : e.off+want], nil
	}
	a.mu.Unlock()
	a.Overflows.Add(1)
	b, err := syscall.Mmap(-1, 0, int(want), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes: %w", want, err)
	}
	return b, nil
}

// Free takes back a buffer Alloc lent.
func (a *Arena) Free(b []byte) {
	off, ok := a.Offset(b)
	if !ok {
		_ = syscall.Munmap(b)
		return
	}
	e := extent{off, uint64(len(b))}
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.free, e.off, func(x extent, off uint64) int { return cmp.Compare(x.off, off) })
	if i < len(a.free) && e.off+e.n == a.free[i].off { // merge with the next
		e.n += a.free[i].n
		a.free = slices.Delete(a.free, i, i+1)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == e.off { // and the previous
		a.free[i-1].n += e.n
		return
	}
	a.free = slices.Insert(a.free, i, e)
}

// Offset returns where b starts in the arena, and whether it lies wholly
// inside it.
func (a *Arena) Offset(b []byte) (uint64, bool) {
	if len(b) == 0 || len(a.mem) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(a.mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(a.mem)) {
		return 0, false
	}
	return uint64(p - base), true
}

// Close unmaps the arena and closes its memfd. Nothing may use its
// buffers after.
func (a *Arena) Close() error {
	if a.mem == nil {
		return nil
	}
	err := syscall.Munmap(a.mem)
	syscall.Close(a.fd)
	a.mem = nil
	return err
}
