package chunk_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/brandrt/brandrt/chunk"
)

// ReadAtv reads into many buffers at once, more than one preadv takes,
// goes on after a short read, and stops at the file's end with io.EOF;
// a file that needs aligned buffers (O_DIRECT on a local disk) says it
// cannot.
func TestReadAtv(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	want := make([]byte, 10_000)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if err := os.WriteFile(name, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := chunk.OSNoDirect.Open(name, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := f.(chunk.Scatterer)
	bufs := make([][]byte, 3000) // 3 bytes each, an empty one among them
	for i := range bufs {
		bufs[i] = make([]byte, 3*min(i, 1))
	}
	n, err := sc.ReadAtv(bufs, 11)
	if got := bytes.Join(bufs, nil); err != nil || n != 8997 || !bytes.Equal(got, want[11:11+8997]) {
		t.Fatalf("read %d bytes (%v), want 8997 from offset 11; equal: %v", n, err, bytes.Equal(got, want[11:11+n]))
	}
	tail := [][]byte{make([]byte, 5), make([]byte, 100)}
	if n, err := sc.ReadAtv(tail, 9990); n != 10 || !errors.Is(err, io.EOF) || !bytes.Equal(append(tail[0], tail[1][:5]...), want[9990:]) {
		t.Fatalf("past the end: %d bytes, %v; want 10, EOF", n, err)
	}
	d, err := chunk.OS.Open(name, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ds := d.(chunk.Scatterer)
	if ds.Scatters() {
		t.Skipf("%s takes unaligned reads with O_DIRECT, or refuses O_DIRECT (tmpfs, FUSE, NFS)", filepath.Dir(name))
	}
	if _, err := ds.ReadAtv(bufs, 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("O_DIRECT on a local disk: %v, want unsupported", err)
	}
}
