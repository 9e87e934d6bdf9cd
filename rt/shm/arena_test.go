package shm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// TestArenaLendsAndMerges: random allocations and frees never overlap,
// stay inside the arena until it is full, overflow into anonymous memory
// after, and once all is freed the free list is one extent again. Small
// buffers take slots in shared pages, others pages of their own.
func TestArenaLendsAndMerges(t *testing.T) {
	a, err := NewArena(32 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var held [][]byte
	const unit = 16                      // the smallest slot
	owner := make([]bool, a.Size()/unit) // lent or not, by unit
	mark := func(b []byte, to bool, step int) {
		off, ok := a.Offset(b)
		if !ok {
			return
		}
		for u := off / unit; u < (off+uint64(len(b)))/unit; u++ {
			if to && owner[u] {
				t.Fatalf("step %d: byte %d lent twice", step, u*unit)
			}
			owner[u] = to
		}
	}
	for step := range 6000 {
		if len(held) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			mark(held[i], false, step)
			a.Free(held[i])
			held = slices.Delete(held, i, i+1)
			continue
		}
		n := int64(1 + rng.IntN(3<<20))
		switch rng.IntN(3) {
		case 0:
			n = int64(1 + rng.IntN(slabMax)) // small files
		case 1:
			n = int64(1+rng.IntN(16)) * arenaGrain // whole pages
		}
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		pages := n >= slabMax || n%arenaGrain == 0
		// a file's place costs at most an eighth more than its bytes
		// and a page (a slot: a sixteenth and 15 bytes); a chunk's (2
		// MiB on), a MiB for the page
		most := n + n/8 + arenaGrain
		switch {
		case !pages:
			most = n + n/16 + 15
		case n >= 2<<20:
			most += 1 << 20
		}
		if int64(len(b)) < n || int64(len(b)) > most || (pages && len(b)%arenaGrain != 0) {
			t.Fatalf("step %d: asked %d bytes, got %d (at most %d)", step, n, len(b), most)
		}
		if off, ok := a.Offset(b); ok {
			if pages && off%arenaGrain != 0 {
				t.Fatalf("step %d: %d bytes at offset %d, not on a page", step, n, off)
			}
			mark(b, true, step)
			b[0], b[len(b)-1] = 1, 2 // the pages are writable
		} else {
			b[len(b)-1] = 3 // overflow: anonymous memory
		}
		held = append(held, b)
	}
	if a.Overflows.Load() == 0 {
		t.Error("6000 allocations of up to 3 MiB never filled a 32 MiB arena")
	}
	for _, b := range held {
		a.Free(b)
	}
	if len(a.free) != 1 || a.free[0] != (extent{0, a.Size()}) || a.lent != 0 || len(a.slabOf) != 0 {
		t.Fatalf("after freeing everything: free list %v, %d bytes lent, %d pages in slabs", a.free, a.lent, len(a.slabOf))
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
	reqs := make(chan rt.ClientEvent, 8)
	released := make(chan int32, 8)
	go func() {
		for ev := range reqs {
			r, ok := ev.(rt.Ask)
			if !ok {
				continue
			}
			data := content(r.Sn + 1)
			b, err := a.Alloc(int64(len(data)))
			if err != nil {
				panic(err)
			}
			copy(b, data)
			sn := r.Sn
			r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(1000 + r.Sn), Data: b[:len(data)], CRC: chunk.Checksum(data),
				Holder: releaseFunc(func() { a.Free(b); released <- sn })}
		}
	}()
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: reqs, Arena: a})
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

