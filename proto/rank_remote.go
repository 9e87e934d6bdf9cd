package proto

import (
	"fmt"
	"slices"
)

// owner is the requester-side state kept for one owner rank H.
type owner struct {
	// buf is this rank's buffer VC for H: H-local slot → pushed file.
	buf map[int32]bufEntry
	// acks are consumed pushes not yet reported to H.
	acks []Ack
	// stolen maps a position a push was meant for, when another position
	// took that push, to the ack saying so; it is repeated with the
	// position's own request so that H frees the reservation first.
	stolen map[int32]Ack
	// waiting maps a push ID to the position a redirect told to wait for it.
	waiting map[uint64]int32
	// bytes is the size of the files in buf.
	bytes int64
}

type bufEntry struct {
	id     uint64
	sn     int32
	file   FileID
	size   int64
	status Status // ok, or damaged at its home
}

func (r *Rank) resetRemote() {
	n := r.m.Ranks()
	r.owners = make([]owner, n)
	r.peers = make([]peer, n)
	for h := range r.owners {
		if h == r.me {
			continue
		}
		r.owners[h] = owner{buf: map[int32]bufEntry{}, stolen: map[int32]Ack{}, waiting: map[uint64]int32{}}
		r.peers[h] = r.newPeer(h)
	}
	r.requested = newBitset(len(r.traces[r.me]))
	r.awaiting = newBitset(len(r.traces[r.me]))
	if len(r.got) != (r.m.Files()+63)/64 {
		r.got = newBitset(r.m.Files())
	}
	r.got.reset()
	r.buffered = 0
	r.frontier = 0
}

// clientRequest serves a local client's request for position sn of this
// rank's trace (Redox Alg. 1).
func (r *Rank) clientRequest(sn int32) error {
	if !r.started {
		return fmt.Errorf("proto: rank %d: request for sn %d before the first epoch", r.me, sn)
	}
	trace := r.traces[r.me]
	if sn < 0 || int(sn) >= len(trace) {
		return fmt.Errorf("proto: rank %d: sn %d out of range [0, %d)", r.me, sn, len(trace))
	}
	if r.requested.has(int(sn)) {
		return fmt.Errorf("proto: rank %d: sn %d requested twice in epoch %d", r.me, sn, r.epoch)
	}
	r.requested.set(int(sn))
	r.frontier = max(r.frontier, sn+1)
	r.stats.Requests++
	f := trace[sn]
	if r.isLocal(f) {
		r.serve(req{from: int32(r.me), sn: sn, file: f}, r.slotOf(f))
		return nil
	}
	h, x := r.m.Locate(f)
	if r.takeBuffered(h, x, sn) {
		r.stats.PrefetchHits++
		return nil
	}
	r.requestRemote(h, sn, f)
	return nil
}

// takeBuffered delivers the file pushed into buffer slot x of owner h to
// position sn, if there is one.
func (r *Rank) takeBuffered(h int, x int32, sn int32) bool {
	o := &r.owners[h]
	e, ok := o.buf[x]
	if !ok {
		return false
	}
	delete(o.buf, x)
	o.bytes -= e.size
	r.buffered -= e.size
	r.deliver(Delivery{Sn: sn, File: e.file, Size: e.size, Source: FromBuffer, Status: e.status})
	a := Ack{ID: e.id, By: sn}
	o.acks = append(o.acks, a)
	if e.sn != sn {
		o.stolen[e.sn] = a
	}
	return true
}

// requestRemote asks owner h for position sn (file f), reporting the
// pushes consumed since the last request (Redox Alg. 4/5, requester side).
func (r *Rank) requestRemote(h int, sn int32, f FileID) {
	o := &r.owners[h]
	acks := o.acks
	o.acks = nil
	if a, ok := o.stolen[sn]; ok {
		if !slices.Contains(acks, a) {
			acks = append(acks, a)
		}
		delete(o.stolen, sn)
	}
	r.awaiting.set(int(sn))
	r.send(Message{Type: MsgRequest, To: int32(h), Sn: sn, File: f, BufLimit: r.share, Frontier: r.frontier, Acks: acks})
	r.stats.RemoteRequests++
}

