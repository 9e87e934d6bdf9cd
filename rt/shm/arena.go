package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// arenaGrain is the unit the arena lends in: the page, as O_DIRECT reads
// need. The rank takes a buffer per file it keeps, so a finer unit would
// not pay, and a coarser one would waste a part of every file.
const arenaGrain = 4 << 10

// Arena is memory shared with the clients: the rank reads chunks into it
// when they stay there whole (its budget holds its shard; it is then the
// chunk.Memory of the rank's shard), and otherwise copies each file it
// keeps from a chunk into a buffer of its own from it. A file that lives
// in it reaches a client as its place in the arena, not as a copy in the
// client's ring. Clients can only read it (sealArena).
//
// The arena is one memfd of a fixed size, mapped once; its pages are
// allocated by the kernel when first written, so a large arena costs
// only what is used. Buffers are lent from a free list (see Alloc). When
// no extent is large enough the arena lends anonymous memory instead,
// which reaches clients by copy as before.
//
// Freed pages stay with the arena and are lent again first; pages never
// touched are lent only when no freed place fits. The seal that keeps
// clients from writing the arena also keeps the rank from punching holes
// in it, so the arena never gives pages back: what it costs is the most
// it had touched, which with this order of reuse stays within a few MiB
// of the most it lent at once (measured in serve, 1 and 2 ranks, 10 % to
// 50 % memory: 0–3 MiB over).
type Arena struct {
	fd  int
	mem []byte
	// roFD is the arena opened again read-only: what clients get.
	roFD int

	// Sets of extents, each sorted by offset with neighbours merged.
	mu     sync.Mutex
	free   []extent // not lent
	fresh  []extent // never lent: no page of them touched
	keep   []extent // free \ fresh: touched pages, lent first
	unused uint64   // the bytes of fresh
	// lent is the bytes lent now, peakLent the most at once so far.
	lent, peakLent uint64
	// slabOf gives the slab that holds each page it holds (by page
	// number); partial, by slot size, the slabs with a slot free.
	slabOf  map[uint64]*slab
	partial map[uint64][]*slab
	// Overflows counts the buffers lent from outside the arena.
	Overflows atomic.Int64
}

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
	roFD, err := sealArena(fd)
	if err != nil {
		syscall.Munmap(mem)
		syscall.Close(fd)
		return nil, err
	}
	return &Arena{fd: fd, roFD: roFD, mem: mem, free: []extent{{0, size}}, fresh: []extent{{0, size}}, unused: size,
		slabOf: make(map[uint64]*slab), partial: make(map[uint64][]*slab)}, nil
}

// sealArena seals the arena's memfd, once the rank has mapped it
// writable, and returns a read-only descriptor of it for the clients.
// F_SEAL_FUTURE_WRITE refuses every writable shared mapping and write
// made after it, through any descriptor: one a client opens again
// writable through /proc/self/fd (which root may, whatever the mode)
// too, while the rank's own mapping stays writable. The size is sealed,
// so that no descriptor can cut pages from under the rank (SIGBUS).
// The read-only descriptor and mode 0400 refuse a writable mapping
// (EACCES) before the seal does.
func sealArena(fd int) (int, error) {
	if err := seal(fd, sealSize|sealFutureWrite); err != nil {
		return -1, err
	}
	roFD, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", fd), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("shm: open the arena read-only for clients: %w", err)
	}
	if err := syscall.Fchmod(fd, 0o400); err != nil {
		syscall.Close(roFD)
		return -1, fmt.Errorf("shm: arena: %w", err)
	}
	return roFD, nil
}

// Size returns the arena's size in bytes.
func (a *Arena) Size() uint64 { return uint64(len(a.mem)) }

