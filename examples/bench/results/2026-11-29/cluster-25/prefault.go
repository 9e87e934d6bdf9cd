//go:build ignore

// Command prefault measures what filling new shared memory costs, page
// by page against in one call (BENCHMARKS.md, "3 nodes at a quarter,
// today's build"): go run prefault.go.
package main

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func cpu() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func main() {
	const size = 256 << 20
	for _, mode := range []string{"touch", "fallocate+touch", "populate", "touch", "fallocate+touch", "populate"} {
		f, _ := os.CreateTemp("/dev/shm", "pf-")
		os.Remove(f.Name())
		f.Truncate(size)
		c0, t0 := cpu(), time.Now()
		if mode == "fallocate+touch" {
			if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
				panic(err)
			}
		}
		b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			panic(err)
		}
		if mode == "populate" {
			if err := unix.Madvise(b, 23); err != nil { // MADV_POPULATE_WRITE
				panic(err)
			}
		}
		for i := 0; i < size; i += 4096 {
			b[i] = 1
		}
		d, w := cpu()-c0, time.Since(t0)
		fmt.Printf("%-16s cpu %6.0f ms wall %6.0f ms: %.0f µs per MB\n", mode, d.Seconds()*1e3, w.Seconds()*1e3, d.Seconds()*1e6/256)
		unix.Munmap(b)
		f.Close()
	}
}
