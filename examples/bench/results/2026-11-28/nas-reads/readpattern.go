//go:build ignore

package main

// Reads chunk files [LO, HI) of DIR through a mount, one way, and prints
// the wall time (go run readpattern.go DIR MODE LO HI), MODE one of:
// direct (open, pread the whole file, close, with O_DIRECT, as a rank
// reads a chunk), buffered (the same through the page cache, dropped
// after each file) and preopened (O_DIRECT preads of files opened
// beforehand).
import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

func main() {
	dir, mode := os.Args[1], os.Args[2]
	names, _ := filepath.Glob(filepath.Join(dir, "chunk-*.brc"))
	sort.Strings(names)
	var lo, hi int
	fmt.Sscan(os.Args[3], &lo)
	fmt.Sscan(os.Args[4], &hi)
	names = names[lo:hi]
	buf, _ := syscall.Mmap(-1, 0, 2<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	flags := syscall.O_RDONLY | syscall.O_CLOEXEC
	if mode != "buffered" {
		flags |= syscall.O_DIRECT
	}
	var fds []int
	if mode == "preopened" {
		for _, n := range names {
			fd, err := syscall.Open(n, flags, 0)
			if err != nil {
				panic(err)
			}
			fds = append(fds, fd)
		}
	}
	t := time.Now()
	total := 0
	for i, n := range names {
		var fd int
		if mode == "preopened" {
			fd = fds[i]
		} else {
			var err error
			if fd, err = syscall.Open(n, flags, 0); err != nil {
				panic(err)
			}
		}
		st := syscall.Stat_t{}
		syscall.Fstat(fd, &st)
		sz := int((st.Size + 4095) / 4096 * 4096)
		k, err := syscall.Pread(fd, buf[:sz], 0)
		if err != nil {
			panic(err)
		}
		total += k
		if mode == "buffered" {
			// drop what it brought in, as brandrt does without O_DIRECT
			const fadvDontneed = 4
			syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), 0, 0, fadvDontneed, 0, 0)
		}
		if mode != "preopened" {
			syscall.Close(fd)
		}
	}
	d := time.Since(t)
	fmt.Printf("%-10s %d files %.1f MB in %.2f s: %.0f MB/s, %.2f ms a file\n", mode, len(names), float64(total)/1e6, d.Seconds(), float64(total)/1e6/d.Seconds(), d.Seconds()*1000/float64(len(names)))
}
