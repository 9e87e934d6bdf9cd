package proto_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/prototest"
)

// windowCase is a random window-policy input: ranks, K, file counts, sizes
// of any spread, budgets from one chunk to the whole shard, traces of
// unequal lengths that together hold every file once.
func windowCase(t *testing.T, seed uint64) proto.WindowInput {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	ranks, k := 1+rng.IntN(4), 1+rng.IntN(16)
	d := proto.Dataset{K: k}
	sizes := make([][]int64, ranks)
	spread := rng.Float64() * 2
	for h := range ranks {
		n := rng.IntN(300)
		sizes[h] = make([]int64, n)
		var total int64
		for i := range sizes[h] {
			sizes[h][i] = int64(1 + 1000*math.Exp(spread*rng.NormFloat64()))
			total += sizes[h][i]
		}
		d.Shards = append(d.Shards, proto.Shard{Files: n, Bytes: total, MemBytes: total})
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		t.Fatal(err)
	}
	in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: seed, Epoch: uint32(rng.IntN(3)),
		Lead: rng.IntN(2 * k), Ramp: rng.IntN(4), Window: rng.IntN(100)}
	if rng.IntN(4) > 0 {
		for range ranks {
			in.Remote = append(in.Remote, rng.Int64N(20000))
		}
	}
	for h := range ranks {
		var largest, total int64
		first, n := m.RankPCs(h)
		for pc := first; pc < first+n; pc++ {
			lo, hi := m.PCFiles(pc)
			var b int64
			for f := lo; f < hi; f++ {
				b += sizes[h][int(f)-int(mustFirst(m, h))]
			}
			largest, total = max(largest, b), total+b
		}
		in.Budget = append(in.Budget, largest+rng.Int64N(max(total-largest, 0)+1))
	}
	perm := rng.Perm(m.Files())
	cuts := []int{0}
	for range ranks - 1 {
		cuts = append(cuts, rng.IntN(m.Files()+1))
	}
	cuts = append(cuts, m.Files())
	slices.Sort(cuts)
	for r := range ranks {
		var tr []proto.FileID
		for _, f := range perm[cuts[r]:cuts[r+1]] {
			tr = append(tr, proto.FileID(f))
		}
		in.Traces = append(in.Traces, tr)
	}
	if rng.IntN(2) == 0 { // partial residency, in half the cases
		in.Keep = rng.Float64()
	}
	return in
}

func mustFirst(m *proto.Mapping, h int) proto.FileID {
	f, _ := m.RankFiles(h)
	return f
}

// checkWindowPlan checks a plan against its input (prototest.CheckWindowPlan)
// and against the slow reference schedule of the same draws.
func checkWindowPlan(t *testing.T, in proto.WindowInput, p *proto.WindowPlan) {
	t.Helper()
	if err := prototest.CheckWindowPlan(in, p); err != nil {
		t.Fatal(err)
	}
	if err := prototest.CheckWindowReference(in, p); err != nil {
		t.Fatal(err)
	}
}

func TestWindowPlanExactlyOnceWithinBudget(t *testing.T) {
	for seed := range uint64(300) {
		in := windowCase(t, seed)
		p, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkWindowPlan(t, in, p)
	}
}

// The next epoch reads its first chunks into the room the previous one's
// pools free as they drain: within each budget at every step before the
// epoch starts, one read at a time after the previous epoch's last, and
// the epoch itself passes every check.
func TestWindowPlanOverlapsEpochs(t *testing.T) {
	ahead := 0
	for seed := range uint64(200) {
		in := windowCase(t, 5000+seed)
		p, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		next := in
		next.Epoch++
		next.After = p.Drains
		next.Traces = reshuffle(in.Traces, seed)
		q, err := proto.PlanWindow(next)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkWindowPlan(t, next, q)
		for _, rds := range q.Reads {
			for _, rd := range rds {
				if rd.Issue < 0 {
					ahead++
				}
			}
		}
	}
	if ahead == 0 {
		t.Fatal("no read was planned before an epoch's start")
	}
}

