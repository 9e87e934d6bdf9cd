package rt

import (
	"encoding/binary"
	"fmt"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// MPI tags of the runtime's point-to-point messages.
const (
	// tagMsg carries a framed proto message: the header of what it moves.
	tagMsg = 1

	// Tag 2 was an empty "done" message; proto.MsgDone, framed under
	// tagMsg, says it now.

	// tagData carries one file's bytes; a tagMsg frame is followed by one
	// per file it moves, in order.
	tagData = 4
	// tagSync is an empty message of quietBarrier, between epochs.
	tagSync = 5
	// tagTraining is an empty message a rank sends each peer when its
	// first client attached (trainingWatch).
	tagTraining = 6
)

// Frame of a tagMsg message, little-endian:
//
//	4 bytes   n, the length of the encoded proto message
//	n bytes   proto.Encode(m)
//	8 × f     per file m moves (cargo): label int32, CRC32C uint32
//
// The bytes of each file whose status is ok follow as tagData messages,
// one per file, in order, sent straight from the owner's memory (no copy
// into the frame); sizes are in m. A file of status damaged (damaged on
// its owner's storage and left out, Config.OnDamage "skip") moves
// without bytes. The consumer checks every file's CRC32C against the one
// its owner sent, read from its index.

// metaBytes is the size of a moved file's metadata in a frame.
const metaBytes = 8

// item is one file a message moves: its id, size and whether its bytes
// follow (status ok) or not (damaged).
type item struct {
	id    proto.FileID
	size  int64
	bytes bool
}

// cargo returns the files m moves, in frame order: the file of a reply
// that has one, the files of a push.
func cargo(m *proto.Message) []item {
	switch {
	case m.Type == proto.MsgReply && m.Status.HasFile():
		return []item{{m.File, m.Size, m.Status == proto.StatusOK}}
	case m.Type == proto.MsgPush:
		fs := make([]item, len(m.Pushes))
		for i, p := range m.Pushes {
			fs[i] = item{p.File, p.Size, p.Status == proto.StatusOK}
		}
		return fs
	}
	return nil
}

// encodeFrame frames m with the labels and checksums of the files it
// moves.
func encodeFrame(m proto.Message, files []*file) []byte {
	b := make([]byte, 4, 4+64+28*len(m.Pushes)+12*len(m.Acks)+metaBytes*len(files))
	b = proto.Encode(b, m)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	for _, f := range files {
		b = binary.LittleEndian.AppendUint32(b, uint32(f.label))
		b = binary.LittleEndian.AppendUint32(b, f.crc)
	}
	return b
}

// decodeFrame parses a frame: its message, and the files it moves, with
// no bytes yet (cargo says which follow, and their sizes).
func decodeFrame(b []byte) (proto.Message, []*file, error) {
	if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
		return proto.Message{}, nil, fmt.Errorf("rt: frame of %d bytes is cut short", len(b))
	}
	n := 4 + int(binary.LittleEndian.Uint32(b))
	m, err := proto.Decode(b[4:n])
	if err != nil {
		return m, nil, err
	}
	items := cargo(&m)
	meta := b[n:]
	if len(meta) != metaBytes*len(items) {
		return m, nil, fmt.Errorf("rt: %s from rank %d: %d bytes of file metadata for %d files", m.Type, m.From, len(meta), len(items))
	}
	files := make([]*file, len(items))
	for i, it := range items {
		if it.size < 0 || it.size > chunk.MaxFileSize {
			return m, nil, fmt.Errorf("rt: %s from rank %d: file %d of %d bytes", m.Type, m.From, it.id, it.size)
		}
		at := meta[metaBytes*i:]
		files[i] = &file{id: it.id, label: int32(binary.LittleEndian.Uint32(at)), crc: binary.LittleEndian.Uint32(at[4:])}
	}
	return m, files, nil
}
