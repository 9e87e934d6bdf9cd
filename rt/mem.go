package rt

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// file is one file the runtime holds: in a local VC, in a buffer VC, on
// its way to a peer, or delivered to a client that has not released it.
type file struct {
	id    proto.FileID
	data  []byte
	label int32
	crc   uint32
	// buf is the chunk read whose buffer data lives in, pool the pool
	// that lent data; both nil when data is ordinary Go memory (a copy).
	buf  *chunkBuf
	pool *recvPool
}

// release gives up f's bytes: its hold on its chunk buffer, or its
// buffer from the pool.
func (f *file) release() {
	if f.buf != nil {
		f.buf.release()
		f.buf = nil
	}
	if f.pool != nil {
		f.pool.put(f.data)
		f.pool = nil
	}
	f.data = nil
}

// chunkBuf counts the holds on one buffer of files: a chunk read's, or
// the one the files kept from it were moved into. One hold per file in
// it, and the loop's own while it sorts the files out; free runs when the
// last goes.
type chunkBuf struct {
	ch   *chunk.Chunk // the chunk read; nil for a buffer files moved into
	free func()
	refs atomic.Int32
}

func newChunkBuf(ch *chunk.Chunk) *chunkBuf {
	b := newBuf(ch.Release)
	b.ch = ch
	return b
}

func newBuf(free func()) *chunkBuf {
	b := &chunkBuf{free: free}
	b.refs.Store(1)
	return b
}

func (b *chunkBuf) hold() { b.refs.Add(1) }

func (b *chunkBuf) release() {
	if b.refs.Add(-1) == 0 {
		b.free()
	}
}

// recvPool recycles the buffers that files from other ranks are received
// into, by power-of-two size class: a fresh buffer would cost the zeroing
// of its pages and later the garbage collector's work. Safe for
// concurrent use (clients release files from their own goroutines).
type recvPool struct {
	mu   sync.Mutex
	free [32][][]byte
}

// poolKeep bounds the buffers kept per size class.
const poolKeep = 64

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// get returns a buffer of n bytes.
func (p *recvPool) get(n int) []byte {
	c := sizeClass(n)
	if c >= len(p.free) {
		return make([]byte, n)
	}
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n, 1<<c)
}

// put takes back a buffer get returned.
func (p *recvPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.free) || cap(b) != 1<<c {
		return
	}
	p.mu.Lock()
	if len(p.free[c]) < poolKeep {
		p.free[c] = append(p.free[c], b[:0])
	}
	p.mu.Unlock()
}
