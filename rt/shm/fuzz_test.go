package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// FuzzAttachMessages sends a live rank a fuzzed message, as the hello or
// after a proper one (a trace, a start, anything), with or without a
// memfd of fuzzed content; the rank must not allocate much for it, and a
// well-behaved client must still attach and read a file. The rank takes traces and starts (accepting those of
// odd epochs), and its dataset has 1000 files.
func FuzzAttachMessages(f *testing.F) {
	for _, seed := range attachSeeds() {
		f.Add(seed.asHello, seed.msg, seed.withFD, seed.content)
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, asHello bool, msg []byte, withFD bool, content []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := sendFuzzed(s.Dir(), asHello, msg, withFD, content); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > maxFuzzAlloc {
			t.Fatalf("one message made the rank allocate %d MiB", grew>>20)
		}
		if err := readAll(s.Dir(), 7, 1, 9, 2); err != nil {
			t.Fatalf("a well-behaved client after the fuzzed one: %v", err)
		}
	})
}

// maxFuzzAlloc bounds what one message may make the rank allocate: a
// trace of the dataset's 1000 files needs 4 KB.
const maxFuzzAlloc = 64 << 20

type attachSeed struct {
	asHello, withFD bool
	msg, content    []byte
}

// attachSeeds are well-formed and slightly broken messages of each kind.
func attachSeeds() []attachSeed {
	le := binary.LittleEndian
	hello := helloMessage(0)
	ids := make([]byte, 12)
	for i, id := range []uint32{3, 999, 1000} {
		le.PutUint32(ids[4*i:], id)
	}
	start := make([]byte, startBytes)
	copy(start, startMagic)
	le.PutUint32(start[8:], version)
	le.PutUint32(start[12:], 1)
	le.PutUint32(start[16:], 5)
	le.PutUint32(start[20:], 1)
	huge := traceMessage(1, 1<<28)
	badVersion := append([]byte(nil), hello...)
	le.PutUint32(badVersion[8:], version+1)
	return []attachSeed{
		{asHello: true, msg: hello},
		{asHello: true, msg: badVersion},
		{asHello: true, msg: traceMessage(1, 3), withFD: true, content: ids},
		{msg: traceMessage(1, 3), withFD: true, content: ids},
		{msg: traceMessage(2, 3), withFD: true, content: ids},
		{msg: traceMessage(1, 3), withFD: true, content: ids[:8]},
		{msg: traceMessage(1, 3)},
		{msg: huge, withFD: true, content: ids},
		{msg: start},
		{msg: start, withFD: true, content: ids},
		{msg: append(start, 0)},
		{msg: hello},
		{msg: nil},
		{msg: bytes.Repeat([]byte{0xff}, 100)},
	}
}

// fuzzServer starts the rank the fuzzer talks to, for the whole run.
func fuzzServer(f *testing.F) *Server {
	reqs := make(chan rt.ClientEvent, 64)
	traces, starts := make(chan rt.TraceOffer), make(chan rt.StartOffer)
	go fakeLoop(reqs)
	go func() {
		for o := range traces {
			o.Reply <- oddEpoch(o.Epoch)
		}
	}()
	go func() {
		for o := range starts {
			o.Reply <- oddEpoch(o.Place.Epoch)
		}
	}()
	a, err := NewArena(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	s, err := Listen(filepath.Join(f.TempDir(), "local-0"), 0, Options{Slots: 4, Data: 256 << 10, Events: reqs,
		Traces: traces, Starts: starts, Ranks: 1, MaxTrace: 1000, Arena: a, Log: io.Discard})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		s.Close()
		a.Close()
		close(reqs)
		close(traces)
		close(starts)
	})
	return s
}

func oddEpoch(e uint32) error {
	if e%2 == 1 {
		return nil
	}
	return errors.New("even epoch")
}

// sendFuzzed connects to the rank at dir and sends msg, as the hello or
// after one, with a memfd holding content when withFD; it waits briefly
// for an answer and goes.
func sendFuzzed(dir string, asHello bool, msg []byte, withFD bool, content []byte) error {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, SocketName), Net: "unixpacket"})
	if err != nil {
		return err
	}
	defer conn.Close()
	if !asHello {
		if err := greet(conn); err != nil {
			return err
		}
	}
	var oob []byte
	if withFD {
		fd, err := memfd("fuzz")
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		if _, err := syscall.Pwrite(fd, content, 0); len(content) > 0 && err != nil {
			return err
		}
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := conn.WriteMsgUnix(msg, oob, nil); err != nil {
		return nil // the rank may have closed already: a bad hello
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	conn.Read(make([]byte, 8192))
	return nil
}

// greet sends a proper hello on conn and takes the welcome, closing the
// descriptors that come with it.
func greet(conn *net.UnixConn) error {
	hello := helloMessage(0)
	if _, err := conn.Write(hello); err != nil {
		return err
	}
	b, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(2*4))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := conn.ReadMsgUnix(b, oob)
	conn.SetReadDeadline(time.Time{})
	for _, fd := range receivedFDs(oob[:oobn]) {
		syscall.Close(fd)
	}
	if err != nil {
		return err
	}
	if n != welcomeBytes {
		return errors.New("no welcome")
	}
	return nil
}
