package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// rawAttach sends a hello to the rank at dir and returns the connection
// and the descriptors of the welcome: the rings', then the arena's.
func rawAttach(t *testing.T, dir string) (*net.UnixConn, []int) {
	t.Helper()
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, SocketName), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hello := helloMessage(0)
	if _, err := conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	b, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(2*4))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := conn.ReadMsgUnix(b, oob)
	if err != nil || n != welcomeBytes {
		t.Fatalf("welcome: %d bytes, %v", n, err)
	}
	fds := receivedFDs(oob[:oobn])
	t.Cleanup(func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	})
	return conn, fds
}

// TestArenaReadOnlyForClients: the arena's descriptor a client gets maps
// only read-only, and no descriptor of it can resize it, write it or map
// it writable, not even one the client opens again writable through
// /proc/self/fd (which root may); the rank still writes it, and a client
// reads what it wrote.
func TestArenaReadOnlyForClients(t *testing.T) {
	a, s := arenaServer(t)
	_, fds := rawAttach(t, s.Dir())
	if len(fds) != 2 {
		t.Fatalf("%d descriptors", len(fds))
	}
	arena := fds[1]
	if m, err := syscall.Mmap(arena, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); !errors.Is(err, syscall.EACCES) {
		if err == nil {
			syscall.Munmap(m)
		}
		t.Errorf("a writable shared mapping of the arena: %v, want EACCES", err)
	}
	ro, err := syscall.Mmap(arena, 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("a read-only mapping: %v", err)
	}
	defer syscall.Munmap(ro)
	if err := syscall.Ftruncate(arena, 4096); err == nil {
		t.Error("a client truncated the arena")
	}
	rw, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", arena), syscall.O_RDWR, 0)
	if err != nil {
		t.Logf("opening the arena again writable: %v (only root may)", err)
	} else {
		defer syscall.Close(rw)
		if m, err := syscall.Mmap(rw, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); !errors.Is(err, syscall.EPERM) {
			if err == nil {
				m[0] = 'x'
				syscall.Munmap(m)
			}
			t.Errorf("a writable shared mapping through a descriptor opened again O_RDWR: %v, want EPERM", err)
		}
		if _, err := syscall.Pwrite(rw, []byte("x"), 0); !errors.Is(err, syscall.EPERM) {
			t.Errorf("a write through a descriptor opened again O_RDWR: %v, want EPERM", err)
		}
		const keepSize, punchHole = 0x01, 0x02
		if err := syscall.Fallocate(rw, keepSize|punchHole, 0, 4096); !errors.Is(err, syscall.EPERM) {
			t.Errorf("a hole punched through a descriptor opened again O_RDWR: %v, want EPERM", err)
		}
		for _, size := range []int64{4096, 2 << 20} {
			if err := syscall.Ftruncate(rw, size); !errors.Is(err, syscall.EPERM) {
				t.Errorf("resizing the arena to %d bytes through a writable descriptor: %v, want EPERM", size, err)
			}
		}
	}
	b, err := a.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free(b)
	off, _ := a.Offset(b)
	if off != 0 {
		t.Fatalf("the first buffer lent is at %d", off)
	}
	copy(b, "the rank writes")
	if got := string(ro[:15]); got != "the rank writes" {
		t.Errorf("a client reads %q where the rank wrote", got)
	}
}

// TestPythonCannotWriteArena: neither can Python's mmap, through the
// descriptor it got or through one it opens again writable.
func TestPythonCannotWriteArena(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no", py)
	}
	_, s := arenaServer(t)
	script := `
import mmap, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(os.path.join(sys.argv[1], "attach.sock"))
s.sendall(struct.pack("<8sII16s", b"BRTHELLO", int(sys.argv[2]), os.getpid(), sys.argv[3].encode()))
s.settimeout(5)
msg, fds, _, _ = socket.recv_fds(s, 64, 2)
size = struct.unpack_from("<Q", msg, 24)[0]
mmap.mmap(fds[1], size, mmap.MAP_SHARED, mmap.PROT_READ).close()
for fd in (fds[1], os.open("/proc/self/fd/%d" % fds[1], os.O_RDWR)):
    try:
        mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        print("mapped writable")
    except OSError as e:
        print("refused:", e)
`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", script, s.Dir(), fmt.Sprint(version), Release).CombinedOutput()
	if err != nil || string(out) != "refused: [Errno 13] Permission denied\nrefused: [Errno 1] Operation not permitted\n" {
		t.Fatalf("python: %v\n%s", err, out)
	}
}

// TestRingResizeRefused: a client cannot shrink or grow its rings (the
// rank would fault on the missing pages); the rank serves on.
func TestRingResizeRefused(t *testing.T) {
	s, _ := listen(t, 4, 256<<10)
	_, fds := rawAttach(t, s.Dir())
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{0, 4096, st.Size + 4096} {
		if err := syscall.Ftruncate(fds[0], size); !errors.Is(err, syscall.EPERM) {
			syscall.Ftruncate(fds[0], st.Size) // before the rank touches what is gone
			t.Fatalf("resizing the rings to %d bytes: %v, want EPERM", size, err)
		}
	}
	if err := readAll(s.Dir(), 0, 1, 50, 4); err != nil {
		t.Fatal(err)
	}
}

// TestHugeTraceRefused: a trace that claims more file ids than the
// dataset has files is refused before the rank allocates for it, whether
// its file is short or as large (and sparse) as the claim; so is a start
// past any trace.
func TestHugeTraceRefused(t *testing.T) {
	reqs := make(chan rt.ClientEvent)
	traces, starts := make(chan rt.TraceOffer), make(chan rt.StartOffer)
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: reqs, Traces: traces, Starts: starts, MaxTrace: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := offerTrace(t, c, 1, []int32{1, 2, 3}, 1<<28)
	got2 := offerSparseTrace(t, c, 1, 1<<28)
	runtime.ReadMemStats(&after)
	for _, g := range []string{got, got2} {
		if !strings.Contains(g, "a trace of 268435456 file ids, but this rank's dataset has 1000 files") {
			t.Errorf("a trace of 2^28 ids: verdict %q", g)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("the rank allocated %d MiB for traces it refused", grew>>20)
	}
	if got := offerStart(t, c, 1, 1<<30); !strings.Contains(got, "position 1073741824, past any trace of this dataset (1000 files)") {
		t.Errorf("a start at 2^30: verdict %q", got)
	}
}

// offerSparseTrace offers a trace of count ids in a sparse memfd of their
// size, and returns the verdict.
func offerSparseTrace(t *testing.T, c *Client, epoch, count uint32) string {
	t.Helper()
	fd, err := memfd("trace")
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Ftruncate(fd, 4*int64(count)); err != nil {
		t.Fatal(err)
	}
	return sendMessage(t, c, traceMessage(epoch, count), fd)
}

// offerStart sends a start message and returns the verdict.
func offerStart(t *testing.T, c *Client, epoch, position uint32) string {
	t.Helper()
	msg := make([]byte, startBytes)
	copy(msg, startMagic)
	binary.LittleEndian.PutUint32(msg[8:], version)
	binary.LittleEndian.PutUint32(msg[12:], epoch)
	binary.LittleEndian.PutUint32(msg[16:], position)
	binary.LittleEndian.PutUint32(msg[20:], 1)
	return sendMessage(t, c, msg, -1)
}

// arenaServer starts a rank's server with an arena of 1 MiB, both closed
// when the test ends.
func arenaServer(t *testing.T) (*Arena, *Server) {
	t.Helper()
	a, err := NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Arena: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return a, s
}
