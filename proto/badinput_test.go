package proto_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// TestBadInputIsAnErrorAndChangesNothing feeds rank 1 malformed events
// and checks each is refused with an error naming the problem while the
// rank's state stays as it was.
func TestBadInputIsAnErrorAndChangesNothing(t *testing.T) {
	c, err := inproc.New(inproc.Options{Files: []int{4, 4}, K: 2, MemFraction: 0.5, RemoteMemBytes: 8, Window: 4})
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
		{"reply of unknown status", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 2, File: 1, Status: 9}), "status 9"},
		{"reply from another slot", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 2, File: 0}), "does not share its slot"},
		{"reply of negative size", fromRank0(proto.Message{Type: proto.MsgReply, Sn: 2, File: 1, Size: -5}), "size -5"},
		{"push of a file the sender lacks", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 5}}}), "bad push"},
		{"push into another slot", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 3}}}), "does not share the slot"},
		{"two pushes into one slot", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 2}, {ID: 2, Sn: 3, File: 0}}}), "occupied"},
		{"push ID twice", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 5, Sn: 3, File: 2}, {ID: 5, Sn: 4, File: 3}}}), "repeats"},
		{"push of status redirect", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 2, Status: proto.StatusRedirect}}}), "status redirect"},
		{"push beyond the grant", fromRank0(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 1, Sn: 3, File: 2, Size: 1 << 40}}}), "exceed the 8 bytes granted"},
		{"message two epochs ahead", proto.Message{Type: proto.MsgReply, From: 0, To: 1, Epoch: 3}, "for epoch 3 while in epoch 1"},
		{"message from itself", proto.Message{Type: proto.MsgReply, From: 1, To: 1, Epoch: 1}, "bad sender"},
		{"message for another rank", proto.Message{Type: proto.MsgReply, From: 0, To: 0, Epoch: 1}, "bad sender"},
		{"unknown message type", fromRank0(proto.Message{Type: 9}), "unknown type 9"},
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

// TestReadNamingAnotherChunksFile: a read that says a file of another
// chunk is damaged is refused, with either policy, and changes nothing.
func TestReadNamingAnotherChunksFile(t *testing.T) {
	for _, policy := range []string{inproc.Paper, inproc.Window} {
		c, err := inproc.New(inproc.Options{Files: []int{4, 4}, K: 2, MemFraction: 0.5, RemoteMemBytes: 8, Window: 4, Policy: policy})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartEpoch(1, [][]proto.FileID{{0, 1, 2, 3}, {4, 5, 6, 7}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Request(0, 0); err != nil {
			t.Fatal(err)
		}
		if len(c.Reads[0]) == 0 {
			t.Fatalf("%s: no read in flight", policy)
		}
		rd := c.Reads[0][0]
		lo, hi := c.Mapping.PCFiles(rd.PC)
		rank := c.Ranks[0]
		before := rank.String()
		for _, f := range []proto.FileID{lo - 1, hi, 5} {
			if f < 0 {
				continue
			}
			err := rank.Step(proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch, Damaged: []proto.FileID{lo, f}})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("finds file %d damaged, which is not in it", f)) {
				t.Errorf("%s: read of pc %d naming file %d damaged: %v", policy, rd.PC, f, err)
			}
			if rank.String() != before {
				t.Errorf("%s: the refused read changed the rank:\n%s\nbecame\n%s", policy, before, rank.String())
			}
		}
	}
}

