package shm

import (
	"errors"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// A client's requests, taken from its ring to the rank's loop as rt's
// client events.

// read takes the client's requests to the loop, never more reads than
// the client may have unanswered or unread (room), so that the loop
// never waits on a client; a client that does not read its answers is
// named (watchStall).
func (c *client) read(reqs chan<- rt.ClientEvent) {
	var batch []Request
	nap := time.Duration(0)
	for c.alive() {
		room := c.room()
		var err error
		if batch, err = c.ring.takeRequests(batch[:0], room); err != nil {
			c.srv.logf("brandrt: client %d (pid %d): %v; dropping it\n", c.id, c.pid, err)
			c.conn.Close()
			return
		}
		switch {
		case len(batch) > 0:
			nap = 0
			c.forward(batch, reqs, true)
		case room == 0 && c.ring.requestsWaiting():
			// Reads wait for the client to release answers, which it
			// does without waking the rank.
			nap = min(max(2*nap, 20*time.Microsecond), 2*time.Millisecond)
			time.Sleep(nap)
		default:
			c.ring.waitRequests(100 * time.Millisecond)
		}
	}
	// A client may end an epoch and leave at once: its last requests
	// still count, but there is nobody left to read files for.
	if batch, err := c.ring.takeRequests(batch[:0], int(c.ring.slots)); err == nil {
		c.forward(batch, reqs, false)
	}
	if s := c.share; s != nil { // a training process went away
		c.srv.mu.Lock()
		if c.srv.sessions[int(c.pid)]--; c.srv.sessions[int(c.pid)] <= 0 {
			delete(c.srv.sessions, int(c.pid))
		}
		c.srv.mu.Unlock()
		reqs <- rt.Session{Share: rt.Share{Replica: s.Sn, Replicas: int32(s.Extra)}, Delta: -1, Pid: int(c.pid)}
	}
}

// forward hands requests to the loop; reads only when reads is set.
func (c *client) forward(batch []Request, reqs chan<- rt.ClientEvent, reads bool) {
	for _, r := range batch {
		switch {
		case r.Kind == KindEndEpoch:
			reqs <- rt.End{Epoch: r.Epoch, Share: rt.Share{Replica: r.Sn, Replicas: int32(r.Extra)}}
		case r.Kind == KindSession && c.share == nil && r.Extra > 0 && r.Extra <= 1<<20 && r.Sn >= 0 && uint32(r.Sn) < r.Extra:
			c.share = &r
			c.srv.mu.Lock()
			if c.srv.sessions == nil {
				c.srv.sessions = make(map[int]int)
			}
			c.srv.sessions[int(c.pid)]++
			c.srv.mu.Unlock()
			reqs <- rt.Session{Share: rt.Share{Replica: r.Sn, Replicas: int32(r.Extra)}, Delta: 1, Pid: int(c.pid)}
		case r.Kind == KindHand:
			if len(c.lineage) > 1 && c.srv.opt.HandCap > 0 && c.srv.opt.Arena != nil {
				c.handing.Store(true)
			}
		case r.Kind == KindHold || r.Kind == KindRelease:
			delta := -1
			if r.Kind == KindHold {
				delta = 1
			}
			// A token gone already is no news: a file's holders may
			// release it while a hold for it is still on its way.
			err := c.srv.holdHanded(r.Epoch, uint64(r.Extra)*arenaGrain, delta, c.lineage)
			if err != nil && !errors.Is(err, errUnknownToken) && !c.handWarned {
				c.handWarned = true // once per client: a confused one would send many
				c.srv.logf("brandrt: client %d (pid %d): a handed file's token %d at %d: %v (not logged again)\n",
					c.id, c.pid, r.Epoch, uint64(r.Extra)*arenaGrain, err)
			}
		case r.Kind != KindRead:
			c.odd(r)
		case reads:
			c.ask(r, reqs)
		}
	}
}

// ask takes a read to the loop, or refuses it when the client is a
// stray (see reader).
func (c *client) ask(r Request, reqs chan<- rt.ClientEvent) {
	pid, stray := c.reader()
	if stray {
		c.refuse(r.Sn)
		return
	}
	c.srv.reading(c)
	c.pending.Add(1)
	reqs <- rt.Ask{Epoch: r.Epoch, Sn: r.Sn, Reply: c.replies, Pid: pid}
}

// odd logs, once per client, a request the rank does not know or takes
// only once (a second session), and otherwise ignores it: it is not a
// read, and gets no answer.
func (c *client) odd(r Request) {
	if c.oddLogged {
		return
	}
	c.oddLogged = true
	c.srv.logf("brandrt: client %d (pid %d): ignoring a request of kind %d (sn %d, epoch %d, %d) and any more it sends that the rank does not take\n",
		c.id, c.pid, r.Kind, r.Sn, r.Epoch, r.Extra)
}
