package proto

import (
	"fmt"
	"sort"
)

// peer is the owner-side state kept for one requester rank R.
type peer struct {
	// pos lists R's trace positions whose file lives here, ascending.
	pos []int32
	// seen marks positions R asked this rank for or reported consuming;
	// nothing is ever pushed for them.
	seen bitset
	// answered marks positions answered on demand.
	answered bitset
	// reserved maps a position to the push meant for it, while that push
	// is outstanding (not acknowledged).
	reserved map[int32]uint64
	// busy maps a local slot to the outstanding push into R's buffer slot
	// of the same index; a slot is pushed into only when R is known to
	// have emptied it.
	busy map[int32]uint64
	// out holds the outstanding pushes by ID.
	out      map[uint64]outPush
	outBytes int64
	limit    int64
	frontier int32 // the highest frontier R reported
	nextID   uint64
}

type outPush struct {
	sn   int32
	slot int32
	size int64
}

func (r *Rank) newPeer(h int) peer {
	trace := r.traces[h]
	p := peer{
		seen: newBitset(len(trace)), answered: newBitset(len(trace)),
		reserved: map[int32]uint64{}, busy: map[int32]uint64{}, out: map[uint64]outPush{},
		nextID: 1,
	}
	for i, f := range trace {
		if r.isLocal(f) {
			p.pos = append(p.pos, int32(i))
		}
	}
	return p
}

// onRequest serves a peer's on-demand request (Redox Alg. 5): its acks
// first, then a redirect if the position was already pushed for, else the
// local read and prefetch.
func (r *Rank) onRequest(msg Message) error {
	R := int(msg.From)
	p := &r.peers[R]
	if err := r.checkRequest(msg, p); err != nil {
		return err
	}
	for _, a := range msg.Acks {
		r.ack(p, a)
	}
	p.limit = msg.BufLimit
	p.frontier = max(p.frontier, msg.Frontier)
	p.seen.set(int(msg.Sn))
	if id, ok := p.reserved[msg.Sn]; ok {
		r.send(Message{Type: MsgReply, To: msg.From, Sn: msg.Sn, Status: StatusRedirect, PushID: id})
		return nil
	}
	p.answered.set(int(msg.Sn))
	r.serve(req{from: msg.From, sn: msg.Sn, file: msg.File}, r.slotOf(msg.File))
	return nil
}

func (r *Rank) checkRequest(msg Message, p *peer) error {
	trace := r.traces[msg.From]
	sn := msg.Sn
	switch {
	case sn < 0 || int(sn) >= len(trace):
		return fmt.Errorf("proto: rank %d: rank %d requested sn %d out of range [0, %d)", r.me, msg.From, sn, len(trace))
	case trace[sn] != msg.File:
		return fmt.Errorf("proto: rank %d: rank %d requested sn %d as file %d, its trace says %d", r.me, msg.From, sn, msg.File, trace[sn])
	case !r.isLocal(msg.File):
		return fmt.Errorf("proto: rank %d: rank %d requested file %d, stored elsewhere", r.me, msg.From, msg.File)
	case p.answered.has(int(sn)):
		return fmt.Errorf("proto: rank %d: rank %d requested sn %d again", r.me, msg.From, sn)
	case msg.BufLimit < 0:
		return fmt.Errorf("proto: rank %d: rank %d sent a buffer limit of %d", r.me, msg.From, msg.BufLimit)
	case msg.Frontier <= sn || int(msg.Frontier) > len(trace):
		return fmt.Errorf("proto: rank %d: rank %d sent frontier %d with sn %d", r.me, msg.From, msg.Frontier, sn)
	}
	for _, a := range msg.Acks {
		if a.By < 0 || int(a.By) >= len(trace) {
			return fmt.Errorf("proto: rank %d: rank %d acked push %d by sn %d out of range", r.me, msg.From, a.ID, a.By)
		}
	}
	return nil
}

// ack records that R consumed push a.ID at position a.By. Repeated acks
// are harmless.
func (r *Rank) ack(p *peer, a Ack) {
	p.seen.set(int(a.By))
	o, ok := p.out[a.ID]
	if !ok {
		return
	}
	delete(p.out, a.ID)
	delete(p.busy, o.slot)
	delete(p.reserved, o.sn)
	p.outBytes -= o.size
}

// prefetch pushes to requester R = rq.from, after the reply for position
// rq.sn from slot x, the files now in memory for its upcoming positions.
// The window is the next Window positions of R's trace whose home is this
// rank, counted from R's frontier (one past the highest position R has
// asked for: positions between sn and the frontier are in flight or will
// come from other workers soon). With one client asking in order the
// frontier is sn+1, the paper's window. A position is pushed for when it
// was never seen nor reserved, its slot here is valid, differs from x, and
// R's buffer slot is known empty (no outstanding push into it), while R's
// buffer grant allows.
func (r *Rank) prefetch(rq req, x int32) {
	if !r.cfg.Variant.Prefetch() || r.cfg.Window == 0 {
		return
	}
	p := &r.peers[rq.from]
	trace := r.traces[rq.from]
	from := max(rq.sn+1, p.frontier)
	i := sort.Search(len(p.pos), func(i int) bool { return p.pos[i] >= from })
	var pushes []Pushed
	for _, q := range p.pos[i:min(i+r.cfg.Window, len(p.pos))] {
		if p.seen.has(int(q)) {
			continue
		}
		if _, ok := p.reserved[q]; ok {
			continue
		}
		y := r.slotOf(trace[q])
		if y == x || r.state[y] != slotValid {
			continue
		}
		if _, ok := p.busy[y]; ok {
			continue
		}
		f := r.slotFile[y]
		sz := r.size(f)
		if p.outBytes+sz > p.limit {
			continue
		}
		pushes = append(pushes, r.push(p, q, y, f, sz))
	}
	if len(pushes) > 0 {
		r.send(Message{Type: MsgPush, To: rq.from, Pushes: pushes})
	}
}

// push takes the file f of slot y out of memory for position q.
func (r *Rank) push(p *peer, q, y int32, f FileID, sz int64) Pushed {
	id := p.nextID
	p.nextID++
	r.setEmpty(y)
	p.out[id] = outPush{sn: q, slot: y, size: sz}
	p.busy[y] = id
	p.reserved[q] = id
	p.outBytes += sz
	r.stats.Prefetched++
	r.stats.PrefetchedBytes += sz
	return Pushed{ID: id, Sn: q, File: f, Size: sz, Status: r.status(f)}
}
