package prototest

import (
	"fmt"
	"math/rand/v2"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// Clients drive the current epoch of a cluster at random, as DataLoader
// workers and a network do: each rank's clients ask for any of their next
// Depth positions not yet asked, from where the epoch starts for them
// (Cluster.Start) up to Stop; messages are delivered and reads completed
// in any order. Clients that stop early say so (Cluster.Done) once every
// position they asked for is answered, as the runtime does.
type Clients struct {
	C     *inproc.Cluster
	Rng   *rand.Rand
	Depth int
	// Stop[r] is the position before which rank r's clients stop (nil:
	// each asks for its whole trace).
	Stop []int

	next  []int32 // per rank, the lowest position not yet asked
	ended []bool
}

// Run drives the epoch until every position asked for is answered and
// the clients that stop early said so. It returns the first step a rank
// refused, the invariants the cluster saw broken, or an error when
// nothing can move any more with positions still unanswered.
func (d *Clients) Run() error {
	c := d.C
	if d.Stop == nil {
		for _, t := range c.Traces {
			d.Stop = append(d.Stop, len(t))
		}
	}
	d.next, d.ended = make([]int32, len(c.Ranks)), make([]bool, len(c.Ranks))
	for r := range d.next {
		if c.Start != nil {
			d.next[r] = c.Start[r]
		}
	}
	for idle := 0; !d.finished(); {
		moved, err := d.act()
		if err != nil {
			return err
		}
		if moved {
			idle = 0
		} else if idle++; idle > 1000 {
			return fmt.Errorf("stuck: %d messages in flight, reads %v, %d requests outstanding per rank, clients at %v of %v",
				len(c.Net), c.Reads, c.Outstanding, d.next, d.Stop)
		}
	}
	return c.Check()
}

// finished reports whether every rank's clients asked for and got each
// position before their stop, and said they are done if they stop early.
func (d *Clients) finished() bool {
	for r := range d.C.Ranks {
		if int(d.next[r]) < d.Stop[r] || d.C.Outstanding[r] > 0 || (d.early(r) && !d.ended[r]) {
			return false
		}
	}
	return true
}

func (d *Clients) early(r int) bool { return d.Stop[r] < len(d.C.Traces[r]) }

// act does one random thing: a client request, a message, or a read.
func (d *Clients) act() (bool, error) {
	c := d.C
	switch r := d.Rng.IntN(len(c.Ranks)); d.Rng.IntN(3) {
	case 0:
		return d.request(r)
	case 1:
		if len(c.Net) == 0 {
			return false, nil
		}
		return true, c.DeliverMsg(d.Rng.IntN(len(c.Net)))
	default:
		if len(c.Reads[r]) == 0 {
			return false, nil
		}
		return true, c.CompleteRead(r, d.Rng.IntN(len(c.Reads[r])), false)
	}
}

// request asks for a random position among rank r's next Depth unasked,
// or ends the epoch for r's clients once they asked for every position
// before their stop and got them.
func (d *Clients) request(r int) (bool, error) {
	c := d.C
	asked, before := c.Asked(r), c.Delivered[r]
	// asked, or delivered before the epoch was resumed
	taken := func(sn int32) bool { return asked[sn] || before[sn] != proto.NoFile }
	for int(d.next[r]) < d.Stop[r] && taken(d.next[r]) {
		d.next[r]++
	}
	if int(d.next[r]) == d.Stop[r] {
		if d.ended[r] || !d.early(r) || c.Outstanding[r] > 0 {
			return false, nil
		}
		d.ended[r] = true
		return true, c.Done(r)
	}
	sn := d.next[r] + int32(d.Rng.IntN(max(d.Depth, 1)))
	if int(sn) >= d.Stop[r] || taken(sn) {
		return false, nil
	}
	return true, c.Request(r, sn)
}
