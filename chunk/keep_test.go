package chunk

import (
	"os"
	"testing"
)

// kept lends a file to one read at a time, keeps at most its room, and
// once its shard closes takes back no file: a read in flight then gives
// its file back closed.
func TestKeptLendsAndCloses(t *testing.T) {
	open := func() File {
		f, err := OSNoDirect.Open(os.Args[0], true)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := &Shard{}, &Shard{}
	k := newKept(2)
	f1, f2, f3 := open(), open(), open()
	if !k.give(a, 1, f1) || k.give(a, 1, f2) {
		t.Fatal("a chunk's file kept twice, or not once")
	}
	if !k.give(b, 1, f2) || k.give(b, 2, f3) {
		t.Fatal("room for 2: kept a third, or not a second")
	}
	if k.take(a, 1) != f1 || k.take(a, 1) != nil {
		t.Fatal("take did not lend the kept file once")
	}
	k.close(b) // b's file closes; a's in flight, f1, comes back to a's room
	if k.take(b, 1) != nil || k.room != 2 {
		t.Fatalf("after close: b's file still kept, room %d", k.room)
	}
	if !k.give(a, 1, f1) {
		t.Fatal("a's file not kept after b closed")
	}
	k.close(a)
	if k.give(a, 1, f3) || len(k.files) != 0 || k.room != 2 {
		t.Fatalf("a closed: a read's file kept after, %d kept, room %d", len(k.files), k.room)
	}
	f3.Close()
	if _, err := f2.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("close left b's kept file open")
	}
}
