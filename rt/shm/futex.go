package shm

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

const (
	futexWaitOp = 0 // FUTEX_WAIT: shared between processes, so not _PRIVATE
	futexWakeOp = 1
)

// futexWait sleeps while *addr == val, at most d.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	// Syscall6, not RawSyscall: the runtime hands the thread's P on.
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the waiters on addr.
func futexWake(addr *uint32) {
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

// memfd returns a new anonymous shared-memory file, which seal can seal.
func memfd(name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	const sysMemfdCreate, mfdCloexec, mfdAllowSealing = 319, 1, 2
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return -1, fmt.Errorf("shm: memfd_create: %w", errno)
	}
	return int(fd), nil
}

// Seals of a memfd (fcntl F_ADD_SEALS).
const (
	sealSeal   = 0x1 // F_SEAL_SEAL: no more seals
	sealShrink = 0x2 // F_SEAL_SHRINK
	sealGrow   = 0x4 // F_SEAL_GROW
	// sealFutureWrite refuses writable shared mappings and writes made
	// after it, through any descriptor (F_SEAL_FUTURE_WRITE).
	sealFutureWrite = 0x10
	// sealSize fixes a memfd's size for good: a peer that shrank it would
	// make the rank's accesses past the end fault (SIGBUS).
	sealSize = sealShrink | sealGrow | sealSeal
)

// seal adds seals to the memfd fd.
func seal(fd int, seals int) error {
	const fAddSeals = 1033
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fAddSeals, uintptr(seals)); errno != 0 {
		return fmt.Errorf("shm: seal a memfd: %w", errno)
	}
	return nil
}
