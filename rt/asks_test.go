package rt

import (
	"slices"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// The asks of an epoch count what the clients asked and were answered:
// the epoch is the clients' to end once every position was answered, or
// once they ended it and nothing they asked for waits.
func TestAsksCount(t *testing.T) {
	a := newAsks(4, 1, false, true) // position 0 delivered before a restart
	if a.unaskedAll() != 3 || a.clientsDone() || a.pending() {
		t.Fatalf("fresh: unasked %d, done %v, pending %v", a.unaskedAll(), a.clientsDone(), a.pending())
	}
	reply := make(chan Delivery, 1)
	a.take(2, reply)
	if !a.waits(2) || a.waits(1) || !a.pending() || a.unaskedAll() != 2 {
		t.Fatalf("after asking 2: waits(2) %v, waits(1) %v, unasked %d", a.waits(2), a.waits(1), a.unaskedAll())
	}
	got, drop := a.answer(0, 2)
	if got != reply || drop || a.pending() || a.answered != 2 {
		t.Fatalf("answer 2: reply %v, drop %v, pending %v, answered %d", got, drop, a.pending(), a.answered)
	}
	a.delivered(2, 40)
	if want := []int32{int32(proto.NoFile), int32(proto.NoFile), 40, int32(proto.NoFile)}; !slices.Equal(a.order, want) {
		t.Fatalf("order %v, want %v", a.order, want)
	}
	for _, sn := range []int32{1, 3} {
		a.take(sn, reply)
		a.answer(0, sn)
	}
	if !a.clientsDone() || a.endedBefore() {
		t.Fatalf("every position answered: done %v, ended early %v", a.clientsDone(), a.endedBefore())
	}
}

// A whole End ends the epoch once what waits is answered; the epoch then
// ended early if some position was never asked for.
func TestAsksWholeEnd(t *testing.T) {
	a := newAsks(3, 0, false, false)
	a.take(0, make(chan Delivery, 1))
	if left := a.endShare(Share{}); left != nil || !a.ended {
		t.Fatalf("a whole end asked the rank for %v, ended %v", left, a.ended)
	}
	if a.clientsDone() {
		t.Fatal("done while position 0 waits")
	}
	a.answer(0, 0)
	if !a.clientsDone() || !a.endedBefore() {
		t.Fatalf("after the answer: done %v, ended early %v", a.clientsDone(), a.endedBefore())
	}
	if a.order != nil {
		t.Fatal("an order kept that nobody asked for")
	}
}

// A share's End hands the rank the share's positions not yet asked for,
// once; their answers are dropped, and the share no longer counts as
// unasked.
func TestAsksShareEnd(t *testing.T) {
	a := newAsks(7, 0, false, false)
	k := Share{Replica: 1, Replicas: 3} // positions 1, 4
	a.take(1, make(chan Delivery, 1))
	if a.unasked(k) != 1 || a.unasked(Share{Replica: 0, Replicas: 3}) != 3 {
		t.Fatalf("unasked: share 1 %d, share 0 %d", a.unasked(k), a.unasked(Share{Replica: 0, Replicas: 3}))
	}
	left := a.endShare(k)
	if !slices.Equal(left, []int32{4}) || !a.endedEarly || a.ended {
		t.Fatalf("end of share 1: left %v, early %v, ended %v", left, a.endedEarly, a.ended)
	}
	if again := a.endShare(k); again != nil {
		t.Fatalf("a second end of the share asked for %v", again)
	}
	if a.unasked(k) != 0 {
		t.Fatal("an ended share still counts as unasked")
	}
	a.take(4, nil)
	if reply, drop := a.answer(0, 4); reply != nil || !drop {
		t.Fatalf("the rank's own ask: reply %v, drop %v", reply, drop)
	}
	if reply, drop := a.answer(0, 1); reply == nil || drop {
		t.Fatalf("the client's ask: reply %v, drop %v", reply, drop)
	}
}

// An answer nobody asked for is the runtime's bug: it panics.
func TestAsksUnaskedAnswerPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	newAsks(2, 0, false, false).answer(0, 1)
}
