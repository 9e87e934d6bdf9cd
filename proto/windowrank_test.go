package proto_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// windowCluster runs WindowRanks of one epoch in one process: clients ask
// for positions in any order within a depth, messages and reads complete
// in random order, and every step is checked against the plan.
type windowCluster struct {
	t      *testing.T
	in     proto.WindowInput
	ranks  []*proto.WindowRank
	rng    *rand.Rand
	net    []proto.Message
	reads  [][]proto.Read // per rank, in flight
	next   []int32        // per rank, the lowest position not yet asked
	asked  [][]bool
	got    [][]proto.FileID
	done   int
	remote int64
	// stop[r] is where rank r's clients end the epoch early (its trace
	// length when they do not); ended[r] once they did
	stop  []int
	ended []bool
	// start[r] is where rank r's clients resume the epoch (0: from its
	// start)
	start []int32
	// issued counts the reads issued per epoch and chunk
	issued map[[2]int]int
	// before, when set before begin, resumes the epoch after those
	// files on the rest's traces (EpochStart.Delivered)
	before []bool
}

// newWindowCluster starts epoch in.Epoch; with start, the ranks resume it
// there, on traces of the epochs before it. With epochs, the ranks read
// ahead into the epochs after it, up to that one (WindowConfig.Epochs).
func newWindowCluster(t *testing.T, in proto.WindowInput, remote int64, window int, seed uint64,
	start []int32, traces func(uint32) [][]proto.FileID, epochs uint32) *windowCluster {
	// the ranks' budgets are their mapping's MemBytes
	d := proto.Dataset{K: in.Mapping.K()}
	for r := range in.Mapping.Ranks() {
		_, n := in.Mapping.RankFiles(r)
		d.Shards = append(d.Shards, proto.Shard{Files: n, Bytes: in.Mapping.ShardBytes(r), MemBytes: in.Budget[r]})
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		t.Fatal(err)
	}
	in.Mapping = m
	c := &windowCluster{t: t, in: in, rng: rand.New(rand.NewPCG(seed, 7)), remote: remote, issued: map[[2]int]int{}}
	for r := range m.Ranks() {
		w, err := proto.NewWindowRank(proto.WindowConfig{Rank: r, Mapping: m, Sizes: in.Sizes, Seed: in.Seed,
			Lead: in.Lead, Ramp: in.Ramp, Window: window, RemoteMemBytes: remote, Traces: traces, Epochs: epochs})
		if err != nil {
			t.Fatal(err)
		}
		c.ranks = append(c.ranks, w)
		c.reads = append(c.reads, nil)
	}
	if start != nil || in.Traces != nil {
		c.begin(in.Traces, start)
	}
	return c
}

// begin resets the clients' side for epoch c.in.Epoch on traces and
// starts it on every rank; reads still in flight stay in flight.
func (c *windowCluster) begin(traces [][]proto.FileID, start []int32) {
	c.in.Traces = traces
	m := c.in.Mapping
	c.next, c.asked, c.got, c.stop, c.ended = nil, nil, nil, nil, nil
	for r := range m.Ranks() {
		c.next = append(c.next, 0)
		c.asked = append(c.asked, make([]bool, len(traces[r])))
		got := make([]proto.FileID, len(traces[r]))
		for i := range got {
			got[i] = proto.NoFile
		}
		c.got = append(c.got, got)
		c.stop = append(c.stop, len(got))
		c.ended = append(c.ended, false)
	}
	c.done = 0
	c.start = start
	if start == nil {
		c.start = make([]int32, m.Ranks())
	}
	for r, w := range c.ranks {
		if err := w.Step(proto.EpochStart{Epoch: c.in.Epoch, Traces: traces, Start: start, Delivered: c.before}); err != nil {
			c.t.Fatal(err)
		}
		c.carry(r)
	}
	for r, w := range c.ranks { // delivered before the restart
		c.next[r] = c.start[r]
		for sn := range c.start[r] {
			c.asked[r][sn], c.got[r][sn] = true, w.Plan().Files[r][sn]
		}
	}
}

func (c *windowCluster) step(r int, ev proto.Event) {
	if err := c.ranks[r].Step(ev); err != nil {
		c.t.Fatalf("rank %d: %v: %v", r, ev, err)
	}
	c.carry(r)
}