// maxDeferred bounds the messages held for an epoch this rank has not
// started yet.
const maxDeferred = 1 << 16

// receive handles a message from a peer.
func (r *Rank) receive(msg Message) error {
	if int(msg.From) < 0 || int(msg.From) >= r.m.Ranks() || int(msg.From) == r.me || int(msg.To) != r.me {
		return fmt.Errorf("proto: rank %d: message %v has a bad sender or receiver", r.me, msg)
	}
	if msg.Type < MsgRequest || msg.Type > MsgDone || msg.Type == MsgGrant || int(msg.Status) >= len(statusNames) {
		return fmt.Errorf("proto: rank %d: message from rank %d of unknown type %d or status %d", r.me, msg.From, msg.Type, msg.Status)
	}
	switch {
	case r.started && msg.Epoch > r.epoch+1:
		return fmt.Errorf("proto: rank %d: message from rank %d for epoch %d while in epoch %d", r.me, msg.From, msg.Epoch, r.epoch)
	case !r.started || msg.Epoch > r.epoch:
		if len(r.deferred) >= maxDeferred {
			return fmt.Errorf("proto: rank %d: %d messages already held for the next epoch", r.me, maxDeferred)
		}
		r.deferred = append(r.deferred, msg)
		return nil
	case msg.Epoch < r.epoch:
		r.stats.Stale++
		return nil
	}
	switch msg.Type {
	case MsgRequest:
		return r.onRequest(msg)
	case MsgReply:
		return r.onReply(msg)
	case MsgDone: // nothing is kept for a rank that asks nothing more
		return nil
	}
	return r.onPush(msg)
}

// onReply handles an owner's answer to an on-demand request.
func (r *Rank) onReply(msg Message) error {
	if err := r.checkReply(msg); err != nil {
		return err
	}
	sn, h := msg.Sn, int(msg.From)
	r.awaiting.clear(int(sn))
	switch msg.Status {
	case StatusOK, StatusDamaged:
		r.got.set(int(msg.File))
		r.deliver(Delivery{Sn: sn, File: msg.File, Size: msg.Size, Source: FromRemote, Status: msg.Status})
	case StatusReadFailed:
		r.deliver(Delivery{Sn: sn, File: NoFile, Status: StatusReadFailed})
	case StatusRedirect:
		r.redirected(h, sn, msg.PushID)
	}
	return nil
}

// checkReply validates a reply before any of it is applied: it answers a
// request outstanding with its sender, and a file it carries is the
// sender's, shares the requested file's slot and arrives for the first time.
func (r *Rank) checkReply(msg Message) error {
	sn, h := msg.Sn, int(msg.From)
	trace := r.traces[r.me]
	if sn < 0 || int(sn) >= len(trace) || !r.awaiting.has(int(sn)) || !r.ownedBy(trace[sn], h) {
		return fmt.Errorf("proto: rank %d: reply from rank %d for sn %d, which awaits none from it", r.me, h, sn)
	}
	switch msg.Status {
	case StatusOK, StatusDamaged:
		f := msg.File
		if !r.ownedBy(f, h) || msg.Size < 0 {
			return fmt.Errorf("proto: rank %d: rank %d replied with file %d (size %d), which it does not store", r.me, h, f, msg.Size)
		}
		if !r.sameSlot(f, trace[sn]) {
			return fmt.Errorf("proto: rank %d: rank %d replied to sn %d with file %d, which does not share its slot", r.me, h, sn, f)
		}
		if r.got.has(int(f)) {
			return fmt.Errorf("proto: rank %d: file %d from rank %d arrived twice", r.me, f, h)
		}
	case StatusRedirect:
		if _, dup := r.owners[h].waiting[msg.PushID]; dup {
			return fmt.Errorf("proto: rank %d: rank %d redirected two positions to push %d", r.me, h, msg.PushID)
		}
	}
	return nil
}

