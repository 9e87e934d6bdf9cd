package rt

import (
	"bytes"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// heldComm is a Local comm whose receives of files' bytes report
// complete only once released: bytes still on the wire.
type heldComm struct {
	*collectives.Local
	held    []*heldReq
	release bool
}

type heldReq struct {
	collectives.Request
	c *heldComm
}

func (r *heldReq) Test() (bool, collectives.Status, error) {
	if !r.c.release {
		return false, collectives.Status{}, nil
	}
	return r.Request.Test()
}

func (c *heldComm) Irecv(b []byte, src, tag int) (collectives.Request, error) {
	req, err := c.Local.Irecv(b, src, tag)
	if err != nil {
		return nil, err
	}
	h := &heldReq{req, c}
	c.held = append(c.held, h)
	return h, nil
}

// sendMsg sends m from rank 1 as the loop does: the frame, then each
// file's bytes.
func sendMsg(t *testing.T, from *link, m proto.Message, files []*file) {
	t.Helper()
	if err := from.sendFrame(encodeFrame(m, files), int(m.To)); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := from.sendFile(f, int(m.To)); err != nil {
			t.Fatal(err)
		}
	}
}

// receiveAll takes every frame waiting for k.
func receiveAll(t *testing.T, k *link) {
	t.Helper()
	for {
		ok, src, tag, b, err := k.probe()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if tag != tagMsg {
			t.Fatalf("tag %d from rank %d on top", tag, src)
		}
		if err := k.post(src, b); err != nil {
			t.Fatal(err)
		}
	}
}

// A peer's messages are handed over in the order it sent them, each once
// its files' bytes are in: a done that came after a file waits for the
// file, and counts once.
func TestLinkKeepsOrder(t *testing.T) {
	comms := collectives.NewLocal(2)
	held := &heldComm{Local: comms[0]}
	me := newLink(0, 2, held, &recvPool{}, 3)
	peer := newLink(1, 2, comms[1], &recvPool{}, 3)
	f := &file{id: 9, data: []byte("nine"), label: 2, crc: 7}
	sendMsg(t, peer, proto.Message{Type: proto.MsgReply, From: 1, To: 0, Epoch: 3, Sn: 4, File: 9, Size: 4, Status: proto.StatusOK}, []*file{f})
	sendMsg(t, peer, proto.Message{Type: proto.MsgDone, From: 1, To: 0, Epoch: 3}, nil)
	receiveAll(t, me)
	if me.inboxed != 2 || !me.busy() || !me.waitsOn(1, false) || me.waitsOn(0, false) {
		t.Fatalf("two messages in: inboxed %d, busy %v, waits on 1 %v", me.inboxed, me.busy(), me.waitsOn(1, false))
	}
	if _, ok, err := me.next(1); ok || err != nil {
		t.Fatalf("a reply handed over before its bytes came: %v %v", ok, err)
	}
	if me.peersDone() {
		t.Fatal("the done counted before the reply ahead of it was handed over")
	}
	held.release = true
	in, ok, err := me.next(1)
	if !ok || err != nil || in.m.Type != proto.MsgReply || len(in.files) != 1 || string(in.files[0].data) != "nine" || in.files[0].crc != 7 {
		t.Fatalf("the reply: %+v, %v, %v", in, ok, err)
	}
	in, ok, err = me.next(1)
	if !ok || err != nil || in.m.Type != proto.MsgDone || !me.peersDone() || me.busy() {
		t.Fatalf("the done: %+v, %v, %v; peers done %v, busy %v", in.m, ok, err, me.peersDone(), me.busy())
	}
	if _, ok, _ := me.next(1); ok {
		t.Fatal("something handed over twice")
	}
	// a second done of the epoch, or one of another, does not count again
	me.inbox[1] = append(me.inbox[1], inbound{m: proto.Message{Type: proto.MsgDone, From: 1, Epoch: 3}}, inbound{m: proto.Message{Type: proto.MsgDone, From: 1, Epoch: 4}})
	me.inboxed += 2
	me.next(1)
	me.next(1)
	if me.doneIn != 1 {
		t.Fatalf("dones counted: %d", me.doneIn)
	}
	if me.waitsOn(1, true) {
		t.Fatal("waits on a peer that said it is done")
	}
}

// A frame that claims another sender is refused, naming both.
func TestLinkRefusesForgedSender(t *testing.T) {
	comms := collectives.NewLocal(2)
	me := newLink(0, 2, comms[0], &recvPool{}, 1)
	err := me.post(1, encodeFrame(proto.Message{Type: proto.MsgDone, From: 0, To: 0, Epoch: 1}, nil))
	if err == nil || !strings.Contains(err.Error(), "message from rank 1 claims to come from rank 0") {
		t.Fatalf("got %v", err)
	}
}