func (c *windowCluster) carry(r int) {
	w := c.ranks[r]
	for w.HasReady() {
		rd := w.Ready()
		if len(rd.Dropped) > 0 {
			c.t.Fatalf("rank %d dropped %v", r, rd.Dropped)
		}
		c.reads[r] = append(c.reads[r], rd.Reads...)
		for _, x := range rd.Reads {
			c.issued[[2]int{int(x.Epoch), x.PC}]++
		}
		c.net = append(c.net, rd.Sends...)
		for _, d := range rd.Deliveries {
			c.delivered(r, d)
		}
		w.Advance(rd)
	}
	s := w.Stats()
	if s.PeakHeld > c.in.Mapping.MemBytes(r) || s.PeakBuffered > c.remote {
		c.t.Fatalf("rank %d holds up to %d bytes of its own (budget %d) and %d of others' (limit %d)", r,
			s.PeakHeld, c.in.Mapping.MemBytes(r), s.PeakBuffered, c.remote)
	}
}

func (c *windowCluster) delivered(r int, d proto.Delivery) {
	plan := c.ranks[r].Plan()
	if d.Status != proto.StatusOK || !c.asked[r][d.Sn] || c.got[r][d.Sn] != proto.NoFile || d.File != plan.Files[r][d.Sn] {
		c.t.Fatalf("rank %d: delivery %v, asked %v, had %d, planned %d", r, d, c.asked[r][d.Sn], c.got[r][d.Sn],
			plan.Files[r][d.Sn])
	}
	c.got[r][d.Sn] = d.File
	c.done++
}

// run drives the epoch to its end with depth positions asked ahead per
// rank, each rank advancing at its own random pace.
func (c *windowCluster) run(depth int) {
	total := 0
	for r, s := range c.stop {
		total += s - int(c.start[r])
	}
	for idle := 0; c.done < total; {
		if c.act(depth) {
			idle = 0
		} else if idle++; idle > 1000 {
			c.t.Fatalf("stuck after %d of %d deliveries: %d messages and %v reads in flight", c.done, total, len(c.net), c.reads)
		}
	}
	seen := map[proto.FileID]bool{}
	for _, got := range c.got {
		for _, f := range got {
			if f == proto.NoFile {
				continue
			}
			if seen[f] {
				c.t.Fatalf("file %d delivered twice", f)
			}
			seen[f] = true
		}
	}
}

// act does one random thing: a client request, a message, or a read.
func (c *windowCluster) act(depth int) bool {
	switch r := c.rng.IntN(len(c.ranks)); c.rng.IntN(3) {
	case 0:
		return c.request(r, depth)
	case 1:
		if len(c.net) == 0 {
			return false
		}
		i := c.rng.IntN(len(c.net))
		m := c.net[i]
		c.net = append(c.net[:i], c.net[i+1:]...)
		c.step(int(m.To), m)
		return true
	default:
		if len(c.reads[r]) == 0 {
			return false
		}
		i := c.rng.IntN(len(c.reads[r]))
		rd := c.reads[r][i]
		c.reads[r] = append(c.reads[r][:i], c.reads[r][i+1:]...)
		c.step(r, proto.ReadDone{PC: rd.PC, Epoch: rd.Epoch})
		return true
	}
}

// request asks for a random position among rank r's next depth unasked,
// or ends the epoch for r's clients once they asked for every position
// before its stop and got them.
func (c *windowCluster) request(r, depth int) bool {
	asked := c.asked[r]
	for int(c.next[r]) < c.stop[r] && asked[c.next[r]] {
		c.next[r]++
	}
	if int(c.next[r]) == c.stop[r] {
		return c.end(r)
	}
	sn := c.next[r] + int32(c.rng.IntN(depth))
	if int(sn) >= c.stop[r] || asked[sn] {
		return false
	}
	asked[sn] = true
	c.step(r, proto.ClientRequest{Sn: sn})
	return true
}

// end tells every rank that r's clients ask for nothing more, once they
// have every position they asked for (as the runtime does).
func (c *windowCluster) end(r int) bool {
	if c.ended[r] || c.stop[r] == len(c.asked[r]) {
		return false
	}
	for sn := range c.stop[r] {
		if c.got[r][sn] == proto.NoFile {
			return false
		}
	}
	c.ended[r] = true
	c.step(r, proto.ClientsDone{})
	for h := range c.ranks {
		if h != r {
			c.step(h, proto.PeerDone{Rank: r})
		}
	}
	return true
}