// reshuffle returns traces of the same lengths over the same files in
// another order.
func reshuffle(traces [][]proto.FileID, seed uint64) [][]proto.FileID {
	var all []proto.FileID
	for _, tr := range traces {
		all = append(all, tr...)
	}
	rand.New(rand.NewPCG(seed, 9)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	out := make([][]proto.FileID, len(traces))
	for r, tr := range traces {
		out[r], all = all[:len(tr):len(tr)], all[len(tr):]
	}
	return out
}

// A position is answered by a file drawn uniformly from its home's pool:
// with every chunk in before the first answer, the file answering the
// first position, over 6,000 seeds, is each of the 6 files about as often
// (chi-square with 5 degrees of freedom under 20.5, p = 0.001; the seeds
// are fixed, so the test cannot flake).
func TestWindowPlanDrawsUniformly(t *testing.T) {
	m, err := proto.NewMapping(proto.Dataset{K: 2, Shards: []proto.Shard{{Files: 6, Bytes: 6, MemBytes: 6}}})
	if err != nil {
		t.Fatal(err)
	}
	in := proto.WindowInput{Mapping: m, Sizes: [][]int64{{1, 1, 1, 1, 1, 1}}, Budget: []int64{6}, Lead: 1, Ramp: 3,
		Traces: [][]proto.FileID{{0, 1, 2, 3, 4, 5}}}
	const runs = 6000
	var count [6]int
	for seed := range uint64(runs) {
		in.Seed = seed
		p, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		count[p.Files[0][0]]++
	}
	var chi2 float64
	for _, c := range count {
		d := float64(c) - runs/6
		chi2 += d * d / (runs / 6)
	}
	if chi2 > 20.5 {
		t.Fatalf("first files %v: chi-square %.1f, not uniform", count, chi2)
	}
}

func TestWindowPlanIsDeterministic(t *testing.T) {
	in := windowCase(t, 7)
	a, _ := proto.PlanWindow(in)
	b, _ := proto.PlanWindow(in)
	if a.String() != b.String() {
		t.Fatal("the same input gave two plans")
	}
	in.Seed++
	c, _ := proto.PlanWindow(in)
	if a.String() == c.String() {
		t.Fatal("another seed gave the same plan")
	}
}

// Changing the budgets, the lead or the ramp changes which file answers a
// position and when chunks are read, never the home rank that answers it
// (the traces decide that), and every such plan passes the same checks.
func TestWindowPlanMetamorphic(t *testing.T) {
	for seed := range uint64(50) {
		in := windowCase(t, 1000+seed)
		base, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		homes := func(p *proto.WindowPlan) string {
			var b strings.Builder
			for _, fs := range p.Files {
				for _, f := range fs {
					b.WriteByte(byte('0' + in.Mapping.Home(f)))
				}
				b.WriteByte('|')
			}
			return b.String()
		}
		in2 := in
		in2.Lead, in2.Ramp = in.Lead+3, in.Ramp+1
		in2.Budget = append([]int64(nil), in.Budget...)
		for h := range in2.Budget {
			in2.Budget[h] += 5000
		}
		other, err := proto.PlanWindow(in2)
		if err != nil {
			t.Fatal(err)
		}
		checkWindowPlan(t, in2, other)
		if homes(base) != homes(other) {
			t.Fatalf("seed %d: the homes answering each position changed with the budget", seed)
		}
	}
}

func TestWindowPlanRefusesBadInput(t *testing.T) {
	in := windowCase(t, 3)
	for in.Mapping.Files() == 0 {
		in = windowCase(t, uint64(len(in.Traces))+100)
	}
	small := in
	small.Budget = make([]int64, len(in.Budget))
	if _, err := proto.PlanWindow(small); err == nil || !strings.Contains(err.Error(), "more than the rank's budget") {
		t.Fatalf("a budget of 0: %v", err)
	}
	twice := in
	twice.Traces = make([][]proto.FileID, len(in.Traces))
	copy(twice.Traces, in.Traces)
	for r, tr := range twice.Traces {
		if len(tr) > 0 {
			twice.Traces[r] = append(append([]proto.FileID(nil), tr...), tr[0])
			break
		}
	}
	if _, err := proto.PlanWindow(twice); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Fatalf("a file twice: %v", err)
	}
	late := in // a read due past the int32 steps count
	late.Lead = math.MaxInt32
	if _, err := proto.PlanWindow(late); err == nil || !strings.Contains(err.Error(), "more than the limit of 2147483647 steps") {
		t.Fatalf("a lead of 2^31-1 steps: %v", err)
	}
}

