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

// memfd returns a new anonymous shared-memory file.
func memfd(name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	const sysMemfdCreate, mfdCloexec = 319, 1
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec, 0)
	if errno != 0 {
		return -1, fmt.Errorf("shm: memfd_create: %w", errno)
	}
	return int(fd), nil
}
