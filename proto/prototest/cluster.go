package prototest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/brandrt/brandrt/proto"
)

// Options describes a simulated cluster.
type Options struct {
	// Files holds each rank's file count.
	Files []int
	// K is the number of files per chunk.
	K int
	// Sizes holds each rank's file sizes in bytes; nil means one byte each.
	Sizes [][]int64
	// MemFraction sets each rank's VC budget as a fraction of its shard's
	// bytes (a rank's MemBytes), unless MemBytes is set.
	MemFraction float64
	// MemBytes, when non-nil, gives each rank's VC budget in bytes.
	MemBytes []int64
	// RemoteMemBytes is each rank's buffer limit in bytes.
	RemoteMemBytes int64
	// Window, Variant and Seed are passed to every rank.
	Window  int
	Variant proto.Variant
	Seed    uint64
	// Codec round-trips every message through proto.Encode/Decode.
	Codec bool
	// Light skips the per-step O(memory) consistency check of every rank;
	// the O(1) cluster checks still run. For large simulations.
	Light bool
}

// Cluster is N ranks, the network between them and their storage.
type Cluster struct {
	Opts    Options
	Mapping *proto.Mapping
	Ranks   []*proto.Rank
	Traces  [][]proto.FileID
	Epoch   uint32

	// Net holds messages in flight in the order they were sent.
	Net []proto.Message
	// Reads holds, per rank, the reads in flight in issue order.
	Reads [][]proto.Read

	// Delivered[r][sn] is the file delivered to rank r for position sn of
	// the current epoch, or NoFile.
	Delivered [][]proto.FileID
	// Outstanding counts each rank's positions of the current epoch
	// requested and not answered.
	Outstanding []int

	// cur and prev record the current and the previous epoch: a rank that
	// has not joined the current epoch yet still works in the previous one.
	cur, prev  *book
	violations []string
	out        func(string)
	msgBuf     []byte
}

