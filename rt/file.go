package rt

import (
	"sync/atomic"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// The bytes the rank holds: each file, and the chunk buffer it may share
// with the other files of its chunk.

// file is one file the runtime holds: in a local VC, in a buffer VC, on
// its way to a peer, or delivered to a client that has not released it.
type file struct {
	// data is nil for a file damaged on its home's storage: proto moves
	// it with proto.StatusDamaged, and its position is answered with
	// that news (Config.OnDamage "skip").
	id    proto.FileID
	data  []byte
	label int32
	crc   uint32
	// buf is the chunk read whose buffer data lives in, pool the pool
	// that lent data; both nil when data is ordinary Go memory (a copy).
	buf  *chunkBuf
	pool *recvPool
}

// Release gives up f's bytes, for the client it was delivered to
// (Delivery.Holder).
func (f *file) Release() { f.release() }

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
