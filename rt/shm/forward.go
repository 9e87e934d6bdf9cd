package shm

import (
	"errors"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// A client's requests, taken from its ring to the rank's loop as rt's
// client events.

// read takes the client's requests to the loop, never more at once than
// the replies channel holds, so that the loop never waits on a client.
func (c *client) read(reqs chan<- rt.ClientEvent) {
	var batch []Request
	for c.alive() {
		if int(c.pending.Load()) >= cap(c.replies) {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		var err error
		if batch, err = c.ring.takeRequests(batch[:0]); err != nil {
			c.srv.logf("brandrt: client %d (pid %d): %v; dropping it\n", c.id, c.pid, err)
			c.conn.Close()
			return
		}
		if len(batch) == 0 {
			c.ring.waitRequests(100 * time.Millisecond)
			continue
		}
		c.forward(batch, reqs, true)
	}
	// A client may end an epoch and leave at once: its last requests
	// still count, but there is nobody left to read files for.
	if batch, err := c.ring.takeRequests(batch[:0]); err == nil {
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
		case reads && c.stray():
			c.refuse(r.Sn)
		case reads:
			c.pending.Add(1)
			reqs <- rt.Ask{Epoch: r.Epoch, Sn: r.Sn, Reply: c.replies, Pid: c.reader()}
		}
	}
}