// Every position gets its planned file exactly once, whatever the order
// of requests, messages and reads, within every budget, and each chunk is
// read once; the randomized cases of the planner's tests.
func TestWindowRankCarriesOutThePlan(t *testing.T) {
	testWindowRank(t, false)
}

// Clients of some ranks end the epoch early: the files kept for their
// positions are dropped, and every other rank still gets all of its own.
func TestWindowRankEndedEarly(t *testing.T) {
	testWindowRank(t, true)
}

func testWindowRank(t *testing.T, early bool) {
	for seed := range uint64(150) {
		in := windowCase(t, seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			remote := int64(seed%3) * 3000
			traces := func(e uint32) [][]proto.FileID { // of the epochs before in.Epoch
				return proto.Traces(in.Mapping.Files(), in.Mapping.Ranks(), seed, e)
			}
			c := newWindowCluster(t, in, remote, int(seed%40), seed, nil, traces, 0)
			if early {
				for r := range c.stop {
					if c.rng.IntN(2) == 0 {
						c.stop[r] = c.rng.IntN(c.stop[r] + 1)
					}
				}
			}
			c.run(1 + int(seed%12))
			if early {
				return
			}
			var read, total int64
			for r, w := range c.ranks {
				read += w.Stats().BytesRead
				total += in.Mapping.ShardBytes(r)
			}
			if read != total {
				t.Fatalf("read %d bytes of a %d-byte dataset", read, total)
			}
		})
	}
}

// A rank resumed at epoch e and positions Start plans epochs 1 to e−1
// again and serves what an uninterrupted run would have: the same plan,
// every position from Start on, within every budget, no file twice, and
// no more bytes read than the dataset's.
func TestWindowRankResumes(t *testing.T) {
	for seed := range uint64(100) {
		in := windowCase(t, seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := in.Mapping
			traces := func(e uint32) [][]proto.FileID { return proto.Traces(m.Files(), m.Ranks(), seed, e) }
			var want *proto.WindowPlan
			for e := uint32(1); e <= 1+uint32(seed%3); e++ {
				in.Epoch, in.Traces = e, traces(e)
				if want != nil {
					in.After = want.Drains
				}
				var err error
				if want, err = proto.PlanWindow(in); err != nil {
					t.Fatal(err)
				}
			}
			in.After = nil
			rng := rand.New(rand.NewPCG(seed, 9))
			start := make([]int32, m.Ranks())
			for r := range start {
				start[r] = int32(rng.IntN(len(in.Traces[r]) + 1))
			}
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), seed, start, traces, 0)
			for r, w := range c.ranks {
				if !slices.Equal(w.Plan().Files[r], want.Files[r]) {
					t.Fatalf("rank %d resumed with another plan than the uninterrupted run's", r)
				}
			}
			c.run(1 + int(seed%12))
			var read, total int64
			for r, w := range c.ranks {
				read += w.Stats().BytesRead
				total += m.ShardBytes(r)
			}
			if read > total {
				t.Fatalf("read %d bytes of a %d-byte dataset", read, total)
			}
		})
	}
}