// TestArenaReusesPages: with every lent page written, the pages the
// memfd holds (as the kernel counts them) never exceed Resident, and
// Resident stays within an eighth (and two chunks) of the most lent at
// once, whatever the order of allocations and frees, files and chunks
// mixed; the books of fresh and kept pages agree with the free list
// after every step. Freed, nothing goes back (the seal forbids it), and
// the same work again lends no new page.
func TestArenaReusesPages(t *testing.T) {
	a, err := NewArena(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var lent, peak uint64
	play := func(seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 4))
		var held [][]byte
		for step := range 4000 {
			if len(held) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(held))
				if _, ok := a.Offset(held[i]); ok {
					lent -= uint64(len(held[i]))
				}
				a.Free(held[i])
				held = slices.Delete(held, i, i+1)
			} else {
				n := 1 + rng.IntN(200<<10) // files
				if rng.IntN(8) == 0 {
					n = 1 + rng.IntN(4<<20) // chunks
				}
				b, err := a.Alloc(int64(n))
				if err != nil {
					t.Fatal(err)
				}
				for p := 0; p < len(b); p += 4096 {
					b[p] = 1 // every page resident
				}
				if _, ok := a.Offset(b); ok {
					lent += uint64(len(b))
				}
				held = append(held, b)
			}
			peak = max(peak, lent)
			if a.lent != lent || a.PeakLent() != peak {
				t.Fatalf("step %d: the arena says %d bytes lent, at most %d; the test counts %d, at most %d", step, a.lent, a.PeakLent(), lent, peak)
			}
			checkArenaBooks(t, a, step)
			if got, r := memfdBytes(t, a), a.Resident(); got > r || r > peak+peak/8+8<<20 {
				t.Fatalf("step %d: the memfd holds %d bytes, Resident %d; the most lent at once %d", step, got, r, peak)
			}
		}
		for _, b := range held {
			a.Free(b)
		}
		lent = 0
	}
	play(3)
	r := a.Resident()
	t.Logf("resident %d MiB for at most %d MiB lent at once", r>>20, peak>>20)
	play(3)
	if a.Resident() != r {
		t.Errorf("the same allocations again: resident %d bytes, was %d", a.Resident(), r)
	}
}

// checkArenaBooks: the free list, the fresh and the kept pages are sorted
// and merged; the kept pages are exactly the free ones that are not
// fresh, and every fresh page is free.
func checkArenaBooks(t *testing.T, a *Arena, step int) {
	t.Helper()
	for _, xs := range [][]extent{a.free, a.fresh, a.keep} {
		for i := 1; i < len(xs); i++ {
			if xs[i-1].off+xs[i-1].n >= xs[i].off {
				t.Fatalf("step %d: extents not sorted and merged: %v", step, xs)
			}
		}
	}
	var want []extent
	var freeBytes, unused uint64
	for _, e := range a.free {
		freeBytes += e.n
		for _, k := range minus(e, a.fresh) {
			want = merge(want, k)
		}
	}
	for _, f := range a.fresh {
		unused += f.n
		if len(minus(f, a.free)) > 0 {
			t.Fatalf("step %d: fresh extent %v is lent", step, f)
		}
	}
	if unused != a.unused || unused > freeBytes {
		t.Fatalf("step %d: fresh %d bytes, booked %d; free %d", step, unused, a.unused, freeBytes)
	}
	if !slices.Equal(want, a.keep) {
		t.Fatalf("step %d: kept %v, want %v", step, a.keep, want)
	}
}

// memfdBytes is the memory the kernel holds for the arena's memfd.
func memfdBytes(t *testing.T, a *Arena) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(a.fd, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

// TestArenaSmallFilesSharePages: files of 61 bytes take 64 each in shared
// pages, not a page each; a file freed leaves its slot to the next, and
// the pages go back with their last file.
func TestArenaSmallFilesSharePages(t *testing.T) {
	if !rt.Handable(slabMax) || rt.Handable(slabMax-1) || !rt.Handable(arenaGrain) {
		t.Fatalf("rt.Handable and the arena disagree on the files with pages of their own (from %d bytes, and whole pages)", slabMax)
	}
	a, err := NewArena(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const files = 10000
	held := make([][]byte, files)
	for i := range held {
		if held[i], err = a.Alloc(61); err != nil {
			t.Fatal(err)
		}
		copy(held[i], fmt.Sprintf("file %d", i))
	}
	if r := a.Resident(); r > files*64+arenaGrain {
		t.Fatalf("%d files of 61 bytes: %d bytes of pages, want at most %d", files, r, files*64+arenaGrain)
	}
	for i := 0; i < files; i += 2 { // every other one goes, and comes back
		a.Free(held[i])
		if held[i], err = a.Alloc(61); err != nil {
			t.Fatal(err)
		}
		copy(held[i], fmt.Sprintf("file %d", i))
	}
	if r := a.Resident(); r > files*64+arenaGrain {
		t.Fatalf("freed and lent again: %d bytes of pages, want at most %d", r, files*64+arenaGrain)
	}
	for i, b := range held {
		if want := fmt.Sprintf("file %d", i); string(b[:len(want)]) != want {
			t.Fatalf("file %d holds %q: another's slot overlapped it", i, b[:len(want)])
		}
		a.Free(b)
	}
	if a.lent != 0 || len(a.slabOf) != 0 || len(a.free) != 1 {
		t.Fatalf("all freed: %d bytes lent, %d pages in slabs, free list %v", a.lent, len(a.slabOf), a.free)
	}
}
