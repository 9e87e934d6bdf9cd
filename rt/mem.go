package rt

import (
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
	// buf is the chunk read whose buffer data lives in; nil when data is
	// ordinary Go memory (a received frame, a copy).
	buf *chunkBuf
}

// release gives up f's hold on its chunk buffer.
func (f *file) release() {
	if f.buf != nil {
		f.buf.release()
		f.buf = nil
	}
	f.data = nil
}

// chunkBuf counts the holds on one chunk read's buffer: one per file kept
// from it, and the loop's own while it sorts the files out.
type chunkBuf struct {
	ch   *chunk.Chunk
	refs atomic.Int32
}

func newChunkBuf(ch *chunk.Chunk) *chunkBuf {
	b := &chunkBuf{ch: ch}
	b.refs.Store(1)
	return b
}

func (b *chunkBuf) hold() { b.refs.Add(1) }

func (b *chunkBuf) release() {
	if b.refs.Add(-1) == 0 {
		b.ch.Release()
	}
}
