package proto

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func randomMessage(rng *rand.Rand) Message {
	m := Message{
		Type: MsgType(1 + rng.IntN(len(msgNames)-1)), From: rng.Int32(), To: rng.Int32(), Epoch: rng.Uint32(),
		Sn: rng.Int32() - 1<<30, File: FileID(rng.Int32()), Size: rng.Int64(), BufLimit: rng.Int64(),
		Frontier: rng.Int32(), Status: Status(rng.IntN(len(statusNames))), PushID: rng.Uint64(),
	}
	for i := rng.IntN(5); i > 0; i-- {
		switch m.Type {
		case MsgRequest:
			m.Acks = append(m.Acks, Ack{ID: rng.Uint64(), By: rng.Int32()})
		case MsgPush:
			m.Pushes = append(m.Pushes, Pushed{ID: rng.Uint64(), Sn: rng.Int32(), File: FileID(rng.Int32()), Size: rng.Int64(),
				Status: Status(rng.IntN(2)) * StatusDamaged})
		case MsgAnswers:
			m.Answers = append(m.Answers, Answer{Rank: m.To, Sn: rng.Int32(), File: FileID(rng.Int32()), At: rng.Int32(), Size: rng.Int64()})
		case MsgAhead:
			m.Ahead = append(m.Ahead, rng.Int32())
		}
	}
	return m
}

func TestCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		m := randomMessage(rng)
		b := Encode(nil, m)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip changed the message:\n got %#v\nwant %#v", got, m)
		}
	}
}

func TestCodecRejects(t *testing.T) {
	good := Encode(nil, Message{Type: MsgRequest, Acks: []Ack{{ID: 1, By: 2}}})
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":              nil,
		"short header":       good[:headerSize-1],
		"bad magic":          mutate(func(b []byte) []byte { b[0] = 'x'; return b }),
		"older version":      mutate(func(b []byte) []byte { b[2] = 2; return b }),
		"newer version":      mutate(func(b []byte) []byte { b[2] = 4; return b }),
		"unknown type":       mutate(func(b []byte) []byte { b[3] = 9; return b }),
		"unknown status":     mutate(func(b []byte) []byte { b[52] = 7; return b }),
		"push status":        pushWith(func(e []byte) { e[24] = byte(StatusRedirect) }),
		"push reserved":      pushWith(func(e []byte) { e[26] = 1 }),
		"reserved byte":      mutate(func(b []byte) []byte { b[54] = 1; return b }),
		"truncated body":     good[:len(good)-1],
		"trailing byte":      append(bytes.Clone(good), 0),
		"count too big":      mutate(func(b []byte) []byte { b[56] = 200; return b }),
		"huge count":         mutate(func(b []byte) []byte { b[59] = 0xff; return b }),
		"reply with entries": Encode(nil, Message{Type: MsgReply, Pushes: []Pushed{{ID: 1}}}),
		"ahead cut short":    Encode(nil, Message{Type: MsgAhead, Ahead: []int32{1, 2}})[:headerSize+7],
		"answers cut short":  Encode(nil, Message{Type: MsgAnswers, Answers: []Answer{{Sn: 1}}})[:headerSize+19],
	} {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode error %v, want ErrMalformed", name, err)
		}
	}
}

// pushWith encodes a push of one file and changes its entry.
func pushWith(change func(e []byte)) []byte {
	b := Encode(nil, Message{Type: MsgPush, Pushes: []Pushed{{ID: 1, Sn: 2, File: 3, Size: 4, Status: StatusDamaged}}})
	change(b[headerSize:])
	return b
}

// FuzzDecode: Decode never panics, and what it accepts it re-encodes to
// the same bytes.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 16; i++ {
		f.Add(Encode(nil, randomMessage(rng)))
	}
	f.Add([]byte("RX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if again := Encode(nil, m); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but re-encodes to %x", b, again)
		}
	})
}
