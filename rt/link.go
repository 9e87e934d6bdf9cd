package rt

import (
	"fmt"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// link is the rank's traffic with its peers in one epoch: the sends in
// flight, what the peers sent that is not yet stepped (its inbox), and
// which peers said they are done. It moves bytes and keeps order; the
// loop steps the messages it hands over.
type link struct {
	me, size int
	comm     collectives.Comm
	pool     *recvPool
	epoch    uint32
	sends    []pendingSend
	stuck    []bool // per rank, scratch for testSends
	// A file's bytes go in synchronous mode (Issend), which completes
	// once the peer has posted its receive, and at most sendMem bytes of
	// them at once, peerSendMem to one peer (sending: the bytes in
	// flight, per peer and in all); the rest wait in queued, in order per
	// peer (queuedN over every peer). MPI copies what a send has not yet
	// put on the wire into buffers it keeps at their most, and a peer's
	// MPI what came before its receive: so both stay bounded (Footprint's
	// MPI term).
	sending  []int64
	sendingN int64
	queued   [][]pendingSend
	queuedN  int
	turn     int
	// inbox holds, per peer, what it sent that is not yet stepped, in
	// its order: messages whose files are still arriving, and what came
	// after them (see inbound); inboxed counts them over every peer.
	inbox   [][]inbound
	inboxed int
	// doneIn counts the peers whose MsgDone of this epoch was handed
	// over; doneFrom says which.
	doneIn   int
	doneFrom []bool
}

// pendingSend is a send in flight to rank to; frame must live, and file
// keep its bytes, until it completes.
type pendingSend struct {
	req   collectives.Request
	to    int
	frame []byte
	file  *file // a file's bytes (an Issend), or nil (a frame)
}

// inbound is what a peer sent, waiting to be stepped: a message (m) whose
// files' bytes are still arriving, one receive each (reqs, nil once
// complete), and the messages after it. The loop never waits for the
// bytes: the link posts the receives (MPI matches them in the order the
// peer sent) and hands the message over once they are in, and what the
// peer sent after it, after it.
type inbound struct {
	m     proto.Message
	files []*file
	reqs  []collectives.Request
}

func newLink(me, size int, comm collectives.Comm, pool *recvPool, epoch uint32) *link {
	return &link{me: me, size: size, comm: comm, pool: pool, epoch: epoch, doneFrom: make([]bool, size),
		inbox: make([][]inbound, size), stuck: make([]bool, size), sending: make([]int64, size), queued: make([][]pendingSend, size)}
}

// sendMem bounds the bytes of files a rank has in flight to its peers
// (a file larger goes alone).
const sendMem = 8 << 20

// peerSendMem bounds those to one peer, of size ranks: sendMem shared
// by the peers, at least 256 KiB each (a file larger goes alone to it).
func peerSendMem(size int) int64 { return max(256<<10, sendMem/int64(max(size-1, 1))) }

// mpiHeld bounds what MPI holds of files in flight to and from a rank
// of size ranks whose largest file has own bytes, the dataset's largest
// bytes: what it sent and a peer did not yet take (sendMem, or a larger
// file alone), and what each peer sent it before it posted the receive
// (peerSendMem, or a larger file alone). Open MPI over TCP copies what
// it has not yet put on the wire into buffers it keeps at their most:
// before this bound, a rank of 4 held 40-100 MiB more (BENCHMARKS.md,
// "MPI's buffers between the ranks").
func mpiHeld(size int, own, largest int64) int64 {
	if size < 2 {
		return 0
	}
	return max(sendMem, own) + int64(size-1)*max(peerSendMem(size), largest)
}

// canSend says whether n bytes more may go to rank to now.
func (k *link) canSend(to int, n int64) bool {
	if k.sendingN == 0 {
		return true
	}
	return k.sendingN+n <= sendMem && (k.sending[to] == 0 || k.sending[to]+n <= peerSendMem(k.size))
}

// sendFrame starts a send of the frame b to rank to.
func (k *link) sendFrame(b []byte, to int) error {
	req, err := k.comm.Isend(b, to, tagMsg)
	if err != nil {
		return err
	}
	k.sends = append(k.sends, pendingSend{req: req, to: to, frame: b})
	return nil
}

// sendFile sends the bytes of f to rank to, which holds it until the
// send completes: now, or once the bytes in flight leave room (canSend).
func (k *link) sendFile(f *file, to int) error {
	s := pendingSend{to: to, frame: f.data, file: f}
	if len(k.queued[to]) > 0 || !k.canSend(to, int64(len(f.data))) {
		k.queued[to] = append(k.queued[to], s)
		k.queuedN++
		return nil
	}
	return k.startFile(s)
}

// startFile starts the Issend of s's file.
func (k *link) startFile(s pendingSend) error {
	req, err := k.comm.Issend(s.frame, s.to, tagData)
	if err != nil {
		return err
	}
	s.req = req
	k.sends = append(k.sends, s)
	k.sending[s.to] += int64(len(s.frame))
	k.sendingN += int64(len(s.frame))
	return nil
}

// probe takes one message from a peer, if one is waiting: ok says
// whether one was.
func (k *link) probe() (ok bool, src, tag int, b []byte, err error) {
	ok, st, err := k.comm.Iprobe()
	if !ok || err != nil {
		return false, 0, 0, nil, err
	}
	b = make([]byte, st.Len)
	return true, st.Source, st.Tag, b, k.comm.Recv(b, st.Source, st.Tag)
}

// post takes a peer's frame: it posts a receive, into a recvPool
// buffer, for each file whose bytes follow, and queues the message.
func (k *link) post(src int, b []byte) error {
	m, files, err := decodeFrame(b)
	if err == nil && int(m.From) != src {
		err = fmt.Errorf("rt: message from rank %d claims to come from rank %d", src, m.From)
	}
	in := inbound{m: m, files: files, reqs: make([]collectives.Request, len(files))}
	items := cargo(&m)
	for i, f := range files {
		if err != nil {
			break
		}
		if !items[i].bytes { // damaged on its home's storage
			continue
		}
		if f.data, err = k.pool.get(int(items[i].size)); err == nil {
			f.pool = k.pool
			in.reqs[i], err = k.comm.Irecv(f.data, src, tagData)
		}
	}
	if err != nil {
		return fmt.Errorf("rt: rank %d: from rank %d: %w", k.me, src, err)
	}
	k.inbox[src] = append(k.inbox[src], in)
	k.inboxed++
	return nil
}

// next hands over the first thing src sent that is not yet stepped, once
// its files' bytes are in; ok is false when there is none or they are
// still arriving. A peer's MsgDone of this epoch counts here.
func (k *link) next(src int) (in inbound, ok bool, err error) {
	if len(k.inbox[src]) == 0 {
		return inbound{}, false, nil
	}
	first := &k.inbox[src][0]
	for i, req := range first.reqs {
		if req == nil {
			continue
		}
		done, _, err := req.Test()
		if err != nil {
			return inbound{}, false, fmt.Errorf("rt: rank %d: a file from rank %d: %w", k.me, src, err)
		}
		if !done {
			return inbound{}, false, nil
		}
		first.reqs[i] = nil
	}
	in = *first
	k.inbox[src] = k.inbox[src][1:]
	k.inboxed--
	if in.m.Type == proto.MsgDone && in.m.Epoch == k.epoch && !k.doneFrom[src] {
		k.doneIn++
		k.doneFrom[src] = true
	}
	return in, true, nil
}

// testSends forgets the sends that completed, releasing the files they
// held. Sends to one rank complete in about the order they started, and
// testing one that has not completed costs a turn of MPI's progress
// engine; so per rank it stops at the first that has not. A later one
// that did complete is found on a later round.
func (k *link) testSends() (bool, error) {
	clear(k.stuck)
	kept := k.sends[:0]
	for _, s := range k.sends {
		done := false
		if !k.stuck[s.to] {
			var err error
			if done, _, err = s.req.Test(); err != nil {
				return false, err
			}
			k.stuck[s.to] = !done
		}
		if !done {
			kept = append(kept, s)
		} else if s.file != nil {
			s.file.release()
			k.sending[s.to] -= int64(len(s.frame))
			k.sendingN -= int64(len(s.frame))
		}
	}
	moved := len(kept) < len(k.sends)
	clear(k.sends[len(kept):])
	k.sends = kept
	if k.queuedN == 0 {
		return moved, nil
	}
	k.turn = (k.turn + 1) % k.size // the first peer served turns round
	for i := range k.size {
		to := (k.turn + i) % k.size
		q := k.queued[to]
		n := 0
		for ; n < len(q) && k.canSend(to, int64(len(q[n].frame))); n++ {
			if err := k.startFile(q[n]); err != nil {
				return false, err
			}
		}
		if n > 0 {
			clear(q[:n])
			k.queued[to] = q[n:]
			k.queuedN -= n
			moved = true
		}
	}
	return moved, nil
}

// waitsOn reports whether the link waits for rank r: for what r sent
// to come in, for a send to r to complete, or (once this rank said it
// is done) for r's done.
func (k *link) waitsOn(r int, saidDone bool) bool {
	if saidDone && !k.doneFrom[r] || len(k.inbox[r]) > 0 || len(k.queued[r]) > 0 {
		return true
	}
	for _, s := range k.sends {
		if s.to == r {
			return true
		}
	}
	return false
}

// busy reports whether a send or something a peer sent is in flight.
func (k *link) busy() bool { return len(k.sends) > 0 || k.queuedN > 0 || k.inboxed > 0 }

// peersDone reports whether every peer said it is done this epoch.
func (k *link) peersDone() bool { return k.doneIn == k.size-1 }
