package inproc

import (
	"errors"
	"slices"

	"github.com/brandrt/brandrt/proto"
)

// GenTraces returns the traces of epoch e drawn from seed, as serve draws
// them (proto.Traces).
func GenTraces(m *proto.Mapping, seed uint64, e uint32) [][]proto.FileID {
	return proto.Traces(m.Files(), m.Ranks(), seed, e)
}

// book is the cluster's record of one epoch, against which deliveries are
// checked.
type book struct {
	epoch       uint32
	traces      [][]proto.FileID
	delivered   [][]proto.FileID
	asked       [][]bool // per rank and position: asked
	answered    [][]bool // per rank and position: answered, with a file or a failure
	outstanding []int
	byFile      []int32 // per file: 1 + the rank it was delivered to, 0 if none
	loaded      []bool  // per file: entered memory in this epoch
}

func newBook(e uint32, traces [][]proto.FileID, files int) *book {
	b := &book{epoch: e, traces: traces, delivered: make([][]proto.FileID, len(traces)), asked: make([][]bool, len(traces)),
		answered: make([][]bool, len(traces)), outstanding: make([]int, len(traces)), byFile: make([]int32, files),
		loaded: make([]bool, files)}
	for r, t := range traces {
		b.delivered[r] = slices.Repeat([]proto.FileID{proto.NoFile}, len(t))
		b.asked[r], b.answered[r] = make([]bool, len(t)), make([]bool, len(t))
	}
	return b
}

// bookOf returns the record of the epoch rank r is in, or nil.
func (c *Cluster) bookOf(r int) *book {
	e, started := c.Ranks[r].Epoch()
	for _, b := range []*book{c.cur, c.prev} {
		if started && b != nil && b.epoch == e {
			return b
		}
	}
	return nil
}

// StartEpoch begins epoch e with the given traces on the ranks in which
// (every rank when which is nil); the others join with JoinEpoch before
// the epoch after. Reads and messages still in flight stay; their
// receivers drop them as stale.
func (c *Cluster) StartEpoch(e uint32, traces [][]proto.FileID, which []int) error {
	c.open(e, traces, nil, nil)
	var errs []error
	for r := range c.Ranks {
		if which == nil || slices.Contains(which, r) {
			errs = append(errs, c.JoinEpoch(r))
		}
	}
	return errors.Join(errs...)
}

// ResumeEpoch begins epoch e on every rank, resumed as a restarted job
// resumes it (the window policy): at positions start of traces, the
// positions before each counting as delivered before (their planned
// files); or on traces of the files left after those delivered.
func (c *Cluster) ResumeEpoch(e uint32, traces [][]proto.FileID, start []int32, delivered []bool) error {
	c.open(e, traces, start, delivered)
	var errs []error
	for r := range c.Ranks {
		errs = append(errs, c.JoinEpoch(r))
	}
	if err := errors.Join(errs...); err != nil || start == nil {
		return err
	}
	p := c.Ranks[0].Plan()
	if p == nil {
		return errors.New("inproc: only the window policy resumes mid-epoch")
	}
	for r, n := range start {
		for sn, f := range p.Files[r][:n] {
			c.cur.delivered[r][sn], c.cur.byFile[f] = f, int32(r)+1
		}
	}
	return nil
}

// open opens the book of epoch e.
func (c *Cluster) open(e uint32, traces [][]proto.FileID, start []int32, delivered []bool) {
	c.Epoch, c.Traces, c.Start, c.resumed = e, traces, start, delivered
	c.prev, c.cur = c.cur, newBook(e, traces, c.Mapping.Files())
	c.Delivered, c.Outstanding = c.cur.delivered, c.cur.outstanding
	for _, f := range c.early[e] {
		c.cur.loaded[f] = true
	}
	delete(c.early, e)
}

// JoinEpoch starts the current epoch on rank r.
func (c *Cluster) JoinEpoch(r int) error {
	return c.Step(r, proto.EpochStart{Epoch: c.Epoch, Traces: c.Traces, Start: c.Start, Delivered: c.resumed})
}

// Request makes rank r's client ask for position sn of its epoch.
func (c *Cluster) Request(r int, sn int32) error {
	b := c.bookOf(r)
	// noted before the step, which may answer it at once
	mark := b != nil && sn >= 0 && int(sn) < len(b.asked[r]) && !b.asked[r][sn]
	if b != nil {
		b.outstanding[r]++
	}
	if mark {
		b.asked[r][sn] = true
	}
	err := c.Step(r, proto.ClientRequest{Sn: sn})
	if err != nil && b != nil {
		b.outstanding[r]-- // refused: nothing will answer it
		if mark {
			b.asked[r][sn] = false
		}
	}
	return err
}

