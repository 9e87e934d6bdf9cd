package rt

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/brandrt/brandrt/chunk"
)

// recvPool recycles the buffers that files from other ranks are received
// into, by power-of-two size class: a fresh buffer would cost the zeroing
// of its pages and later the garbage collector's work. With mem (the
// memory shared with the clients, Site.Memory), buffers of recvLentMin
// bytes and more come from it, so that received files too reach the
// clients in place; smaller ones stay in Go memory, where they do not
// take a whole unit of the lender's. Safe for concurrent use (clients
// release files from their own goroutines).
type recvPool struct {
	mem     chunk.Memory
	mu      sync.Mutex
	free    [32][][]byte
	drained bool // after drain, lent buffers go straight back to mem
}

// recvLentMin is the smallest buffer taken from the pool's mem, for files
// of more than half of it: smaller ones stay in Go memory, where the
// power-of-two classes of the pool waste less of the lender's memory and
// the copy into a client's ring costs little. A variable so that tests
// can lower it.
var recvLentMin = 64 << 10

// poolKeep bounds the buffers kept per size class.
const poolKeep = 64

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// lentClass reports whether the buffers of class c come from the pool's
// memory, when it has one: what the footprint (newMemFacts,
// Node.ReceivedBytes) and the forecast (files handed on in place) count
// of other ranks' files.
func lentClass(c int) bool { return 1<<c >= recvLentMin }

// lent reports whether the buffers of class c come from p.mem.
func (p *recvPool) lent(c int) bool { return p.mem != nil && lentClass(c) }

// get returns a buffer of n bytes.
func (p *recvPool) get(n int) ([]byte, error) {
	c := sizeClass(n)
	if c >= len(p.free) {
		return make([]byte, n), nil
	}
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.mu.Unlock()
		return b[:n], nil
	}
	p.mu.Unlock()
	if !p.lent(c) {
		return make([]byte, n, 1<<c), nil
	}
	b, err := p.mem.Alloc(1 << c)
	if err != nil {
		return nil, err
	}
	if len(b) != 1<<c {
		p.mem.Free(b)
		return nil, fmt.Errorf("rt: asked the shared memory for %d bytes, got %d", 1<<c, len(b))
	}
	return b[: n : 1<<c], nil
}

// put takes back a buffer get returned.
func (p *recvPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.free) || cap(b) != 1<<c {
		return
	}
	p.mu.Lock()
	keep := len(p.free[c]) < poolKeep && !p.drained
	if keep {
		p.free[c] = append(p.free[c], b[:0])
	}
	p.mu.Unlock()
	if !keep && p.lent(c) {
		p.mem.Free(b[:cap(b)])
	}
}

// drain gives the buffers kept from p.mem back, and those put later.
func (p *recvPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drained = true
	for c := range p.free {
		if p.lent(c) {
			for _, b := range p.free[c] {
				p.mem.Free(b[:cap(b)])
			}
		}
		p.free[c] = nil
	}
}