// Alloc lends at least n bytes, from the arena when an extent is free:
// from pages lent before if they have room (no page faults, no new
// memory), else from all free extents. A buffer of less than slabMax
// bytes that is not whole pages (a small file) takes a slot of its size
// in a slab, pages it shares with other files of about its size. Other
// buffers take pages of their own, rounded up to their size class
// (sizeClass), and those of 2 MiB or more (chunks) to a MiB, so that
// they fit one another's places. Small buffers (files) are taken
// best-fit, those of a MiB or more last-fit from the top: the two kinds
// come and go at different rates, and mixed they would cut the large
// kept places into pieces no chunk fits. (Files of 1 to 2 MiB rounded up
// to a MiB took a third more than their bytes.) Buffers of whole pages
// (chunk reads) always start a page, as O_DIRECT needs.
func (a *Arena) Alloc(n int64) ([]byte, error) {
	size := uint64(max(n, 1))
	if slotted(size) {
		a.mu.Lock()
		b, ok := a.slot(slotClass(size))
		a.mu.Unlock()
		if ok {
			return b, nil
		}
		return a.overflow(size)
	}
	want, fit := uint64(a.Placed(n)), bestFit
	if want >= largeBuf {
		fit = lastFit
	}
	a.mu.Lock()
	off, ok := a.takePages(want, fit)
	if ok {
		a.lend(want)
		a.mu.Unlock()
		return a.mem[off : off+want : off+want], nil
	}
	a.mu.Unlock()
	return a.overflow(want)
}

// overflow lends n bytes of anonymous memory: the arena has no room.
func (a *Arena) overflow(n uint64) ([]byte, error) {
	a.Overflows.Add(1)
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	return b, nil
}

// lend counts n bytes more lent, and the most lent at once.
func (a *Arena) lend(n uint64) {
	a.lent += n
	a.peakLent = max(a.peakLent, a.lent)
}

// takePages takes n bytes of pages found by fit: kept pages first, then
// any free ones.
func (a *Arena) takePages(n uint64, fit func([]extent, uint64) (uint64, bool)) (uint64, bool) {
	off, ok := fit(a.keep, n)
	if !ok {
		off, ok = fit(a.free, n)
	}
	if !ok {
		return 0, false
	}
	e := extent{off, n}
	var first uint64 // bytes lent for the first time
	a.free, _ = cut(a.free, e)
	a.keep, _ = cut(a.keep, e)
	a.fresh, first = cut(a.fresh, e)
	a.unused -= first
	return off, true
}

// givePages takes pages back: they are kept, to be lent again first.
func (a *Arena) givePages(e extent) {
	a.free = merge(a.free, e)
	a.keep = merge(a.keep, e)
}

// Free takes back a buffer Alloc lent: its pages are kept, to be lent
// again first; a slot goes back to its slab, whose pages go back with
// its last slot.
func (a *Arena) Free(b []byte) {
	off, ok := a.Offset(b)
	if !ok {
		_ = syscall.Munmap(b)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sl := a.slabOf[off/arenaGrain]; sl != nil {
		a.unslot(sl, off)
		return
	}
	e := extent{off, uint64(len(b))}
	a.givePages(e)
	a.lent -= e.n
}

// largeBuf is the size from which buffers are lent from the top.
const largeBuf = 1 << 20

// Resident returns the bytes of arena pages ever lent: what the arena
// costs in memory, at most. It only grows.
func (a *Arena) Resident() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Size() - a.unused
}

// PeakLent returns the most bytes the arena lent at once so far.
func (a *Arena) PeakLent() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peakLent
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
	syscall.Close(a.roFD)
	a.mem = nil
	return err
}

// Placed is the bytes Alloc lends for n (rt counts the memory its files
// take with it): a slot, or pages rounded up to their size class.
func (a *Arena) Placed(n int64) int64 { return Placed(n) }

// Placed is the bytes an arena lends for n (Arena.Placed): for what
// does not make one, such as brandrt plan's ranks, which count the
// memory serve's would take.
func Placed(n int64) int64 {
	size := uint64(max(n, 1))
	if slotted(size) {
		return int64(slotClass(size))
	}
	want := sizeClass((size + arenaGrain - 1) &^ (arenaGrain - 1))
	if want >= 2*largeBuf {
		want = (want + largeBuf - 1) &^ (largeBuf - 1)
	}
	return int64(want)
}