// Done tells rank r that its clients ask for nothing more in this epoch
// (ClientsDone), as the runtime does; r tells the others (MsgDone).
func (c *Cluster) Done(r int) error {
	return c.Step(r, proto.ClientsDone{})
}

// DeliverMsg hands message i of Net to its receiver.
func (c *Cluster) DeliverMsg(i int) error {
	msg := c.Net[i]
	c.Net = slices.Delete(c.Net, i, i+1)
	return c.Step(int(msg.To), msg)
}

// CompleteRead finishes read i of rank r, failed or not.
func (c *Cluster) CompleteRead(r, i int, failed bool) error {
	rd := c.Reads[r][i]
	c.Reads[r] = slices.Delete(c.Reads[r], i, i+1)
	return c.Step(r, c.readDone(rd, failed))
}

// readDone is the end of read rd: failed, or naming its chunk's files
// that are damaged (Options.Damaged).
func (c *Cluster) readDone(rd proto.Read, failed bool) proto.ReadDone {
	e := proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch, Failed: failed}
	if len(c.damaged) > 0 && !failed {
		lo, hi := c.Mapping.PCFiles(rd.PC)
		for f := lo; f < hi; f++ {
			if c.damaged[f] {
				e.Damaged = append(e.Damaged, f)
			}
		}
	}
	return e
}

// Stabilize completes reads and delivers messages, oldest first, until
// nothing is in flight.
func (c *Cluster) Stabilize() error {
	for {
		progress := false
		for r := range c.Reads {
			for len(c.Reads[r]) > 0 {
				progress = true
				if err := c.CompleteRead(r, 0, false); err != nil {
					return err
				}
			}
		}
		for len(c.Net) > 0 {
			progress = true
			if err := c.DeliverMsg(0); err != nil {
				return err
			}
		}
		if !progress {
			return nil
		}
	}
}

// Round delivers every message and completes every read that is in
// flight when it starts, oldest first; what they cause waits for the next
// round. It is one unit of logical time for the simulator.
func (c *Cluster) Round() error {
	for r := range c.Reads {
		reads := c.Reads[r]
		c.Reads[r] = nil
		for i, rd := range reads {
			if err := c.Step(r, c.readDone(rd, false)); err != nil {
				c.Reads[r] = append(reads[i+1:], c.Reads[r]...)
				return err
			}
		}
	}
	net := c.Net
	c.Net = nil
	for i, msg := range net {
		if err := c.Step(int(msg.To), msg); err != nil {
			c.Net = append(net[i+1:], c.Net...)
			return err
		}
	}
	return nil
}

// PlayEpoch runs epoch e with the given traces to the end: each rank's
// clients ask for their positions in order, keeping inflight requests
// outstanding, and each Round every message and read in flight completes.
// progress, if not nil, is called every few rounds with the requests
// issued so far and the total. It returns CheckComplete's verdict.
func (c *Cluster) PlayEpoch(e uint32, traces [][]proto.FileID, inflight int, progress func(done, total int64)) error {
	if err := c.StartEpoch(e, traces, nil); err != nil {
		return err
	}
	next := make([]int, len(traces))
	var total, issued int64
	for _, t := range traces {
		total += int64(len(t))
	}
	for round := 0; ; round++ {
		for r, t := range traces {
			for c.Outstanding[r] < inflight && next[r] < len(t) {
				if err := c.Request(r, int32(next[r])); err != nil {
					return err
				}
				next[r]++
				issued++
			}
		}
		if progress != nil && round%256 == 0 {
			progress(issued, total)
		}
		if c.Idle() {
			break
		}
		if err := c.Round(); err != nil {
			return err
		}
	}
	if progress != nil {
		progress(total, total)
	}
	return c.CheckComplete()
}

// Idle reports whether no message or read is in flight.
func (c *Cluster) Idle() bool {
	if len(c.Net) > 0 {
		return false
	}
	for _, rd := range c.Reads {
		if len(rd) > 0 {
			return false
		}
	}
	return true
}

// Asked reports, per position of rank r's trace, whether its clients
// asked for it in the current epoch.
func (c *Cluster) Asked(r int) []bool { return c.cur.asked[r] }
