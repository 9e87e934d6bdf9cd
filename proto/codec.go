package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format of a Message, little-endian:
//
//	off size field
//	  0    2 magic "RX"
//	  2    1 version (3)
//	  3    1 type
//	  4    4 epoch
//	  8    4 from
//	 12    4 to
//	 16    4 sn
//	 20    4 file
//	 24    8 size
//	 32    8 buffer limit
//	 40    8 push id
//	 48    4 frontier
//	 52    1 status
//	 53    3 zero
//	 56    4 n: number of acks (request), pushes (push), answers
//	         (answers) or positions (ahead), else 0
//	 60      n acks of 12 bytes (id u64, by i32)
//	         or n pushes of 28 bytes (id u64, sn i32, file i32, size i64,
//	         status u8 (ok or damaged), 3 zero)
//	         or n answers of 20 bytes (sn i32, file i32, at i32, size i64)
//	         or n positions of 4 bytes (sn i32)
//
// Decode accepts exactly what Encode produces: the length must match n, the
// reserved bytes must be zero, and the entries must suit the type.
// Version 2 added the push's status (version 1 had none: a damaged file
// travelled as the runtime's own flag); version 3 the answers and ahead
// messages of the window policy's plan per rank.
const (
	wireMagic   = "RX"
	wireVersion = 3
	headerSize  = 60
	ackSize     = 12
	pushSize    = 28
	answerSize  = 20
	aheadSize   = 4
)

// ErrMalformed is wrapped by every Decode error.
var ErrMalformed = errors.New("proto: malformed message")

// Encode appends the wire form of m to dst.
func Encode(dst []byte, m Message) []byte {
	le := binary.LittleEndian
	dst = append(dst, wireMagic...)
	dst = append(dst, wireVersion, byte(m.Type))
	dst = le.AppendUint32(dst, m.Epoch)
	dst = le.AppendUint32(dst, uint32(m.From))
	dst = le.AppendUint32(dst, uint32(m.To))
	dst = le.AppendUint32(dst, uint32(m.Sn))
	dst = le.AppendUint32(dst, uint32(m.File))
	dst = le.AppendUint64(dst, uint64(m.Size))
	dst = le.AppendUint64(dst, uint64(m.BufLimit))
	dst = le.AppendUint64(dst, m.PushID)
	dst = le.AppendUint32(dst, uint32(m.Frontier))
	dst = append(dst, byte(m.Status), 0, 0, 0)
	dst = le.AppendUint32(dst, uint32(len(m.Acks)+len(m.Pushes)+len(m.Answers)+len(m.Ahead)))
	for _, a := range m.Acks {
		dst = le.AppendUint64(dst, a.ID)
		dst = le.AppendUint32(dst, uint32(a.By))
	}
	for _, p := range m.Pushes {
		dst = le.AppendUint64(dst, p.ID)
		dst = le.AppendUint32(dst, uint32(p.Sn))
		dst = le.AppendUint32(dst, uint32(p.File))
		dst = le.AppendUint64(dst, uint64(p.Size))
		dst = append(dst, byte(p.Status), 0, 0, 0)
	}
	for _, a := range m.Answers {
		dst = le.AppendUint32(dst, uint32(a.Sn))
		dst = le.AppendUint32(dst, uint32(a.File))
		dst = le.AppendUint32(dst, uint32(a.At))
		dst = le.AppendUint64(dst, uint64(a.Size))
	}
	for _, sn := range m.Ahead {
		dst = le.AppendUint32(dst, uint32(sn))
	}
	return dst
}

// Decode parses one message, which must fill b exactly.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) < headerSize {
		return m, fmt.Errorf("%w: %d bytes, header needs %d", ErrMalformed, len(b), headerSize)
	}
	if string(b[:2]) != wireMagic {
		return m, fmt.Errorf("%w: bad magic %q", ErrMalformed, b[:2])
	}
	if b[2] != wireVersion {
		return m, fmt.Errorf("%w: version %d, want %d", ErrMalformed, b[2], wireVersion)
	}
	le := binary.LittleEndian
	m = Message{
		Type: MsgType(b[3]), Epoch: le.Uint32(b[4:]),
		From: int32(le.Uint32(b[8:])), To: int32(le.Uint32(b[12:])),
		Sn: int32(le.Uint32(b[16:])), File: FileID(le.Uint32(b[20:])),
		Size: int64(le.Uint64(b[24:])), BufLimit: int64(le.Uint64(b[32:])),
		PushID: le.Uint64(b[40:]), Frontier: int32(le.Uint32(b[48:])), Status: Status(b[52]),
	}
	if b[53]|b[54]|b[55] != 0 {
		return Message{}, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
	}
	if m.Type < MsgRequest || m.Type > MsgAhead || int(m.Status) >= len(statusNames) {
		return Message{}, fmt.Errorf("%w: type %d status %d", ErrMalformed, m.Type, m.Status)
	}
	n := uint64(le.Uint32(b[56:]))
	body := b[headerSize:]
	if err := decodeEntries(&m, n, body); err != nil {
		return Message{}, err
	}
	return m, nil
}

func decodeEntries(m *Message, n uint64, body []byte) error {
	le := binary.LittleEndian
	size := uint64(0)
	switch m.Type {
	case MsgRequest:
		size = ackSize
	case MsgPush:
		size = pushSize
	case MsgAnswers:
		size = answerSize
	case MsgAhead:
		size = aheadSize
	}
	if n*size != uint64(len(body)) || (size == 0 && n != 0) {
		return fmt.Errorf("%w: %s with %d entries in %d bytes", ErrMalformed, m.Type, n, len(body))
	}
	for i := uint64(0); i < n; i++ {
		e := body[i*size:]
		switch m.Type {
		case MsgRequest:
			m.Acks = append(m.Acks, Ack{ID: le.Uint64(e), By: int32(le.Uint32(e[8:]))})
			continue
		case MsgAnswers:
			m.Answers = append(m.Answers, Answer{Rank: m.To, Sn: int32(le.Uint32(e)), File: FileID(le.Uint32(e[4:])),
				At: int32(le.Uint32(e[8:])), Size: int64(le.Uint64(e[12:]))})
			continue
		case MsgAhead:
			m.Ahead = append(m.Ahead, int32(le.Uint32(e)))
			continue
		}
		p := Pushed{
			ID: le.Uint64(e), Sn: int32(le.Uint32(e[8:])),
			File: FileID(le.Uint32(e[12:])), Size: int64(le.Uint64(e[16:])), Status: Status(e[24]),
		}
		if !p.Status.HasFile() || e[25]|e[26]|e[27] != 0 {
			return fmt.Errorf("%w: push %d of status %d (reserved %x)", ErrMalformed, i, e[24], e[25:28])
		}
		m.Pushes = append(m.Pushes, p)
	}
	return nil
}
