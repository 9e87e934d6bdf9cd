package chunk

import "testing"

// A read larger than every free buffer unmaps one of them before it maps
// its own: the pool never holds more buffers than were lent at once.
func TestPoolReplacesTooSmall(t *testing.T) {
	var p bufPool
	defer p.drain()
	a, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	p.Free(a)
	b, err := p.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.free) != 0 || len(b) < 3<<20 {
		t.Fatalf("a 3 MiB read beside a free 1 MiB buffer: %d kept, got %d bytes", len(p.free), len(b))
	}
	p.Free(b)
	c, err := p.Alloc(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != 3<<20 || len(p.free) != 0 {
		t.Fatalf("a 2 MiB read took %d bytes with %d kept, want the free 3 MiB buffer", len(c), len(p.free))
	}
	p.Free(c)
}
