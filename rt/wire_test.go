package rt

import (
	"bytes"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// frames are the tagMsg frames a rank sends: a request, a reply with its
// file, a failed reply, and a push of two files, one damaged on storage.
func frames() [][]byte {
	return [][]byte{
		encodeFrame(proto.Message{Type: proto.MsgRequest, From: 1, To: 0, Epoch: 2, Sn: 17, File: 40, Frontier: 30}, nil),
		encodeFrame(proto.Message{Type: proto.MsgReply, From: 0, To: 1, Epoch: 2, Sn: 17, File: 40, Size: 1 << 20, Status: proto.StatusOK},
			[]*file{{id: 40, label: 3, crc: 0xdeadbeef}}),
		encodeFrame(proto.Message{Type: proto.MsgReply, From: 0, To: 1, Epoch: 2, Sn: 18, File: 41, Status: proto.StatusReadFailed}, nil),
		encodeFrame(proto.Message{Type: proto.MsgPush, From: 2, To: 1, Epoch: 3, BufLimit: 1 << 24,
			Pushes: []proto.Pushed{{ID: 7, Sn: 5, File: 9, Size: 1000}, {ID: 8, Sn: 6, File: 11, Size: 70, Status: proto.StatusDamaged}}},
			[]*file{{id: 9, label: -1, crc: 1}, {id: 11, label: 2, crc: 3}}),
		encodeFrame(proto.Message{Type: proto.MsgReply, From: 0, To: 1, Epoch: 2, Sn: 19, File: 42, Size: 8, Status: proto.StatusDamaged},
			[]*file{{id: 42, label: 1, crc: 2}}),
	}
}

// A frame survives its trip: what encodeFrame writes, decodeFrame reads
// back, file metadata included; a damaged file's bytes do not follow.
func TestFrameRoundTrip(t *testing.T) {
	for i, b := range frames() {
		m, files, err := decodeFrame(b)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if again := encodeFrame(m, files); !bytes.Equal(again, b) {
			t.Fatalf("frame %d: %x decodes to %+v, which encodes to %x", i, b, m, again)
		}
	}
	m, files, err := decodeFrame(frames()[3])
	items := cargo(&m)
	if err != nil || len(files) != 2 || files[0].label != -1 || files[0].crc != 1 || files[1].crc != 3 ||
		len(items) != 2 || items[0] != (item{9, 1000, true}) || items[1] != (item{11, 70, false}) {
		t.Fatalf("a push of two files: %+v, %+v, %+v, %v", m, files, items, err)
	}
	m, files, err = decodeFrame(frames()[4])
	if items := cargo(&m); err != nil || len(files) != 1 || files[0].label != 1 || len(items) != 1 || items[0] != (item{42, 8, false}) {
		t.Fatalf("a reply of a damaged file: %+v, %+v, %+v, %v", m, files, items, err)
	}
}

// FuzzDecodeFrame: a frame from a peer never panics the rank, and what
// decodeFrame accepts is what encodeFrame would have written for it.
func FuzzDecodeFrame(f *testing.F) {
	for _, b := range frames() {
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, files, err := decodeFrame(b)
		if err != nil {
			return
		}
		if again := encodeFrame(m, files); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, again)
		}
	})
}