// The pool is the rank's whole memory, so a batch mixes nearly as many
// chunks as a true shuffle's.
func TestWindowPlanMixesChunks(t *testing.T) {
	const files, k, batch = 200_000, 64, 256
	sizes := make([]int64, files)
	for i := range sizes {
		sizes[i] = 1000
	}
	m, err := proto.NewMapping(proto.Dataset{K: k, Shards: []proto.Shard{{Files: files, Bytes: files * 1000, MemBytes: files * 250}}})
	if err != nil {
		t.Fatal(err)
	}
	perm := rand.New(rand.NewPCG(1, 2)).Perm(files)
	tr := make([]proto.FileID, files)
	for i, f := range perm {
		tr[i] = proto.FileID(f)
	}
	in := proto.WindowInput{Mapping: m, Sizes: [][]int64{sizes}, Traces: [][]proto.FileID{tr}, Seed: 1,
		Budget: []int64{files * 250}, Lead: k / 8, Ramp: 8}
	p, err := proto.PlanWindow(in)
	if err != nil {
		t.Fatal(err)
	}
	distinct := func(fs []proto.FileID) float64 {
		var sum int
		for i := 0; i+batch <= len(fs); i += batch {
			pcs := map[int]bool{}
			for _, f := range fs[i : i+batch] {
				pcs[m.PC(f)] = true
			}
			sum += len(pcs)
		}
		return float64(sum) / float64(len(fs)/batch)
	}
	got, shuffle := distinct(p.Files[0]), distinct(tr)
	t.Logf("distinct chunks per batch of %d: window %.1f, shuffle %.1f (%.1f%%); waits %d", batch, got, shuffle,
		100*got/shuffle, p.WaitSteps[0])
	if got < 0.94*shuffle {
		t.Fatalf("window %.1f distinct chunks per batch, below 94%% of a shuffle's %.1f", got, shuffle)
	}
}

// BenchmarkPlanWindowImageNet plans an epoch of 1.28 M files on 3 ranks,
// K=64, a quarter of each shard in memory.
func BenchmarkPlanWindowImageNet(b *testing.B) {
	const files, ranks, k = 1_281_167, 3, 64
	d := proto.Dataset{K: k}
	sizes := make([][]int64, ranks)
	for h := range ranks {
		n := (h+1)*files/ranks - h*files/ranks
		sizes[h] = make([]int64, n)
		for i := range sizes[h] {
			sizes[h][i] = 110_000
		}
		d.Shards = append(d.Shards, proto.Shard{Files: n, Bytes: int64(n) * 110_000})
	}
	m, err := proto.NewMapping(d)
	if err != nil {
		b.Fatal(err)
	}
	in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: 1, Lead: k / 8, Ramp: 8}
	perm := rand.New(rand.NewPCG(1, 1)).Perm(files)
	for h := range ranks {
		in.Budget = append(in.Budget, m.ShardBytes(h)/4)
		lo, hi := h*files/ranks, (h+1)*files/ranks
		tr := make([]proto.FileID, 0, hi-lo)
		for _, f := range perm[lo:hi] {
			tr = append(tr, proto.FileID(f))
		}
		in.Traces = append(in.Traces, tr)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := proto.PlanWindow(in); err != nil {
			b.Fatal(err)
		}
	}
}
