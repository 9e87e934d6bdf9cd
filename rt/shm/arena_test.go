package shm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// TestArenaLendsAndMerges: random allocations and frees never overlap,
// stay inside the arena until it is full, overflow into anonymous memory
// after, and once all is freed the free list is one extent again.
func TestArenaLendsAndMerges(t *testing.T) {
	a, err := NewArena(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var held [][]byte
	owner := make([]int, a.Size()/arenaGrain) // grain -> 1 + index into held, 0 free
	for step := range 4000 {
		if len(held) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			b := held[i]
			if off, ok := a.Offset(b); ok {
				for g := off / arenaGrain; g < (off+uint64(len(b)))/arenaGrain; g++ {
					owner[g] = 0
				}
			}
			a.Free(b)
			held = slices.Delete(held, i, i+1)
			continue
		}
		n := int64(1 + rng.IntN(3<<20))
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) < n || len(b)%arenaGrain != 0 {
			t.Fatalf("step %d: asked %d bytes, got %d", step, n, len(b))
		}
		if off, ok := a.Offset(b); ok {
			if off%arenaGrain != 0 {
				t.Fatalf("step %d: offset %d not on the grain", step, off)
			}
			for g := off / arenaGrain; g < (off+uint64(len(b)))/arenaGrain; g++ {
				if owner[g] != 0 {
					t.Fatalf("step %d: grain %d lent twice", step, g)
				}
				owner[g] = 1
			}
			b[0], b[len(b)-1] = 1, 2 // the pages are writable
		} else {
			b[len(b)-1] = 3 // overflow: anonymous memory
		}
		held = append(held, b)
	}
	if a.Overflows.Load() == 0 {
		t.Error("4000 allocations of up to 3 MiB never filled a 64 MiB arena")
	}
	for _, b := range held {
		a.Free(b)
	}
	if len(a.free) != 1 || a.free[0] != (extent{0, a.Size()}) {
		t.Fatalf("free list after freeing everything: %v", a.free)
	}
	if _, ok := a.Offset(make([]byte, 10)); ok {
		t.Error("Go memory taken for the arena's")
	}
}

// TestSharedRecords: files that live in the arena reach the client by
// place, with their bytes, and each stays lent until the client releases
// its record; a client that leaves releases what it held.
func TestSharedRecords(t *testing.T) {
	a, err := NewArena(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	reqs := make(chan rt.Request, 8)
	released := make(chan int32, 8)
	go func() {
		for r := range reqs {
			data := content(r.Sn + 1)
			b, err := a.Alloc(int64(len(data)))
			if err != nil {
				panic(err)
			}
			copy(b, data)
			sn := r.Sn
			r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(1000 + r.Sn), Data: b[:len(data)], CRC: chunk.Checksum(data),
				OnRelease: func() { a.Free(b); released <- sn }}
		}
	}()
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Requests: reqs, Arena: a})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); close(reqs) }()
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for sn := range int32(3) {
		c.Request(1, sn)
	}
	var recs []Record
	for range 3 {
		rec, err := c.Next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Kind != RecShared || !bytes.Equal(rec.Data, content(rec.Sn+1)) || rec.CRC != chunk.Checksum(rec.Data) {
			t.Fatalf("record %+v (%d bytes)", rec, len(rec.Data))
		}
		recs = append(recs, rec)
	}
	select {
	case sn := <-released:
		t.Fatalf("position %d released before the client was done with it", sn)
	case <-time.After(300 * time.Millisecond): // the writer looks at least every 100 ms
	}
	c.Release(recs[0])
	select {
	case sn := <-released:
		if sn != recs[0].Sn {
			t.Fatalf("released position %d, the client let go of %d", sn, recs[0].Sn)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a released record's file stayed lent")
	}
	c.Close()
	for range 2 {
		select {
		case <-released:
		case <-time.After(2 * time.Second):
			t.Fatal("a client's files stayed lent after it left")
		}
	}
	if s.Shared.Load() != 3 || s.Copied.Load() != 0 {
		t.Errorf("%d shared and %d copied, want 3 and 0", s.Shared.Load(), s.Copied.Load())
	}
}
