package shm

import (
	"errors"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// The loop's deliveries, written into a client's ring: copied, or placed
// in the arena and lent until the client gives them back.

// write copies deliveries into the ring, or for files in the arena their
// place; after the client died it only releases them, until none is
// pending.
func (c *client) write() {
	tick := time.NewTicker(100 * time.Millisecond) // to notice death; one timer, not one per reply
	defer tick.Stop()
	defer c.reclaim(true)
	for {
		// After Close, a reply still owed may never come: the loop that
		// makes them may have stopped (an error ends the job).
		if c.dead.Load() && (c.pending.Load() == 0 || c.srv.closing()) {
			return
		}
		select {
		case d := <-c.replies:
			end, kept := c.put(&d)
			if end > 0 {
				c.unread.add(end, uint64(len(d.Data)), time.Now())
			}
			switch kept {
			case keptLent:
				c.lent = append(c.lent, lentFile{end, d})
			case keptNot:
				d.Release()
			}
			c.pending.Add(-1)
			c.reclaim(false)
		case now := <-tick.C:
			c.reclaim(false)
			c.watchStall(now)
		}
	}
}

// lentFile is a delivery whose bytes the client reads in the arena: it is
// released once the client's data tail passes end.
type lentFile struct {
	end uint64
	d   rt.Delivery
}

// reclaim releases the files the client is done with, or all of them.
func (c *client) reclaim(all bool) {
	tail, i := c.ring.released(), 0
	for ; i < len(c.lent) && (all || c.lent[i].end <= tail); i++ {
		c.lent[i].d.Release()
	}
	c.lent = c.lent[:copy(c.lent, c.lent[i:])]
}

// kept says who keeps a delivery once its record is written.
type kept int

const (
	keptNot    kept = iota // nobody: its bytes were copied into the ring
	keptLent               // the client reads them in the arena until its tail passes the record
	keptHanded             // the handed table (hand.go)
)

// put writes d's record and says who keeps d: the client reads a file in
// the arena in place, until it passes the record's end, unless it hands
// its files on.
func (c *client) put(d *rt.Delivery) (end uint64, k kept) {
	if !c.alive() {
		return 0, keptNot
	}
	rec := Record{Kind: RecFile, Sn: d.Sn, File: int32(d.File), Label: d.Label, CRC: d.CRC, Data: d.Data}
	lent := false
	if a := c.srv.opt.Arena; a != nil && d.Err == nil {
		rec.Off, lent = a.Offset(d.Data)
	}
	switch {
	case d.Err != nil:
		rec = Record{Kind: RecError, Sn: d.Sn, File: -1, Label: -1, Data: []byte(d.Err.Error())}
	case d.Damaged != "":
		rec = Record{Kind: RecSkipped, Sn: d.Sn, File: int32(d.File), Label: d.Label, CRC: d.CRC, Data: []byte(d.Damaged)}
		lent = false
	case lent:
		rec.Kind = RecShared
		// Set only for a client with a parent; only a file with pages
		// of its own can be mapped where it lies (rt.Handable: a small
		// file shares its pages with others, in a slab).
		if c.handing.Load() && rt.Handable(int64(len(d.Data))) && rec.Off%arenaGrain == 0 {
			if token, ok := c.srv.hand(d, rec.Off, c.lineage[1]); ok {
				rec.Kind, rec.Token = RecHanded, token
			}
		}
		c.srv.Shared.Add(1)
	default:
		c.srv.Copied.Add(1)
	}
	c.files++
	end, err := c.ring.putRecord(rec, c.alive)
	if errors.Is(err, errTooBig) { // tell the client rather than hang it
		end, err = c.ring.putRecord(Record{Kind: RecError, Sn: d.Sn, File: -1, Label: -1, Data: []byte(err.Error())}, c.alive)
	}
	if err != nil && !errors.Is(err, errClientGone) {
		c.srv.logf("brandrt: client %d (pid %d): %v\n", c.id, c.pid, err)
		c.conn.Close()
	}
	switch {
	case rec.Kind == RecHanded:
		if err != nil { // nobody got the token
			_ = c.srv.holdHanded(rec.Token, rec.Off, -1, c.lineage)
		}
		return end, keptHanded
	case lent && err == nil:
		return end, keptLent
	}
	return end, keptNot
}
