package order

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// What Append writes, Parse reads back, and writing that again gives the
// same bytes.
func TestRoundTrip(t *testing.T) {
	h := Header{Policy: "paper no-prefetching", Seed: 42}
	epochs := []Epoch{
		{Epoch: 2, Files: [][]proto.FileID{{5, 3, proto.NoFile}, {}, {7, 0}}},
		{Epoch: 3, Files: [][]proto.FileID{{0, 1, 2}, {4}, {6, 5}}},
	}
	b := h.Append(nil)
	for _, e := range epochs {
		b = e.Append(b)
	}
	if !strings.HasPrefix(string(b), "# brandrt delivered order, policy paper no-prefetching, seed 42: epoch rank sn file\n2 0 0 5\n2 0 1 3\n2 0 2 -1\n2 2 0 7\n") {
		t.Fatalf("written:\n%s", b)
	}
	f, err := Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if f.Header != h || len(f.Epochs) != 2 {
		t.Fatalf("read back %+v", f)
	}
	for i, e := range f.Epochs {
		if e.Epoch != epochs[i].Epoch || !slices.EqualFunc(e.Files, epochs[i].Files, func(a, b []proto.FileID) bool { return slices.Equal(a, b) }) {
			t.Fatalf("epoch %d read back as %+v, written %+v", i, e, epochs[i])
		}
	}
	again := f.Header.Append(nil)
	for _, e := range f.Epochs {
		again = e.Append(again)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("written again:\n%s\nfirst:\n%s", again, b)
	}
}

// A damaged file is refused with its line and what is wrong.
func TestParseRefuses(t *testing.T) {
	head := Header{Policy: "window", Seed: 1}.Append(nil)
	for _, c := range []struct{ body, want string }{
		{"", "empty"},
		{"epoch rank sn file\n", "line 1: \"epoch rank sn file\" is not an order file's header"},
		{string(head) + "1 0 0 4\n1 0 2 5\n", "line 3: \"1 0 2 5\": position 2 of rank 0 where 1 was due"},
		{string(head) + "1 0 0 4\n1 0 1\n", "line 3: \"1 0 1\": want 4 numbers"},
		{string(head) + "1 1 0 4\n1 0 0 5\n", "line 3: \"1 0 0 5\": rank 0 after rank 1"},
		{string(head) + "2 0 0 4\n1 0 0 5\n", "line 3: \"1 0 0 5\": epoch 1 after epoch 2"},
		{string(head) + "1 0 0 x\n", "line 2: \"1 0 0 x\": \"x\" is not a number"},
		{string(head) + "1 0 0 -2\n", "line 2: \"1 0 0 -2\": file -2"},
	} {
		_, err := Parse(strings.NewReader(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
}

// WriteTo writes what Append makes, in writes of at most its buffer, and
// stops at the first write that fails, saying how much went.
func TestWriteToIsAppend(t *testing.T) {
	e := Epoch{Epoch: 12, Files: [][]proto.FileID{{}, make([]proto.FileID, 30_000), {proto.NoFile}, make([]proto.FileID, 7)}}
	for i := range e.Files[1] {
		e.Files[1][i] = proto.FileID(i * 7919 % 1_000_003)
	}
	want := e.Append(nil)
	w := &writes{}
	n, err := e.WriteTo(w)
	if err != nil || n != int64(len(want)) || !bytes.Equal(w.got.Bytes(), want) {
		t.Fatalf("WriteTo: %d bytes, %v; %d bytes equal to Append's: %v", n, err, len(want), bytes.Equal(w.got.Bytes(), want))
	}
	if w.most > 64<<10 || w.calls < 2 {
		t.Fatalf("WriteTo wrote %d times, at most %d bytes at once; want several writes of at most 64 KiB", w.calls, w.most)
	}
	failing := &writes{failAt: 2}
	n, err = e.WriteTo(failing)
	if err == nil || n != int64(failing.got.Len()) || n == 0 {
		t.Fatalf("a write that fails: %d bytes, %v; %d written", n, err, failing.got.Len())
	}
}

// writes is a writer that counts its writes; the failAt-th fails.
type writes struct {
	got         bytes.Buffer
	calls, most int
	failAt      int
}

func (w *writes) Write(b []byte) (int, error) {
	w.calls++
	if w.calls == w.failAt {
		return 0, errWrite
	}
	w.most = max(w.most, len(b))
	return w.got.Write(b)
}

var errWrite = errors.New("disk full")
