package collectives

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// runLocal runs f on n in-process ranks and returns the first error.
func runLocal(n int, f func(c Comm) error) error {
	ls := NewLocal(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(l)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func TestLocalCollectives(t *testing.T) {
	err := runLocal(3, func(c Comm) error {
		r := int64(c.Rank())
		for round := range 5 { // the hub is reused round after round
			sum, err := c.AllreduceSum([]int64{r, int64(round)})
			if err != nil || !slices.Equal(sum, []int64{3, 3 * int64(round)}) {
				return fmt.Errorf("rank %d round %d: sum %v %v", r, round, sum, err)
			}
			mx, err := c.AllreduceMax([]int64{r, -r})
			if err != nil || !slices.Equal(mx, []int64{2, 0}) {
				return fmt.Errorf("rank %d: max %v %v", r, mx, err)
			}
		}
		send := make([]int32, r) // rank 0 sends nothing
		for i := range send {
			send[i] = int32(10*r) + int32(i)
		}
		all, counts, err := c.Allgatherv(send)
		if err != nil || !slices.Equal(all, []int32{10, 20, 21}) || !slices.Equal(counts, []int{0, 1, 2}) {
			return fmt.Errorf("rank %d: allgatherv %v %v %v", r, all, counts, err)
		}
		all, counts, err = c.Gatherv(send, 1)
		if r == 1 && !slices.Equal(all, []int32{10, 20, 21}) || r != 1 && all != nil || !slices.Equal(counts, []int{0, 1, 2}) || err != nil {
			return fmt.Errorf("rank %d: gatherv to rank 1 %v %v %v", r, all, counts, err)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalPointToPoint(t *testing.T) {
	err := runLocal(3, func(c Comm) error {
		me, n := c.Rank(), c.Size()
		for to := range n { // a message to every other rank, then an empty one
			if to == me {
				continue
			}
			if _, err := c.Isend(bytes.Repeat([]byte{byte(me)}, 1000*(me+1)), to, 7); err != nil {
				return err
			}
			if _, err := c.Isend(nil, to, 8); err != nil {
				return err
			}
		}
		// From rank (me+1)%n through a posted receive; from the other by probing.
		other := (me + 2) % n
		buf := make([]byte, 1<<20)
		req, err := c.Irecv(buf, (me+1)%n, 7)
		if err != nil {
			return err
		}
		got := 0
		for got < 3 {
			ok, st, err := c.Iprobe()
			if err != nil {
				return err
			}
			if ok {
				b := make([]byte, st.Len)
				if err := c.Recv(b, st.Source, st.Tag); err != nil {
					return err
				}
				if st.Tag == 7 && (st.Source != other || !bytes.Equal(b, bytes.Repeat([]byte{byte(other)}, 1000*(other+1)))) {
					return fmt.Errorf("rank %d: probed %+v", me, st)
				}
				got++
			}
		}
		for {
			done, st, err := req.Test()
			if err != nil {
				return err
			}
			if done {
				if want := 1000 * ((me+1)%n + 1); st.Len != want || buf[0] != byte((me+1)%n) {
					return fmt.Errorf("rank %d: posted receive got %+v", me, st)
				}
				return c.Barrier()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalAbort(t *testing.T) {
	err := runLocal(2, func(c Comm) error {
		if c.Rank() == 1 {
			defer func() { _ = recover() }()
			c.Abort(3)
		}
		return c.Barrier() // rank 0 must not wait forever
	})
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("got %v, want ErrAborted", err)
	}
}

// TestLocalIssend: an Issend completes only once a receive took it, by
// Irecv (posted before or after) or by Recv; an Isend at once.
func TestLocalIssend(t *testing.T) {
	ls := NewLocal(2)
	a, b := ls[0], ls[1]
	done := func(r Request) bool { ok, _, _ := r.Test(); return ok }
	s1, _ := a.Issend([]byte("one"), 1, 7)
	s2, _ := a.Issend([]byte("two"), 1, 7)
	plain, _ := a.Isend([]byte("three"), 1, 8)
	if done(s1) || done(s2) || !done(plain) {
		t.Fatalf("before any receive: Issends done %v %v, Isend done %v; want false, false, true", done(s1), done(s2), done(plain))
	}
	got := make([]byte, 3)
	r, _ := b.Irecv(got, 0, 7)
	if !done(r) || !done(s1) || done(s2) || string(got) != "one" {
		t.Fatalf("after an Irecv: receive %v %q, first Issend %v, second %v", done(r), got, done(s1), done(s2))
	}
	if err := b.Recv(got, 0, 7); err != nil || !done(s2) || string(got) != "two" {
		t.Fatalf("after a Recv: %v %q, second Issend %v", err, got, done(s2))
	}
	pre, _ := b.Irecv(got, 0, 9)
	s3, _ := a.Issend([]byte("for"), 1, 9)
	if !done(s3) || !done(pre) || string(got) != "for" {
		t.Fatalf("an Issend into a posted receive: %v %v %q", done(s3), done(pre), got)
	}
}