// redirected handles the owner's answer that it already pushed a file
// (push id) for position sn.
func (r *Rank) redirected(h int, sn int32, id uint64) {
	r.stats.Redirects++
	o := &r.owners[h]
	f := r.traces[r.me][sn]
	_, x := r.m.Locate(f)
	if e, ok := o.buf[x]; ok && e.id == id {
		r.takeBuffered(h, x, sn)
		return
	}
	if a, ok := o.stolen[sn]; ok && a.ID == id {
		// Another position took the push; ask again, with the ack first.
		r.requestRemote(h, sn, f)
		return
	}
	o.waiting[id] = sn
}

// onPush places prefetched files in this rank's buffer VC for the sender,
// or hands one straight to a position a redirect told to wait for it.
func (r *Rank) onPush(msg Message) error {
	if err := r.checkPushes(msg); err != nil {
		return err
	}
	h := int(msg.From)
	o := &r.owners[h]
	for _, p := range msg.Pushes {
		r.got.set(int(p.File))
		if sn, ok := o.waiting[p.ID]; ok {
			delete(o.waiting, p.ID)
			r.deliver(Delivery{Sn: sn, File: p.File, Size: p.Size, Source: FromBuffer, Status: p.Status})
			o.acks = append(o.acks, Ack{ID: p.ID, By: sn})
			continue
		}
		_, x := r.m.Locate(p.File)
		o.buf[x] = bufEntry{id: p.ID, sn: p.Sn, file: p.File, size: p.Size, status: p.Status}
		o.bytes += p.Size
		r.buffered += p.Size
		r.stats.PushesReceived++
	}
	return nil
}

// checkPushes validates a push message before any of it is applied: each
// file belongs to the sender, shares the slot of the position it is meant
// for, arrives for the first time, and finds its buffer slot empty and
// room within the bytes granted to the sender.
func (r *Rank) checkPushes(msg Message) error {
	h := int(msg.From)
	o := &r.owners[h]
	trace := r.traces[r.me]
	bytes := o.bytes
	for i, p := range msg.Pushes {
		if p.Sn < 0 || int(p.Sn) >= len(trace) || !r.ownedBy(p.File, h) || p.Size < 0 || !p.Status.HasFile() {
			return fmt.Errorf("proto: rank %d: bad push from rank %d: sn %d file %d size %d status %s", r.me, h, p.Sn, p.File, p.Size, p.Status)
		}
		if !r.ownedBy(trace[p.Sn], h) || !r.sameSlot(p.File, trace[p.Sn]) {
			return fmt.Errorf("proto: rank %d: push from rank %d: file %d does not share the slot of sn %d", r.me, h, p.File, p.Sn)
		}
		if r.got.has(int(p.File)) || slices.ContainsFunc(msg.Pushes[:i], func(q Pushed) bool { return q.File == p.File || q.ID == p.ID }) {
			return fmt.Errorf("proto: rank %d: push %d from rank %d repeats file %d or its push ID", r.me, p.ID, h, p.File)
		}
		if _, waited := o.waiting[p.ID]; waited {
			continue
		}
		_, x := r.m.Locate(p.File)
		if _, full := o.buf[x]; full || r.placedBefore(msg.Pushes[:i], o, x) {
			return fmt.Errorf("proto: rank %d: push %d from rank %d found buffer slot %d occupied", r.me, p.ID, h, x)
		}
		if bytes += p.Size; bytes > r.share {
			return fmt.Errorf("proto: rank %d: pushes from rank %d exceed the %d bytes granted to it", r.me, h, r.share)
		}
	}
	return nil
}

// placedBefore reports whether one of the earlier pushes of a message goes
// into buffer slot x.
func (r *Rank) placedBefore(earlier []Pushed, o *owner, x int32) bool {
	return slices.ContainsFunc(earlier, func(q Pushed) bool {
		_, waited := o.waiting[q.ID]
		_, y := r.m.Locate(q.File)
		return !waited && y == x
	})
}

// sameSlot reports whether files f and g, both stored by one rank, share a
// slot.
func (r *Rank) sameSlot(f, g FileID) bool {
	hf, xf := r.m.Locate(f)
	hg, xg := r.m.Locate(g)
	return hf == hg && xf == xg
}

func (r *Rank) ownedBy(f FileID, h int) bool {
	first, n := r.m.RankFiles(h)
	return f >= first && int(f-first) < n
}