// Sends are forgotten once complete, and the files they held released;
// a send not complete holds back the later ones to its rank only.
func TestLinkSends(t *testing.T) {
	comms := collectives.NewLocal(3)
	k := newLink(0, 3, comms[0], &recvPool{}, 1)
	released := 0
	f := &file{id: 1, data: []byte("x"), buf: newBuf(func() { released++ })}
	if _, err := comms[1].Irecv(make([]byte, 1), 0, tagData); err != nil { // the Issend completes once taken
		t.Fatal(err)
	}
	if err := k.sendFile(f, 1); err != nil {
		t.Fatal(err)
	}
	slow := &stalledReq{}
	k.sends = append(k.sends, pendingSend{req: slow, to: 2}, pendingSend{req: slow, to: 2})
	moved, err := k.testSends()
	if !moved || err != nil || len(k.sends) != 2 || released != 1 {
		t.Fatalf("moved %v, err %v, left %d, released %d", moved, err, len(k.sends), released)
	}
	if slow.tests != 1 {
		t.Fatalf("the stalled rank's sends were tested %d times in a round, want 1", slow.tests)
	}
	if !k.waitsOn(2, false) || k.waitsOn(1, false) {
		t.Fatal("waits on the wrong rank")
	}
}

// stalledReq never completes; it counts its tests.
type stalledReq struct{ tests int }

func (r *stalledReq) Test() (bool, collectives.Status, error) {
	r.tests++
	return false, collectives.Status{}, nil
}

// A rank has at most sendMem bytes of files in flight, peerSendMem to
// one peer, each send complete only once the peer posted its receive;
// the rest wait, in order, and go as those complete: what waits in MPI's
// buffers, its own and the peer's, stays bounded.
func TestLinkBoundsFilesInFlight(t *testing.T) {
	if peerSendMem(2) != sendMem || peerSendMem(3) != sendMem/2 || peerSendMem(100) != 256<<10 {
		t.Fatalf("peerSendMem: %d %d %d", peerSendMem(2), peerSendMem(3), peerSendMem(100))
	}
	const size = 100 // 256 KiB to a peer at once
	comms := collectives.NewLocal(size)
	me := newLink(0, size, comms[0], &recvPool{}, 1)
	peer := newLink(1, size, comms[1], &recvPool{}, 1)
	var files []*file
	m := proto.Message{Type: proto.MsgPush, From: 1, To: 0, Epoch: 1}
	for i := range 10 {
		f := &file{id: proto.FileID(i), data: bytes.Repeat([]byte{byte(i)}, 100<<10), label: 1}
		files = append(files, f)
		m.Pushes = append(m.Pushes, proto.Pushed{ID: uint64(i), Sn: int32(i), File: f.id, Size: int64(len(f.data)), Status: proto.StatusOK})
	}
	sendMsg(t, peer, m, files)
	if peer.sending[0] != 200<<10 || peer.sendingN != 200<<10 || peer.queuedN != 8 || len(peer.sends) != 3 || !peer.busy() || !peer.waitsOn(0, false) {
		t.Fatalf("10 files of 100 KiB to a peer that posted no receive: %d bytes sending, %d queued, %d sends; want 2 files, 8 and the frame", peer.sending[0], peer.queuedN, len(peer.sends))
	}
	if _, err := peer.testSends(); err != nil || peer.sendingN != 200<<10 || peer.queuedN != 8 {
		t.Fatalf("no receive posted, sends tested: %d bytes sending, %d queued, %v", peer.sendingN, peer.queuedN, err)
	}
	receiveAll(t, me) // posts a receive for each file
	for range 10 {
		if _, err := peer.testSends(); err != nil {
			t.Fatal(err)
		}
	}
	if peer.sendingN != 0 || peer.queuedN != 0 || peer.busy() {
		t.Fatalf("every receive posted: %d bytes sending, %d queued, busy %v", peer.sendingN, peer.queuedN, peer.busy())
	}
	in, ok, err := me.next(1)
	if !ok || err != nil || len(in.files) != 10 {
		t.Fatalf("the push: %v %v %d files", ok, err, len(in.files))
	}
	for i, f := range in.files {
		if !bytes.Equal(f.data, bytes.Repeat([]byte{byte(i)}, 100<<10)) {
			t.Fatalf("file %d arrived with another's bytes: out of order", i)
		}
	}
	// a file larger than the bound goes alone
	big := &file{id: 99, data: make([]byte, sendMem+1)}
	if err := peer.sendFile(big, 0); err != nil || peer.sendingN != sendMem+1 || peer.queuedN != 0 {
		t.Fatalf("a file over sendMem with nothing in flight: %v, %d bytes sending, %d queued", err, peer.sendingN, peer.queuedN)
	}
}
