package prototest

import (
	"fmt"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// FuzzHostilePeer plays an honest schedule prefix, then feeds a rank
// messages built from fuzzer bytes: plausible but possibly lying peers.
// Whatever they say, a rank must not panic; a message it refuses must
// leave it unchanged; one it accepts must leave it consistent, within its
// memory limits, and delivering no file twice. The first byte of the
// prefix picks the policy.
func FuzzHostilePeer(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{0, 1, 0, 1, 2, 0, 3})
	f.Add([]byte("honest prefix"), []byte{2, 1, 0, 2, 5, 1, 1, 0, 0, 0})
	f.Add([]byte{}, []byte{3, 0, 1, 1, 2, 2, 1, 3, 4, 0, 1})
	f.Add([]byte{0, 2, 1, 0, 1, 1, 2, 2, 0, 2, 1}, []byte{1, 4, 0, 2, 5, 3, 1, 0, 2, 2, 1, 3})
	f.Fuzz(func(t *testing.T, prefix, lies []byte) {
		opts := inproc.Options{Files: []int{6, 5, 7}, K: 3, MemFraction: 0.5, RemoteMemBytes: 12, Window: 4, Seed: 3}
		if len(prefix) > 0 && prefix[0]%2 == 0 {
			opts.Policy, opts.MemBytes = inproc.Window, []int64{3, 3, 3} // a chunk each
		}
		c, err := inproc.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StartEpoch(1, inproc.GenTraces(c.Mapping, 1, 1), nil); err != nil {
			t.Fatal(err)
		}
		honest := &byteChooser{data: prefix}
		for i := 0; i < 40 && len(honest.data) > 0; i++ {
			if err := honestStep(c, honest); err != nil {
				t.Fatal(err)
			}
		}
		b := &byteChooser{data: lies}
		for len(b.data) > 0 {
			to := b.IntN(3)
			msg := lie(b, c, to)
			rank := c.Ranks[to]
			before, stats := rank.String(), rank.Stats()
			if err := c.Step(to, msg); err != nil {
				if rank.HasReady() || rank.String() != before || rank.Stats() != stats {
					t.Fatalf("refused %v (%v) but changed the rank", msg, err)
				}
				continue
			}
			if err := rank.CheckInvariants(); err != nil {
				t.Fatalf("accepted %v: %v", msg, err)
			}
			if err := atMostOncePerRank(c, to); err != nil {
				t.Fatalf("accepted %v: %v", msg, err)
			}
		}
	})
}

// honestStep takes one step of an honest run: a request, a delivery or a
// read completion, as the chooser decides.
func honestStep(c *inproc.Cluster, ch *byteChooser) error {
	switch ch.IntN(3) {
	case 0:
		r := ch.IntN(len(c.Ranks))
		sn := int32(ch.IntN(len(c.Traces[r]) + 1))
		if int(sn) < len(c.Traces[r]) && c.Delivered[r][sn] == proto.NoFile {
			_ = c.Request(r, sn) // a repeated position is refused; fine
		}
	case 1:
		if len(c.Net) > 0 {
			return c.DeliverMsg(ch.IntN(len(c.Net)))
		}
	case 2:
		r := ch.IntN(len(c.Ranks))
		if len(c.Reads[r]) > 0 {
			return c.CompleteRead(r, ch.IntN(len(c.Reads[r])), false)
		}
	}
	return nil
}

// lie builds a message for rank to from fuzzer bytes, with fields drawn
// near the values an honest peer would use.
func lie(b *byteChooser, c *inproc.Cluster, to int) proto.Message {
	from := b.IntN(3)
	small := func() int32 { return int32(b.IntN(24)) - 2 }
	m := proto.Message{
		Type: proto.MsgType(b.IntN(9)), From: int32(from), To: int32(to), Epoch: uint32(b.IntN(3)),
		Sn: small(), File: proto.FileID(small()), Size: int64(small()), BufLimit: int64(small()),
		Frontier: small(), Status: proto.Status(b.IntN(5)), PushID: uint64(b.IntN(8)),
	}
	for i := b.IntN(3); i > 0; i-- {
		m.Acks = append(m.Acks, proto.Ack{ID: uint64(b.IntN(8)), By: small()})
		m.Pushes = append(m.Pushes, proto.Pushed{ID: uint64(b.IntN(8)), Sn: small(), File: proto.FileID(small()), Size: int64(small()),
			Status: proto.Status(b.IntN(5))})
		m.Answers = append(m.Answers, proto.Answer{Rank: int32(b.IntN(3)), Sn: small(), File: proto.FileID(small()), At: small(), Size: int64(small())})
		m.Ahead = append(m.Ahead, small())
	}
	return m
}

// atMostOncePerRank checks that rank r never received one file for two
// positions. (A lying peer can make two ranks receive the same file; a
// rank can only guard itself.)
func atMostOncePerRank(c *inproc.Cluster, r int) error {
	seen := map[proto.FileID]int{}
	for sn, f := range c.Delivered[r] {
		if f == proto.NoFile {
			continue
		}
		if prev, ok := seen[f]; ok {
			return fmt.Errorf("rank %d: file %d delivered at sn %d and %d", r, f, prev, sn)
		}
		seen[f] = sn
	}
	return nil
}