// An epoch begun by 3 ranks and resumed after its delivered files by
// another number of ranks: the resumed ranks plan what RestPlan plans,
// serve every file left exactly once within their budgets, and read no
// chunk that has no file left.
func TestWindowRankResumesOnOtherRanks(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 4))
			e := uint32(1 + rng.IntN(3))
			old := shardedInput(t, seed, 12, 3, 4)
			delivered, err := proto.Delivered(e, []proto.Stretch{{In: old, Position: rng.IntN(old.Mapping.Files()/3 + 1)}})
			if err != nil {
				t.Fatal(err)
			}
			in := shardedInput(t, seed, 12, 1+rng.IntN(4), 4)
			want, err := proto.RestPlan(in, e, delivered)
			if err != nil {
				t.Fatal(err)
			}
			m := in.Mapping
			in.Epoch, in.Traces = e, nil
			traces := func(k uint32) [][]proto.FileID { return proto.Traces(m.Files(), m.Ranks(), seed, k) }
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), seed, nil, traces, 0)
			c.before = delivered
			c.begin(proto.RestTraces(m.Files(), m.Ranks(), seed, e, delivered), nil)
			for r, w := range c.ranks {
				if !slices.Equal(w.Plan().Files[r], want.Files[r]) {
					t.Fatalf("rank %d resumed with another plan than RestPlan's", r)
				}
			}
			c.run(1 + int(seed%12))
			left := 0
			for _, d := range delivered {
				if !d {
					left++
				}
			}
			got := 0
			for r, fs := range c.got {
				got += len(fs)
				for _, f := range fs {
					if delivered[f] {
						t.Fatalf("rank %d served file %d, delivered before the restart", r, f)
					}
				}
			}
			if got != left {
				t.Fatalf("served %d files, %d were left", got, left)
			}
			for k := range c.issued {
				lo, hi := m.PCFiles(k[1])
				if !slices.Contains(delivered[lo:hi], false) {
					t.Errorf("chunk %d read again, though each of its files was delivered", k[1])
				}
			}
		})
	}
}

// With the job's last epoch known, ranks read the next epoch's first
// chunks while an epoch drains, within the budget: each epoch still
// answers every position with the file the sequential plans give it,
// reads each chunk once, and the reads ahead happen.
func TestWindowRankOverlaps(t *testing.T) {
	const epochs = 3
	early := int64(0)
	for seed := range uint64(100) {
		in := windowCase(t, seed)
		m := in.Mapping
		traces := func(e uint32) [][]proto.FileID { return proto.Traces(m.Files(), m.Ranks(), seed, e) }
		var want []*proto.WindowPlan
		for e := uint32(1); e <= epochs; e++ {
			in.Epoch, in.Traces, in.After = e, traces(e), nil
			if e > 1 {
				in.After = want[e-2].Drains
			}
			p, err := proto.PlanWindow(in)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, p)
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			in.Epoch, in.Traces, in.After = 1, traces(1), nil
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), seed, nil, traces, epochs)
			for e := uint32(1); ; e++ {
				for r, w := range c.ranks {
					if !slices.Equal(w.Plan().Files[r], want[e-1].Files[r]) {
						t.Fatalf("epoch %d: rank %d carries out another plan than the sequential one", e, r)
					}
				}
				c.run(1 + int(seed%12))
				for r, w := range c.ranks {
					early += w.Stats().EarlyReads
					lo, n := m.RankPCs(r)
					for pc := lo; pc < lo+n; pc++ {
						if k := c.issued[[2]int{int(e), pc}]; k != 1 {
							t.Fatalf("epoch %d: chunk %d read %d times", e, pc, k)
						}
					}
				}
				if e == epochs {
					break
				}
				c.in.Epoch = e + 1
				c.begin(traces(e+1), nil)
			}
			for k := range c.issued {
				if k[0] > epochs {
					t.Fatalf("read chunk %d for epoch %d, after the last", k[1], k[0])
				}
			}
		})
	}
	if early == 0 {
		t.Fatal("no chunk was read ahead during an epoch's drain")
	}
}

// Without the traces of the epochs before it, a rank cannot resume past
// epoch 1; the papers' protocol cannot resume mid-epoch at all.
func TestResumeRefused(t *testing.T) {
	in := windowCase(t, 3)
	m := in.Mapping
	w, err := proto.NewWindowRank(proto.WindowConfig{Rank: 0, Mapping: m, Sizes: in.Sizes, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Step(proto.EpochStart{Epoch: 3, Traces: proto.Traces(m.Files(), m.Ranks(), 1, 3)})
	if err == nil || !strings.Contains(err.Error(), "whose traces it does not know") {
		t.Fatalf("epoch 3 first, without traces: %v", err)
	}
	cfg := proto.DefaultConfig()
	cfg.Mapping, cfg.Sizes = m, in.Sizes[0]
	r, err := proto.NewRank(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := make([]int32, m.Ranks())
	start[0] = 1
	err = r.Step(proto.EpochStart{Epoch: 1, Traces: proto.Traces(m.Files(), m.Ranks(), 1, 1), Start: start})
	if err == nil || !strings.Contains(err.Error(), "cannot start mid-way") {
		t.Fatalf("the paper policy started mid-epoch: %v", err)
	}
}
