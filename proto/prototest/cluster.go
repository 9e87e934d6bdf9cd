package prototest

import (
	"errors"
	"fmt"

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
	m, err := Mapping(opts)
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

// Mapping builds the mapping of opts' dataset: K, and per rank (one per
// list of Sizes) its files, their bytes and its memory budget.
func Mapping(opts Options) (*proto.Mapping, error) {
	d := proto.Dataset{K: opts.K, Shards: make([]proto.Shard, len(opts.Sizes))}
	for r := range d.Shards {
		d.Shards[r] = shard(opts, r)
	}
	return proto.NewMapping(d)
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
