package shm

import (
	"os/exec"
	"testing"

	"github.com/brandrt/brandrt/rt"
)

// TestHandedReferences: a handed file is released when its last
// reference goes, and not before; only its owner's lineage may hold or
// release it; a stale token or another place is refused; past the cap,
// which all owners share, a file is not handed; the files of an owner that is gone
// are released by the sweep, the others kept.
func TestHandedReferences(t *testing.T) {
	s := &Server{opt: Options{HandCap: 310}}
	released := map[int]int{}
	delivery := func(sn int32, n int) *rt.Delivery {
		return &rt.Delivery{Sn: sn, Data: make([]byte, n), Holder: releaseFunc(func() { released[int(sn)]++ })}
	}
	const owner, worker = 1000, 1001
	line := []int{worker, owner, 1}

	a, ok := s.hand(delivery(1, 100), 4096, owner)
	if !ok {
		t.Fatal("a file under the cap was not handed")
	}
	b, _ := s.hand(delivery(2, 100), 8192, owner)
	c, ok := s.hand(delivery(4, 100), 12288, owner+1) // another owner shares the cap
	if !ok || a == b || a == 0 {
		t.Fatalf("tokens %d %d %d (%v)", a, b, c, ok)
	}
	if _, ok := s.hand(delivery(3, 11), 16384, owner); ok || s.HandFull.Load() != 1 {
		t.Fatalf("a file past the cap: handed %v, %d counted past it; want not, and 1", ok, s.HandFull.Load())
	}
	if got := s.HandedBytes(); got != 300 {
		t.Fatalf("%d bytes handed, want 300", got)
	}
	if got := s.HandedPeak(); got != 300 {
		t.Fatalf("at most %d bytes handed at once, want 300", got)
	}
	if err := s.holdHanded(a, 4096, 1, []int{77, 1}); err == nil {
		t.Fatal("a process outside the owner's lineage held a handed file")
	}
	if err := s.holdHanded(a, 8192, -1, line); err == nil {
		t.Fatal("a release naming another place was taken")
	}
	if err := s.holdHanded(a, 4096, 1, line); err != nil { // passed on: two references
		t.Fatal(err)
	}
	if err := s.holdHanded(a, 4096, -1, []int{owner}); err != nil || released[1] != 0 {
		t.Fatalf("released at one reference left: %v, %v", err, released)
	}
	if err := s.holdHanded(a, 4096, -1, line); err != nil || released[1] != 1 {
		t.Fatalf("not released at the last reference: %v, %v", err, released)
	}
	if err := s.holdHanded(a, 4096, -1, line); err == nil || released[1] != 1 {
		t.Fatalf("a stale token was taken: %v, %v", err, released)
	}
	if _, ok := s.hand(delivery(5, 100), 4096, owner); !ok {
		t.Fatal("the cap did not come back with a release")
	}

	// The sweep: owner+1 is a process that ended.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	d, _ := s.hand(delivery(6, 10), 16384, gone)
	if n := s.dropHanded(func(p int) bool { return p == gone || p == owner+1 }); n != 2 || released[6] != 1 || released[4] != 1 {
		t.Fatalf("the sweep released %d files: %v", n, released)
	}
	if !processGone(gone) || processGone(1) {
		t.Fatalf("processGone: %d %v, 1 %v", gone, processGone(gone), processGone(1))
	}
	if err := s.holdHanded(d, 16384, -1, []int{gone}); err == nil {
		t.Fatal("a swept file's token was taken")
	}
	if n := s.dropHanded(nil); n != 2 || released[2] != 1 || released[5] != 1 || s.HandedBytes() != 0 {
		t.Fatalf("closing released %d files: %v, %d bytes left", n, released, s.HandedBytes())
	}
	if got := s.HandedPeak(); got != 310 { // files 2, 4, 5 and 6 at once: the cap
		t.Fatalf("at most %d bytes handed at once, want 310", got)
	}
}

// releaseFunc is a Delivery.Holder that calls itself on Release: a
// delivery made by a test in the loop's place.
type releaseFunc func()

func (f releaseFunc) Release() { f() }
