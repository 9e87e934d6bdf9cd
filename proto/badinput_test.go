package proto_test

import (
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/prototest"
)

// TestBadInputIsAnErrorAndChangesNothing feeds rank 1 malformed events
// and checks each is refused with an error naming the problem while the
// rank's state stays as it was.
func TestBadInputIsAnErrorAndChangesNothing(t *testing.T) {
	c, err := prototest.New(prototest.Options{Files: []int{4, 4}, K: 2, MemFraction: 0.5, RemoteMemBytes: 8, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 asks for files 4, 5 (rank 1's) and 0; rank 1 for 6, 7, 1, 2, 3.
	traces := [][]proto.FileID{{4, 5, 0}, {6, 7, 1, 2, 3}}
	if err := c.StartEpoch(1, traces, nil); err != nil {
		t.Fatal(err)
	}
	// Position 0 of rank 0 is answered, with a push for position 1.
	if err := c.Request(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Stabilize(); err != nil {
		t.Fatal(err)
	}
	// Rank 1 asks rank 0 for file 1 and waits.
	if err := c.Request(1, 2); err != nil {
		t.Fatal(err)
	}
	req := func(m proto.Message) proto.Message {
		m.Type, m.From, m.To, m.Epoch = proto.MsgRequest, 0, 1, 1
		if m.Frontier == 0 {
			m.Frontier = m.Sn + 1
		}
		return m
	}
	fromRank0 := func(m proto.Message) proto.Message { m.From, m.To, m.Epoch = 0, 1, 1; return m }
	for _, tc := range []struct {
		name string
		ev   proto.Event
		want string
	}{
		{"sn out of range", req(proto.Message{Sn: 3, File: 4}), "requested sn 3 out of range"},
		{"file not at that position", req(proto.Message{Sn: 1, File: 4}), "its trace says 5"},
		{"file stored elsewhere", req(proto.Message{Sn: 2, File: 0}), "stored elsewhere"},
		{"position answered already", req(proto.Message{Sn: 0, File: 4}), "requested sn 0 again"},
		{"negative buffer limit", req(proto.Message{Sn: 1, File: 5, BufLimit: -1}), "buffer limit of -1"},
		{"frontier behind sn", req(proto.Message{Sn: 1, File: 5, Frontier: 1}), "frontier 1 with sn 1"},
		{"ack by unknown position", req(proto.Message{Sn: 1, File: 5, Acks: []proto.Ack{{ID: 1, By: 9}}}), "by sn 9 out of range"},
		{"reply nobody awaits", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 0, File: 0}), "awaits none"},
		{"reply with a file the sender lacks", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 2, File: 5}), "does not store"},
		{"reply of unknown status", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 2, File: 1, Status: 9}), "unknown status"},
		{"push of a file the sender lacks", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 5}}}), "bad push"},
		{"push into another slot", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 3}}}), "does not share the slot"},
		{"two pushes into one slot", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 2}, {ID: 2, Sn: 3, File: 2}}}), "occupied"},
		{"message from itself", proto.Message{Type: proto.MsgReply, From: 1, To: 1, Epoch: 1}, "bad sender"},
		{"message for another rank", proto.Message{Type: proto.MsgReply, From: 0, To: 0, Epoch: 1}, "bad sender"},
		{"unknown message type", fromRank0(proto.Message{Type: 9}), "unknown type"},
		{"client sn out of range", proto.ClientRequest{Sn: 5}, "sn 5 out of range"},
		{"client sn twice", proto.ClientRequest{Sn: 2}, "requested twice"},
		{"read nobody issued", proto.ReadDone{PC: 3, Epoch: 1}, "none is in flight"},
		{"read of another rank's chunk", proto.ReadDone{PC: 0, Epoch: 1}, "none is in flight"},
	} {
		rank := c.Ranks[1]
		before, stats := rank.String(), rank.Stats()
		err := rank.Step(tc.ev)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if rank.HasReady() || rank.String() != before || rank.Stats() != stats {
			t.Errorf("%s: the refused event changed the rank:\n%s\nbecame\n%s", tc.name, before, rank.String())
		}
	}
}

func TestRequestBeforeEpoch(t *testing.T) {
	c, err := prototest.New(prototest.Options{Files: []int{4}, K: 2, MemFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ranks[0].Step(proto.ClientRequest{Sn: 0}); err == nil || !strings.Contains(err.Error(), "before the first epoch") {
		t.Fatalf("request before any epoch: %v", err)
	}
}