// New builds a cluster of len(opts.Files) ranks. It serves nothing until
// StartEpoch.
func New(opts Options) (*Cluster, error) {
	n := len(opts.Files)
	if opts.Sizes == nil {
		opts.Sizes = unitSizes(opts.Files)
	}
	if len(opts.Sizes) != n {
		return nil, fmt.Errorf("prototest: %d size lists for %d ranks", len(opts.Sizes), n)
	}
	d := proto.Dataset{K: opts.K, Shards: make([]proto.Shard, n)}
	for r := range d.Shards {
		d.Shards[r] = shard(opts, r)
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Opts: opts, Mapping: m, Ranks: make([]*proto.Rank, n), Reads: make([][]proto.Read, n)}
	var errs []error
	for r := range c.Ranks {
		cfg := proto.DefaultConfig()
		cfg.Rank, cfg.Mapping, cfg.Sizes = r, m, opts.Sizes[r]
		cfg.Variant, cfg.Window, cfg.Seed, cfg.RemoteMemBytes = opts.Variant, opts.Window, opts.Seed, opts.RemoteMemBytes
		c.Ranks[r], err = proto.NewRank(cfg)
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

func shard(opts Options, r int) proto.Shard {
	var bytes int64
	for _, s := range opts.Sizes[r] {
		bytes += s
	}
	mem := int64(opts.MemFraction * float64(bytes))
	if opts.MemBytes != nil {
		mem = opts.MemBytes[r]
	}
	return proto.Shard{Files: len(opts.Sizes[r]), Bytes: bytes, MemBytes: mem}
}

func unitSizes(files []int) [][]int64 {
	s := make([][]int64, len(files))
	for r, n := range files {
		s[r] = make([]int64, n)
		for i := range s[r] {
			s[r][i] = 1
		}
	}
	return s
}

// SetOutput makes the cluster report every effect (reads, sends,
// deliveries) as a line to out; nil turns reporting off.
func (c *Cluster) SetOutput(out func(string)) { c.out = out }

// printf reports a line; callers check c.out first, so that a silent
// cluster does not pay for formatting.
func (c *Cluster) printf(format string, args ...any) {
	c.out(fmt.Sprintf(format, args...))
}

// GenTraces returns the traces of epoch e drawn from seed: a uniform random
// permutation of all files cut into one piece per rank, the lengths
// differing by at most one.
func GenTraces(m *proto.Mapping, seed uint64, e uint32) [][]proto.FileID {
	rng := rand.New(rand.NewPCG(seed, uint64(e)))
	perm := make([]proto.FileID, m.Files())
	for i := range perm {
		perm[i] = proto.FileID(i)
	}
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	n := m.Ranks()
	traces := make([][]proto.FileID, n)
	for r := range traces {
		traces[r] = perm[r*len(perm)/n : (r+1)*len(perm)/n]
	}
	return traces
}

// book is the cluster's record of one epoch, against which deliveries are
// checked.
type book struct {
	epoch       uint32
	traces      [][]proto.FileID
	delivered   [][]proto.FileID
	outstanding []int
	byFile      []int32 // per file: 1 + the rank it was delivered to, 0 if none
	loaded      []bool  // per file: entered memory in this epoch
}

func newBook(e uint32, traces [][]proto.FileID, files int) *book {
	b := &book{epoch: e, traces: traces, delivered: make([][]proto.FileID, len(traces)),
		outstanding: make([]int, len(traces)), byFile: make([]int32, files), loaded: make([]bool, files)}
	for r, t := range traces {
		b.delivered[r] = slices.Repeat([]proto.FileID{proto.NoFile}, len(t))
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
	c.Epoch, c.Traces = e, traces
	c.prev, c.cur = c.cur, newBook(e, traces, c.Mapping.Files())
	c.Delivered, c.Outstanding = c.cur.delivered, c.cur.outstanding
	var errs []error
	for r := range c.Ranks {
		if which == nil || slices.Contains(which, r) {
			errs = append(errs, c.JoinEpoch(r))
		}
	}
	return errors.Join(errs...)
}

// JoinEpoch starts the current epoch on rank r.
func (c *Cluster) JoinEpoch(r int) error {
	return c.step(r, proto.EpochStart{Epoch: c.Epoch, Traces: c.Traces})
}

// Request makes rank r's client ask for position sn of its epoch.
func (c *Cluster) Request(r int, sn int32) error {
	b := c.bookOf(r)
	if b != nil {
		b.outstanding[r]++
	}
	err := c.step(r, proto.ClientRequest{Sn: sn})
	if err != nil && b != nil {
		b.outstanding[r]-- // refused: nothing will answer it
	}
	return err
}

// DeliverMsg hands message i of Net to its receiver.
func (c *Cluster) DeliverMsg(i int) error {
	msg := c.Net[i]
	c.Net = slices.Delete(c.Net, i, i+1)
	return c.step(int(msg.To), msg)
}

// CompleteRead finishes read i of rank r, failed or not.
func (c *Cluster) CompleteRead(r, i int, failed bool) error {
	rd := c.Reads[r][i]
	c.Reads[r] = slices.Delete(c.Reads[r], i, i+1)
	return c.step(r, proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch, Failed: failed})
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
			if err := c.step(r, proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch}); err != nil {
				c.Reads[r] = append(reads[i+1:], c.Reads[r]...)
				return err
			}
		}
	}
	net := c.Net
	c.Net = nil
	for i, msg := range net {
		if err := c.step(int(msg.To), msg); err != nil {
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

// step feeds ev to rank r and carries out its Ready.
func (c *Cluster) step(r int, ev proto.Event) error {
	rank := c.Ranks[r]
	if err := rank.Step(ev); err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	if !c.Opts.Light {
		if err := rank.CheckInvariants(); err != nil {
			c.violate("rank %d: %v", r, err)
		}
	}
	if !rank.HasReady() {
		return nil
	}
	rd := rank.Ready()
	err := c.apply(r, rd)
	rank.Advance(rd)
	return err
}

func (c *Cluster) apply(r int, rd proto.Ready) error {
	for _, err := range rd.Dropped {
		c.violate("rank %d dropped a held message: %v", r, err)
	}
	if len(rd.Loaded) > 0 && c.out != nil {
		c.printf("rank %d: loaded %v", r, rd.Loaded)
	}
	b := c.bookOf(r)
	if b == nil && len(rd.Loaded)+len(rd.Deliveries) > 0 {
		c.violate("rank %d loads or delivers outside the epochs on record", r)
		return nil
	}
	for _, f := range rd.Loaded {
		if b.loaded[f] {
			c.violate("file %d loaded twice in epoch %d (rank %d)", f, b.epoch, r)
		}
		b.loaded[f] = true
	}
	for _, d := range rd.Deliveries {
		c.record(b, r, d)
	}
	for _, msg := range rd.Sends {
		if c.out != nil {
			c.printf("rank %d: send %v", r, msg)
		}
		if c.Opts.Codec {
			var err error
			if msg, err = c.roundTrip(msg); err != nil {
				return err
			}
		}
		c.Net = append(c.Net, msg)
	}
	for _, read := range rd.Reads {
		if c.out != nil {
			c.printf("rank %d: read pc %d (vc %d)", r, read.PC, read.VC)
		}
		c.Reads[r] = append(c.Reads[r], read)
	}
	return nil
}

func (c *Cluster) roundTrip(msg proto.Message) (proto.Message, error) {
	c.msgBuf = proto.Encode(c.msgBuf[:0], msg)
	out, err := proto.Decode(c.msgBuf)
	if err != nil {
		return out, fmt.Errorf("codec: %v: %w", msg, err)
	}
	return out, nil
}

// record checks and notes one delivery to rank r in epoch b.
func (c *Cluster) record(b *book, r int, d proto.Delivery) {
	if c.out != nil {
		c.printf("rank %d: deliver %v", r, d)
	}
	b.outstanding[r]--
	if d.Status != proto.StatusOK {
		return
	}
	if prev := b.delivered[r][d.Sn]; prev != proto.NoFile {
		c.violate("rank %d: sn %d delivered twice (files %d and %d)", r, d.Sn, prev, d.File)
	}
	if prev := b.byFile[d.File]; prev != 0 {
		c.violate("file %d delivered twice in epoch %d (ranks %d and %d)", d.File, b.epoch, prev-1, r)
	}
	if !b.loaded[d.File] {
		c.violate("file %d delivered to rank %d but never loaded in epoch %d", d.File, r, b.epoch)
	}
	if c.Mapping.GlobalSlot(b.traces[r][d.Sn]) != c.Mapping.GlobalSlot(d.File) {
		c.violate("rank %d: sn %d got file %d, which does not share file %d's slot", r, d.Sn, d.File, b.traces[r][d.Sn])
	}
	b.byFile[d.File] = int32(r) + 1
	b.delivered[r][d.Sn] = d.File
}

func (c *Cluster) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// Check returns the invariant violations seen so far in this epoch (at
// most once, memory, no double load, pushed files finding empty slots),
// plus a full consistency check of every rank.
func (c *Cluster) Check() error {
	errs := make([]error, 0, len(c.violations))
	for _, v := range c.violations {
		errs = append(errs, errors.New(v))
	}
	for r, rank := range c.Ranks {
		if err := rank.CheckInvariants(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// CheckAnswered returns an error unless every request of the current
// epoch was answered (with a file or a failure): nothing hangs.
func (c *Cluster) CheckAnswered() error {
	var errs []error
	for r, n := range c.Outstanding {
		if n != 0 {
			errs = append(errs, fmt.Errorf("rank %d: %d requests of epoch %d never answered", r, n, c.Epoch))
		}
	}
	return errors.Join(errs...)
}

// CheckComplete returns an error unless every position of every trace was
// delivered and every file of the dataset exactly once.
func (c *Cluster) CheckComplete() error {
	if err := c.Check(); err != nil {
		return err
	}
	var errs []error
	for r, d := range c.Delivered {
		for sn, f := range d {
			if f == proto.NoFile {
				errs = append(errs, fmt.Errorf("rank %d: sn %d never delivered", r, sn))
			}
		}
	}
	covered := 0
	for _, t := range c.Traces {
		covered += len(t)
	}
	for f, by := range c.cur.byFile {
		if by == 0 && covered == c.Mapping.Files() {
			errs = append(errs, fmt.Errorf("file %d never delivered", f))
		}
	}
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("… and %d more", len(errs)-8))
	}
	return errors.Join(errs...)
}

// Stats returns the sum of every rank's counters.
func (c *Cluster) Stats() proto.Stats {
	var s proto.Stats
	for _, r := range c.Ranks {
		s = s.Add(r.Stats())
	}
	return s
}