func TestRequestBeforeEpoch(t *testing.T) {
	c, err := inproc.New(inproc.Options{Files: []int{4}, K: 2, MemFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ranks[0].Step(proto.ClientRequest{Sn: 0}); err == nil || !strings.Contains(err.Error(), "before the first epoch") {
		t.Fatalf("request before any epoch: %v", err)
	}
}

// TestDuplicateFilesFromAPeerAreRefused replays what a faulty peer might
// send around a redirect: a normal reply after the redirect, the push
// twice, the same file under another push ID. Each is an error and no file
// is delivered twice.
func TestDuplicateFilesFromAPeerAreRefused(t *testing.T) {
	c, err := inproc.New(inproc.Options{Files: []int{4, 4}, K: 2, MemFraction: 0.5, RemoteMemBytes: 8, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartEpoch(1, [][]proto.FileID{{4, 5, 0}, {6, 7, 1, 2, 3}}, nil); err != nil {
		t.Fatal(err)
	}
	rank := c.Ranks[1]
	if err := c.Request(1, 2); err != nil { // rank 1 asks rank 0 for file 1
		t.Fatal(err)
	}
	msg := func(m proto.Message) proto.Message { m.From, m.To, m.Epoch = 0, 1, 1; return m }
	steps := []struct {
		ev   proto.Event
		want string // "" for accepted
	}{
		{msg(proto.Message{Type: proto.MsgReply, Sn: 2, Status: proto.StatusRedirect, PushID: 5}), ""},
		{msg(proto.Message{Type: proto.MsgReply, Sn: 2, Status: proto.StatusRedirect, PushID: 6}), "awaits none"},
		{msg(proto.Message{Type: proto.MsgReply, Sn: 2, File: 1}), "awaits none"},
		{msg(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 5, Sn: 2, File: 1, Size: 1}}}), ""},
		{msg(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 5, Sn: 2, File: 1, Size: 1}}}), "repeats file 1"},
		{msg(proto.Message{Type: proto.MsgPush, Pushes: []proto.Pushed{{ID: 7, Sn: 4, File: 1, Size: 1}}}), "repeats file 1"},
	}
	delivered := 0
	for i, st := range steps {
		err := rank.Step(st.ev)
		if (st.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), st.want)) {
			t.Fatalf("step %d: error %v, want %q", i, err, st.want)
		}
		delivered += len(rank.Ready().Deliveries)
		rank.Advance(rank.Ready())
	}
	if delivered != 1 {
		t.Fatalf("%d deliveries, want 1", delivered)
	}
}

// TestRepliesAndPushesComeFromTheHome: with three ranks, a rank that does
// not store a position's file may not answer it nor push for it.
func TestRepliesAndPushesComeFromTheHome(t *testing.T) {
	c, err := inproc.New(inproc.Options{Files: []int{2, 2, 2}, K: 2, MemFraction: 1, RemoteMemBytes: 8, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 asks rank 1 for file 2 (slot 0 at rank 1); rank 2 holds file 4
	// in its own slot 0.
	if err := c.StartEpoch(1, [][]proto.FileID{{2, 3, 0, 1}, {5}, {4}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Request(0, 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range []proto.Message{
		{Type: proto.MsgReply, From: 2, To: 0, Epoch: 1, Sn: 0, File: 4},
		{Type: proto.MsgPush, From: 2, To: 0, Epoch: 1, Pushes: []proto.Pushed{{ID: 1, Sn: 1, File: 5}}},
	} {
		if err := c.Ranks[0].Step(m); err == nil {
			t.Errorf("%v was accepted", m)
		}
	}
}

// TestHeldMessagesThatProveBadAreDropped: a message held for an epoch the
// rank has not started is checked when it starts; a bad one is dropped and
// reported in Ready.Dropped, and the epoch starts anyway.
func TestHeldMessagesThatProveBadAreDropped(t *testing.T) {
	c, err := inproc.New(inproc.Options{Files: []int{4, 4}, K: 2, MemFraction: 0.5, RemoteMemBytes: 8, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	rank := c.Ranks[1]
	good := proto.Message{Type: proto.MsgRequest, From: 0, To: 1, Epoch: 1, Sn: 0, File: 4, Frontier: 1}
	bad := proto.Message{Type: proto.MsgRequest, From: 0, To: 1, Epoch: 1, Sn: 7, File: 4, Frontier: 8}
	for _, m := range []proto.Message{good, bad} {
		if err := rank.Step(m); err != nil {
			t.Fatalf("holding %v: %v", m, err)
		}
	}
	if err := rank.Step(proto.EpochStart{Epoch: 1, Traces: [][]proto.FileID{{4, 5, 0}, {6, 7, 1, 2, 3}}}); err != nil {
		t.Fatalf("epoch start: %v", err)
	}
	rd := rank.Ready()
	if len(rd.Dropped) != 1 || !strings.Contains(rd.Dropped[0].Error(), "sn 7 out of range") || len(rd.Reads) != 1 {
		t.Fatalf("dropped %v, reads %v: want the bad request dropped and the good one served", rd.Dropped, rd.Reads)
	}
	if err := rank.Step(proto.EpochStart{Epoch: 2, Traces: [][]proto.FileID{{4, 5, 0}, {6, 7, 1, 2, 3}}}); err == nil ||
		!strings.Contains(err.Error(), "before the last Ready was advanced") {
		t.Fatalf("epoch start over an unprocessed Ready: %v", err)
	}
}
