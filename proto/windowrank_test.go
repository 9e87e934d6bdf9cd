package proto_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
	"github.com/brandrt/brandrt/proto/prototest"
)

// newWindowCluster returns a cluster of window ranks (inproc.Cluster,
// which checks every step) on in's dataset and budgets, fetching ahead
// window positions within remote bytes. traces gives any epoch's traces;
// with epochs, the ranks read ahead into the next epoch up to that one.
func newWindowCluster(t *testing.T, in proto.WindowInput, remote int64, window int,
	traces func(uint32) [][]proto.FileID, epochs uint32) *inproc.Cluster {
	t.Helper()
	files := make([]int, len(in.Sizes))
	for r, s := range in.Sizes {
		files[r] = len(s)
	}
	c, err := inproc.New(inproc.Options{Files: files, K: in.Mapping.K(), Sizes: in.Sizes, MemBytes: in.Budget,
		RemoteMemBytes: remote, Window: window, Seed: in.Seed, Policy: inproc.Window, Lead: in.Lead, Ramp: in.Ramp,
		Keep: in.Keep, Traces: traces, Epochs: epochs})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// drive runs c's current epoch to its end (prototest.Clients): depth
// positions asked ahead per rank at random, each rank's clients stopping
// at stop (nil: at the end of their traces).
func drive(t *testing.T, c *inproc.Cluster, seed uint64, depth int, stop []int) {
	t.Helper()
	d := &prototest.Clients{C: c, Rng: rand.New(rand.NewPCG(seed, 7)), Depth: depth, Stop: stop}
	if err := d.Run(); err != nil {
		t.Fatal(err)
	}
}

// plan returns the plan rank r carries out.
func plan(c *inproc.Cluster, r int) *proto.WindowPlan {
	return c.Ranks[r].(*proto.WindowRank).Plan()
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
			c := newWindowCluster(t, in, remote, int(seed%40), traces, 0)
			if err := c.StartEpoch(in.Epoch, in.Traces, nil); err != nil {
				t.Fatal(err)
			}
			var stop []int
			if early {
				rng := rand.New(rand.NewPCG(seed, 8))
				for _, tr := range in.Traces {
					stop = append(stop, len(tr))
					if rng.IntN(2) == 0 {
						stop[len(stop)-1] = rng.IntN(len(tr) + 1)
					}
				}
			}
			drive(t, c, seed, 1+int(seed%12), stop)
			if early {
				return
			}
			if err := c.CheckComplete(); err != nil {
				t.Fatal(err)
			}
			var total int64
			for r := range in.Mapping.Ranks() {
				total += in.Mapping.ShardBytes(r)
			}
			if read := c.Stats().ChunkBytes; read != total {
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
					in.After, in.Resident = want.Drains, want.Resident
				}
				var err error
				if want, err = proto.PlanWindow(in); err != nil {
					t.Fatal(err)
				}
			}
			in.After, in.Resident = nil, nil
			rng := rand.New(rand.NewPCG(seed, 9))
			start := make([]int32, m.Ranks())
			for r := range start {
				start[r] = int32(rng.IntN(len(in.Traces[r]) + 1))
			}
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), traces, 0)
			if err := c.ResumeEpoch(in.Epoch, in.Traces, start, nil); err != nil {
				t.Fatal(err)
			}
			for r := range m.Ranks() {
				if !slices.Equal(plan(c, r).Files[r], want.Files[r]) {
					t.Fatalf("rank %d resumed with another plan than the uninterrupted run's", r)
				}
			}
			drive(t, c, seed, 1+int(seed%12), nil)
			if err := c.CheckComplete(); err != nil { // the positions before start count as delivered before
				t.Fatal(err)
			}
			var total int64
			for r := range m.Ranks() {
				total += m.ShardBytes(r)
			}
			if read := c.Stats().ChunkBytes; read > total {
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
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), traces, 0)
			if err := c.ResumeEpoch(e, proto.RestTraces(m.Files(), m.Ranks(), seed, e, delivered), nil, delivered); err != nil {
				t.Fatal(err)
			}
			for r := range m.Ranks() {
				if !slices.Equal(plan(c, r).Files[r], want.Files[r]) {
					t.Fatalf("rank %d resumed with another plan than RestPlan's", r)
				}
			}
			drive(t, c, seed, 1+int(seed%12), nil)
			if err := c.CheckComplete(); err != nil {
				t.Fatal(err)
			}
			left := 0
			for _, d := range delivered {
				if !d {
					left++
				}
			}
			got := 0
			for r, fs := range c.Delivered {
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
			for k := range c.Issued {
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
			in.Epoch, in.Traces, in.After, in.Resident = e, traces(e), nil, nil
			if e > 1 {
				in.After, in.Resident = want[e-2].Drains, want[e-2].Resident
			}
			p, err := proto.PlanWindow(in)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, p)
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := newWindowCluster(t, in, int64(seed%3)*3000, int(seed%40), traces, epochs)
			for e := uint32(1); e <= epochs; e++ {
				if err := c.StartEpoch(e, traces(e), nil); err != nil {
					t.Fatal(err)
				}
				for r := range m.Ranks() {
					if !slices.Equal(plan(c, r).Files[r], want[e-1].Files[r]) {
						t.Fatalf("epoch %d: rank %d carries out another plan than the sequential one", e, r)
					}
				}
				drive(t, c, seed+uint64(e), 1+int(seed%12), nil)
				if err := c.CheckComplete(); err != nil {
					t.Fatalf("epoch %d: %v", e, err)
				}
				early += c.Stats().EarlyReads
				for r := range m.Ranks() {
					lo, n := m.RankPCs(r)
					for pc := lo; pc < lo+n; pc++ {
						if k := c.Issued[[2]int{int(e), pc}]; k != 1 {
							t.Fatalf("epoch %d: chunk %d read %d times", e, pc, k)
						}
					}
				}
			}
			for k := range c.Issued {
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
