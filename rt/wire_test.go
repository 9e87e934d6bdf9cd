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
			Pushes: []proto.Pushed{{ID: 7, Sn: 5, File: 9, Size: 1000}, {ID: 8, Sn: 6, File: 11, Size: 0}}},
			[]*file{{id: 9, label: -1, crc: 1}, {id: 11, label: 2, damaged: "damaged"}}),
	}
}

// A frame survives its trip: what encodeFrame writes, decodeFrame reads
// back, file metadata and damage included.
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
	if err != nil || len(files) != 2 || files[0].label != -1 || files[0].crc != 1 || files[0].damaged != "" || files[1].damaged == "" || m.Pushes[0].Size != 1000 {
		t.Fatalf("a push of two files: %+v, %+v, %v", m, files, err)
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
