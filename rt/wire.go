package rt

import (
	"encoding/binary"
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// MPI tags of the runtime's point-to-point messages.
const (
	// tagMsg carries a framed proto message with the files it moves.
	tagMsg = 1
	// tagDone is an empty message: the sender's clients finished the
	// epoch, so it will request nothing more. MPI does not overtake
	// between a pair of ranks, so it arrives after all the sender's
	// earlier messages.
	tagDone = 2
)

// Frame of a tagMsg message, little-endian:
//
//	4 bytes   n, the length of the encoded proto message
//	n bytes   proto.Encode(m)
//	8 × f     per carried file: label int32, CRC32C uint32
//	          (f is 1 for an OK reply, len(m.Pushes) for a push, else 0)
//	…         the carried files' bytes, back to back, sizes from m
//
// The receiver checks every carried file's CRC32C against the one sent
// by its owner, who read it from its index.

// carried returns the files m moves, in frame order.
func carried(m *proto.Message) []proto.FileID {
	switch {
	case m.Type == proto.MsgReply && m.Status == proto.StatusOK:
		return []proto.FileID{m.File}
	case m.Type == proto.MsgPush:
		fs := make([]proto.FileID, len(m.Pushes))
		for i, p := range m.Pushes {
			fs[i] = p.File
		}
		return fs
	}
	return nil
}

// encodeFrame frames m with the files it carries, taken from files.
func encodeFrame(m proto.Message, files []*file) []byte {
	size := 4 + 8*len(files)
	for _, f := range files {
		size += len(f.data)
	}
	b := make([]byte, 4, size+64+24*len(m.Pushes)+12*len(m.Acks))
	b = proto.Encode(b, m)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	for _, f := range files {
		b = binary.LittleEndian.AppendUint32(b, uint32(f.label))
		b = binary.LittleEndian.AppendUint32(b, f.crc)
	}
	for _, f := range files {
		b = append(b, f.data...)
	}
	return b
}

// decodeFrame parses a frame; the returned files' bytes alias b.
func decodeFrame(b []byte) (proto.Message, []*file, error) {
	if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
		return proto.Message{}, nil, fmt.Errorf("rt: frame of %d bytes is cut short", len(b))
	}
	n := 4 + int(binary.LittleEndian.Uint32(b))
	m, err := proto.Decode(b[4:n])
	if err != nil {
		return m, nil, err
	}
	ids := carried(&m)
	meta, rest := b[n:], b[min(n+8*len(ids), len(b)):]
	if len(meta) < 8*len(ids) {
		return m, nil, fmt.Errorf("rt: %s from rank %d: frame too short for %d files", m.Type, m.From, len(ids))
	}
	files := make([]*file, len(ids))
	for i, id := range ids {
		size := fileSize(&m, i)
		if size < 0 || size > int64(len(rest)) {
			return m, nil, fmt.Errorf("rt: %s from rank %d: file %d of %d bytes, %d left in the frame", m.Type, m.From, id, size, len(rest))
		}
		files[i] = &file{id: id, data: rest[:size:size],
			label: int32(binary.LittleEndian.Uint32(meta[8*i:])), crc: binary.LittleEndian.Uint32(meta[8*i+4:])}
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return m, nil, fmt.Errorf("rt: %s from rank %d: %d bytes left over in the frame", m.Type, m.From, len(rest))
	}
	return m, files, nil
}

func fileSize(m *proto.Message, i int) int64 {
	if m.Type == proto.MsgPush {
		return m.Pushes[i].Size
	}
	return m.Size
}
