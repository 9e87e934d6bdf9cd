package shm

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// strictLoop answers every request as fakeLoop does, but never waits on
// a reply channel, as the rank's loop must not: it counts the answers it
// could not hand over.
func strictLoop(reqs <-chan rt.ClientEvent, blocked *int, mu *sync.Mutex) {
	for ev := range reqs {
		r, ok := ev.(rt.Ask)
		if !ok {
			continue
		}
		data := content(r.Sn)
		select {
		case r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(1000 + r.Sn), Label: r.Sn % 7, Data: data, CRC: chunk.Checksum(data)}:
		default:
			mu.Lock()
			*blocked++
			mu.Unlock()
		}
	}
}

// TestClientThatDoesNotRead: a client that asks and never reads gets at
// most twice its slots taken and its slots more waiting in its ring;
// then Request says it must read first. The loop never finds its reply
// channel full, another client reads 2,000 files meanwhile, the rank
// names the one that does not read, and counts it out of its readers
// until it reads again.
func TestClientThatDoesNotRead(t *testing.T) {
	const slots = 8
	var mu sync.Mutex
	blocked := 0
	reqs := make(chan rt.ClientEvent, 64)
	go strictLoop(reqs, &blocked, &mu)
	log := new(testkit.Log)
	s, err := Listen(t.TempDir(), 0, Options{Slots: slots, Data: 1 << 20, Events: reqs, StallWarn: time.Second, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); close(reqs) })
	staller, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer staller.Close()
	asked := make(chan error, 1)
	go func() {
		for sn := range int32(10000) {
			if err := staller.Request(1, sn%20); err != nil {
				asked <- err
				return
			}
		}
		asked <- nil
	}()
	select {
	case err := <-asked:
		if !errors.Is(err, ErrReadFirst) || staller.asked != (unreadSlots+1)*slots {
			t.Fatalf("after %d requests: %v", staller.asked, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Request neither took the staller's requests nor said to read first within 20 s")
	}
	if err := readAll(s.Dir(), 0, 1, 2000, slots); err != nil {
		t.Fatalf("the client that reads: %v", err)
	}
	mu.Lock()
	if blocked > 0 {
		t.Fatalf("the loop found a reply channel full %d times", blocked)
	}
	mu.Unlock()
	time.Sleep(stallGrace + 200*time.Millisecond)
	c := s.Clients()
	if c.Attached != 1 || c.Reading != 0 || !strings.Contains(c.Stalled, "client 1,") || c.Since.IsZero() {
		t.Fatalf("with the staller alone attached: %+v", c)
	}
	if want := "has not read the 16 files"; !strings.Contains(log.String(), want) {
		t.Fatalf("no %q in the log:\n%s", want, log)
	}
	rec, err := staller.Next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	staller.Release(rec)
	if c := s.Clients(); c.Reading != 1 || c.Stalled != "" || !c.Since.IsZero() {
		t.Fatalf("once the staller read again: %+v", c)
	}
}

// TestAnsweredWithinTheRing: a client that asks for many files in the
// arena and reads none is answered at most its data ring's bytes of
// them, each read taken counted as the largest file (Options.Largest)
// until it is answered, however fast the loop answers; as it reads, the
// rest come. (Counting only the answered ones, the rank took all 8 at
// once and lent 128 KiB.)
func TestAnsweredWithinTheRing(t *testing.T) {
	const slots, largest, data = 8, 16 << 10, 64 << 10
	a, err := NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() }) // after the server's, which frees what it lent
	reqs := make(chan rt.ClientEvent, 64)
	go func() {
		for ev := range reqs {
			if r, ok := ev.(rt.Ask); ok {
				b, err := a.Alloc(largest)
				if err != nil {
					panic(err)
				}
				r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(r.Sn), Data: b, CRC: chunk.Checksum(b), Holder: releaseFunc(func() { a.Free(b) })}
			}
		}
	}()
	s, err := Listen(t.TempDir(), 0, Options{Slots: slots, Data: data, Events: reqs, Arena: a, Largest: largest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); close(reqs) })
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = slots // the request ring's room
	for sn := range int32(n) {
		if err := c.Request(1, sn); err != nil {
			t.Fatal(err)
		}
	}
	answered := func() (recs int, held uint64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, cl := range s.clients {
			r, b := cl.unread.release(cl.ring.released(), time.Now())
			recs, held = recs+r, held+b
		}
		return recs, held
	}
	// the ring's worth comes at once; then wait a while for more
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if recs, _ := answered(); recs >= data/largest {
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	if recs, held := answered(); held > data || recs != data/largest {
		t.Fatalf("a client that reads nothing was answered %d files, %d bytes; want %d, its ring's %d bytes", recs, held, data/largest, data)
	}
	for range n {
		rec, err := c.Next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Release(rec)
	}
}
