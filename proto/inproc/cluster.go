package inproc

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
	// Chunks, when set, holds the files of each rank's chunks (chunks cut
	// by size, proto.Shard.Chunks); K is then the most a chunk holds.
	Chunks [][]int
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

	// Policy is the ranks' policy: "" or "paper", proto.Rank (Window and
	// Variant as above); or "window", proto.WindowRank, which fetches
	// the files of other ranks planned for its next Window positions
	// within RemoteMemBytes, on plans shaped by Lead and Ramp.
	Policy     string
	Lead, Ramp int
	// Keep is the share of each window rank's budget that keeps chunks
	// in memory across epochs (proto.WindowConfig).
	Keep float64
	// Traces, with the window policy, gives any epoch's traces: a rank
	// resumed past epoch 1 plans the epochs before again from them, and
	// with Epochs (the job's last), ranks read the next epoch's first
	// chunks while one drains (proto.WindowConfig).
	Traces func(epoch uint32) [][]proto.FileID
	Epochs uint32

	// Damaged are files whose bytes are damaged on storage: every read
	// of their chunk names them (proto.ReadDone.Damaged), and each must
	// answer its position with proto.StatusDamaged, no other file so.
	Damaged []proto.FileID
}

// Policies a cluster runs (Options.Policy).
const (
	Paper  = "paper"
	Window = "window"
)

// Cluster is N ranks, the network between them and their storage.
type Cluster struct {
	Opts    Options
	Mapping *proto.Mapping
	Ranks   []proto.Machine
	Traces  [][]proto.FileID
	Epoch   uint32
	// Start holds where each rank's clients resume the current epoch (nil:
	// at its start); positions before it count as delivered before.
	Start []int32
	// resumed holds the files delivered before the current epoch was
	// resumed on the traces of the rest (nil: not resumed so).
	resumed []bool

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

	// Issued counts the reads issued, per epoch and PC.
	Issued map[[2]int]int

	// cur and prev record the current and the previous epoch: a rank that
	// has not joined the current epoch yet still works in the previous one.
	cur, prev *book
	// early holds, per epoch, the files read ahead for it before its book
	// opened (the window policy's overlap).
	early map[uint32][]proto.FileID
	// damaged holds Opts.Damaged
	damaged    map[proto.FileID]bool
	violations []string
	out        func(string)
	msgBuf     []byte
}

// New builds a cluster of len(opts.Files) ranks. It serves nothing until
// StartEpoch.
func New(opts Options) (*Cluster, error) {
	n := len(opts.Files)
	if opts.Sizes == nil {
		opts.Sizes = Sizes(opts.Files, 1)
	}
	if len(opts.Sizes) != n {
		return nil, fmt.Errorf("inproc: %d size lists for %d ranks", len(opts.Sizes), n)
	}
	m, err := Mapping(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Opts: opts, Mapping: m, Ranks: make([]proto.Machine, n), Reads: make([][]proto.Read, n),
		Issued: map[[2]int]int{}, early: map[uint32][]proto.FileID{}, damaged: map[proto.FileID]bool{}}
	for _, f := range opts.Damaged {
		if f < 0 || int(f) >= m.Files() {
			return nil, fmt.Errorf("inproc: damaged file %d of %d", f, m.Files())
		}
		c.damaged[f] = true
	}
	var errs []error
	for r := range c.Ranks {
		c.Ranks[r], err = newMachine(opts, m, r)
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// newMachine builds rank r of opts' policy.
func newMachine(opts Options, m *proto.Mapping, r int) (proto.Machine, error) {
	switch opts.Policy {
	case "", Paper:
		cfg := proto.DefaultConfig()
		cfg.Rank, cfg.Mapping, cfg.Sizes = r, m, opts.Sizes[r]
		cfg.Variant, cfg.Window, cfg.Seed, cfg.RemoteMemBytes = opts.Variant, opts.Window, opts.Seed, opts.RemoteMemBytes
		return proto.NewRank(cfg)
	case Window:
		remote := make([]int64, m.Ranks())
		for h := range remote {
			remote[h] = opts.RemoteMemBytes
		}
		return proto.NewWindowRank(proto.WindowConfig{Rank: r, Mapping: m, Sizes: opts.Sizes, Seed: opts.Seed,
			Lead: opts.Lead, Ramp: opts.Ramp, Window: opts.Window, Remote: remote, Keep: opts.Keep, Traces: opts.Traces, Epochs: opts.Epochs,
			Whole: true}) // each rank plans its share; the whole plan too, which every delivery is held against (check.go)
	}
	return nil, fmt.Errorf("inproc: unknown policy %q", opts.Policy)
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
	s := proto.Shard{Files: len(opts.Sizes[r]), Bytes: bytes, MemBytes: mem}
	if opts.Chunks != nil {
		s.Chunks = opts.Chunks[r]
	}
	return s
}

// Sizes returns a size list per rank, files[r] files of size bytes for
// rank r.
func Sizes(files []int, size int64) [][]int64 {
	s := make([][]int64, len(files))
	for r, n := range files {
		s[r] = make([]int64, n)
		for i := range s[r] {
			s[r][i] = size
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

// Step feeds ev to rank r and carries out its Ready.
func (c *Cluster) Step(r int, ev proto.Event) error {
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
	if b == nil && len(rd.Loaded)+len(rd.Deliveries)+len(rd.Early)+len(rd.Forget) > 0 {
		c.violate("rank %d loads, delivers or forgets outside the epochs on record", r)
		return nil
	}
	for _, f := range rd.Loaded {
		c.load(b, r, f)
	}
	if len(rd.Early) > 0 {
		if c.out != nil {
			c.printf("rank %d: loaded %v for epoch %d", r, rd.Early, b.epoch+1)
		}
		if c.cur != nil && c.cur.epoch == b.epoch+1 {
			for _, f := range rd.Early {
				c.load(c.cur, r, f)
			}
		} else {
			c.early[b.epoch+1] = append(c.early[b.epoch+1], rd.Early...)
		}
	}
	if len(rd.Forget) > 0 && c.out != nil {
		c.printf("rank %d: forget %v", r, rd.Forget)
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
			if read.VC < 0 { // the window policy reads chunks, with no VC
				c.printf("rank %d: read pc %d for epoch %d", r, read.PC, read.Epoch)
			} else {
				c.printf("rank %d: read pc %d (vc %d)", r, read.PC, read.VC)
			}
		}
		c.Issued[[2]int{int(read.Epoch), read.PC}]++
		c.Reads[r] = append(c.Reads[r], read)
	}
	return nil
}

// load notes that file f, of rank r, entered memory for epoch b.
func (c *Cluster) load(b *book, r int, f proto.FileID) {
	if b.loaded[f] {
		c.violate("file %d loaded twice in epoch %d (rank %d)", f, b.epoch, r)
	}
	b.loaded[f] = true
}

func (c *Cluster) roundTrip(msg proto.Message) (proto.Message, error) {
	c.msgBuf = proto.Encode(c.msgBuf[:0], msg)
	out, err := proto.Decode(c.msgBuf)
	if err != nil {
		return out, fmt.Errorf("codec: %v: %w", msg, err)
	}
	return out, nil
}
