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
)

// Frame of a tagMsg message, little-endian:
//
//	4 bytes   n, the length of the encoded proto message
//	n bytes   proto.Encode(m)
//	12 × f    per carried file: label int32, CRC32C uint32, flags uint32
//	          (f is 1 for an OK reply, len(m.Pushes) for a push, else 0)
//
// The f files' bytes follow as tagData messages, one per file, sent
// straight from the owner's memory (no copy into the frame); sizes are in
// m. A file whose flags have flagDamaged set has no bytes and no tagData
// message: it is damaged on its owner's storage and left out
// (Config.OnDamage "skip"). The consumer
// checks every file's CRC32C against the one its owner sent, read from
// its index.

// flagDamaged marks a carried file that is damaged on storage.
const flagDamaged = 1

// metaBytes is the size of a carried file's metadata in a frame.
const metaBytes = 12

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

// encodeFrame frames m with the labels and checksums of the files it
// carries.
func encodeFrame(m proto.Message, files []*file) []byte {
	b := make([]byte, 4, 4+64+24*len(m.Pushes)+12*len(m.Acks)+metaBytes*len(files))
	b = proto.Encode(b, m)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	for _, f := range files {
		flags := uint32(0)
		if f.damaged != "" {
			flags |= flagDamaged
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(f.label))
		b = binary.LittleEndian.AppendUint32(b, f.crc)
		b = binary.LittleEndian.AppendUint32(b, flags)
	}
	return b
}

// decodeFrame parses a frame; the files it announces have no bytes yet,
// only their size in len(data) terms: see fileSize.
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
	meta := b[n:]
	if len(meta) != metaBytes*len(ids) {
		return m, nil, fmt.Errorf("rt: %s from rank %d: %d bytes of file metadata for %d files", m.Type, m.From, len(meta), len(ids))
	}
	files := make([]*file, len(ids))
	for i, id := range ids {
		if size := fileSize(&m, i); size < 0 || size > chunk.MaxFileSize {
			return m, nil, fmt.Errorf("rt: %s from rank %d: file %d of %d bytes", m.Type, m.From, id, size)
		}
		at := meta[metaBytes*i:]
		flags := binary.LittleEndian.Uint32(at[8:])
		if flags&^flagDamaged != 0 {
			return m, nil, fmt.Errorf("rt: %s from rank %d: file %d with unknown flags %#x", m.Type, m.From, id, flags)
		}
		files[i] = &file{id: id, label: int32(binary.LittleEndian.Uint32(at)), crc: binary.LittleEndian.Uint32(at[4:])}
		if flags&flagDamaged != 0 {
			files[i].damaged = fmt.Sprintf("file %d is damaged on the storage of rank %d, which names it in its log, and left out (--on-damage skip)", id, m.From)
		}
	}
	return m, files, nil
}

func fileSize(m *proto.Message, i int) int64 {
	if m.Type == proto.MsgPush {
		return m.Pushes[i].Size
	}
	return m.Size
}
