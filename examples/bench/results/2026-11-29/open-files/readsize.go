//go:build ignore

package main

// go run readsize.go MODE ARG LO HI
//   files  IOV  : chunk files [LO,HI) of DIR=$CHUNKS, open, O_DIRECT read (IOV=1: one buffer; IOV=64: preadv into 64 unaligned buffers), close
//   concat SIZE : $CONCAT bytes [LO*512K, HI*512K), O_DIRECT preads of SIZE bytes
// Prints wall time and CPU seconds of nasproxy, sshfs, sftp-server and the whole machine.
import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func procCPU() map[string]float64 {
	out := map[string]float64{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		comm := s[strings.Index(s, "(")+1 : strings.LastIndex(s, ")")]
		f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		out[e.Name()+"/"+comm] = (u + k) / 100
	}
	return out
}

func machine() float64 {
	b, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
	t := 0.0
	for i, x := range f {
		v, _ := strconv.ParseFloat(x, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		t += v
	}
	return t / 100
}

func main() {
	mode, arg := os.Args[1], os.Args[2]
	lo, _ := strconv.Atoi(os.Args[3])
	hi, _ := strconv.Atoi(os.Args[4])
	n, _ := strconv.Atoi(arg)
	arena, _ := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
	var keptFds []int
	if mode == "kept" {
		names, _ := filepath.Glob(filepath.Join(os.Getenv("CHUNKS"), "chunk-*.brc"))
		sort.Strings(names)
		for _, name := range names[lo:hi] {
			fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
			if err != nil {
				panic(err)
			}
			keptFds = append(keptFds, fd)
		}
	}
	p0, m0, t0 := procCPU(), machine(), time.Now()
	total := 0
	switch mode {
	case "files":
		names, _ := filepath.Glob(filepath.Join(os.Getenv("CHUNKS"), "chunk-*.brc"))
		sort.Strings(names)
		for _, name := range names[lo:hi] {
			fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
			if err != nil {
				panic(err)
			}
			var st syscall.Stat_t
			syscall.Fstat(fd, &st)
			sz := int(st.Size)
			if n <= 1 {
				k, err := syscall.Pread(fd, arena[:(sz+4095)&^4095], 0)
				if err != nil {
					panic(err)
				}
				total += k
			} else {
				// n buffers at odd places, each sz/n bytes (the last the rest)
				iov := make([]syscall.Iovec, n)
				off := 17
				per := sz / n
				for i := range iov {
					l := per
					if i == n-1 {
						l = sz - per*(n-1)
					}
					iov[i].Base = &arena[off]
					iov[i].SetLen(l)
					off += l + 40
				}
				for done := 0; done < sz; {
					r, _, e := syscall.Syscall6(syscall.SYS_PREADV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), uintptr(done), 0, 0)
					if e != 0 {
						panic(e)
					}
					if r == 0 {
						break
					}
					done += int(r)
					total += int(r)
					// drop what was read (simple: reads here are whole)
					if done < sz {
						panic("short preadv")
					}
				}
			}
			if os.Getenv("LEAVE_OPEN") == "" { // LEAVE_OPEN=1: read as before, leave it open
				syscall.Close(fd)
			}
		}
	case "kept":
		for _, fd := range keptFds {
			k, err := syscall.Pread(fd, arena[:1<<20], 0) // the size is in the index: no fstat

			if err != nil {
				panic(err)
			}
			total += k
		}
	case "concatrand":
		fd, err := syscall.Open(os.Getenv("CONCAT"), syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
		if err != nil {
			panic(err)
		}
		perm := rand.New(rand.NewSource(1)).Perm(hi - lo)
		for _, i := range perm {
			for j := 0; j < n; j += 512 << 10 {
				k, err := syscall.Pread(fd, arena[:512<<10], int64((lo+i)*512<<10+j))
				if err != nil {
					panic(err)
				}
				total += k
			}
		}
		syscall.Close(fd)
	case "concat":
		fd, err := syscall.Open(os.Getenv("CONCAT"), syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
		if err != nil {
			panic(err)
		}
		for off := lo * 512 << 10; off < hi*512<<10; off += n {
			k, err := syscall.Pread(fd, arena[:n], int64(off))
			if err != nil {
				panic(err)
			}
			total += k
		}
		syscall.Close(fd)
	}
	d := time.Since(t0)
	p1, m1 := procCPU(), machine()
	by := map[string]float64{}
	for k, v := range p1 {
		comm := k[strings.Index(k, "/")+1:]
		by[comm] += v - p0[k]
	}
	fmt.Printf("%-6s %8s %6.1f MB %5.2f s %4.0f MB/s | machine %5.2f  nasproxy %5.2f sshfs %5.2f sftp-server %5.2f ksoftirqd %5.2f self %5.2f\n",
		mode, arg, float64(total)/1e6, d.Seconds(), float64(total)/1e6/d.Seconds(), m1-m0,
		by["nasproxy"], by["sshfs"], by["sftp-server"], by["ksoftirqd/0"]+by["ksoftirqd/1"], by["readsize"])
}
