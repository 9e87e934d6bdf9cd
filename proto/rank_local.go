package proto

import "fmt"

// serve answers rq, whose file has local slot x, at its home (this rank):
// from memory when the policy finds a valid slot, else by waiting for a
// read in flight or by a refill (Redox Alg. 2).
func (r *Rank) serve(rq req, x int32) {
	if !r.fromMemory(rq, x) {
		r.stats.Misses++
		r.wait(rq, x)
	}
}

// fromMemory answers rq from the slot the policy picks, if any.
func (r *Rank) fromMemory(rq req, x int32) bool {
	v, o := int(x)/r.k, int(x)%r.k
	y := r.policy.Slot(r.validOf(v), o)
	if y >= 0 {
		r.take(rq, int32(v*r.k+y), FromMemory)
	}
	return y >= 0
}

// wait serves rq, whose slot x holds no file, from a read: as the waiter of
// a pending slot, queued behind its waiter, or by a refill.
func (r *Rank) wait(rq req, x int32) {
	switch r.state[x] {
	case slotPending:
		if r.waiter[x].from < 0 {
			r.waiter[x] = rq
		} else {
			r.queue[x] = append(r.queue[x], rq)
		}
	case slotEmpty:
		r.refill(rq, x)
	default:
		panic(fmt.Sprintf("proto: invariant violated: rank %d: redirector declined valid slot %d", r.me, x))
	}
}

// take delivers the file of valid slot x to rq and invalidates the slot
// (self-invalidation).
func (r *Rank) take(rq req, x int32, src Source) {
	f := r.slotFile[x]
	r.setEmpty(x)
	r.answer(rq, f, src, x)
}

// answer hands f, which left slot x, to rq: a delivery for a local client,
// a reply (and prefetched pushes) for a peer.
func (r *Rank) answer(rq req, f FileID, src Source, x int32) {
	sz, st := r.size(f), r.status(f)
	if int(rq.from) == r.me {
		r.deliver(Delivery{Sn: rq.sn, File: f, Size: sz, Source: src, Status: st})
		if src == FromMemory {
			r.stats.LocalHits++
		}
		return
	}
	r.send(Message{Type: MsgReply, To: rq.from, Sn: rq.sn, File: f, Size: sz, Status: st})
	r.stats.RemoteServed++
	r.prefetch(rq, x)
}

// fail tells rq that its file cannot be produced.
func (r *Rank) fail(rq req) {
	if int(rq.from) == r.me {
		r.deliver(Delivery{Sn: rq.sn, File: NoFile, Status: StatusReadFailed})
		return
	}
	r.send(Message{Type: MsgReply, To: rq.from, Sn: rq.sn, File: NoFile, Status: StatusReadFailed})
}

// status is own file f's as it leaves: ok, or damaged on storage.
func (r *Rank) status(f FileID) Status {
	if r.damaged[f] {
		return StatusDamaged
	}
	return StatusOK
}

func (r *Rank) deliver(d Delivery) {
	r.rd.Deliveries = append(r.rd.Deliveries, d)
	if d.Status.HasFile() {
		r.stats.Delivered++
		r.stats.BytesDelivered += d.Size
	}
}

func (r *Rank) send(msg Message) {
	msg.From, msg.Epoch = int32(r.me), r.epoch
	r.rd.Sends = append(r.rd.Sends, msg)
}

// Slot state transitions. A valid slot's bytes are always counted in held;
// a pending slot's are counted when it was filled as a non-target slot.

func (r *Rank) setPending(x int32, f FileID, count bool) {
	v, o := int(x)/r.k, int(x)%r.k
	r.state[x], r.slotFile[x] = slotPending, f
	bitset(r.emptyOf(v)).clear(o)
	if count {
		r.count(x)
	}
}

func (r *Rank) setValid(x int32) {
	v, o := int(x)/r.k, int(x)%r.k
	r.state[x] = slotValid
	bitset(r.emptyOf(v)).clear(o)
	bitset(r.validOf(v)).set(o)
	if !r.counted.has(int(x)) {
		r.count(x)
	}
}

func (r *Rank) setEmpty(x int32) {
	v, o := int(x)/r.k, int(x)%r.k
	if r.counted.has(int(x)) {
		r.held -= r.size(r.slotFile[x])
		r.counted.clear(int(x))
	}
	r.state[x], r.slotFile[x] = slotEmpty, NoFile
	bitset(r.emptyOf(v)).set(o)
	bitset(r.validOf(v)).clear(o)
}

func (r *Rank) count(x int32) {
	r.held += r.size(r.slotFile[x])
	r.counted.set(int(x))
}
