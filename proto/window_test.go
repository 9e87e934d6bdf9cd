package proto_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
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
	return in
}

func mustFirst(m *proto.Mapping, h int) proto.FileID {
	f, _ := m.RankFiles(h)
	return f
}

// checkWindowPlan checks a plan against its input: every file answers
// exactly one position, of a rank asking for a file of its home; every
// chunk is read once; and, replaying the plan step by step, each pool stays
// within its budget and no file answers a position before its read is due.
func checkWindowPlan(t *testing.T, in proto.WindowInput, p *proto.WindowPlan) {
	t.Helper()
	m := in.Mapping
	size := func(f proto.FileID) int64 { h := m.Home(f); return in.Sizes[h][f-mustFirst(m, h)] }
	due := make([]int32, m.PCs())
	for i := range due {
		due[i] = -1
	}
	for h, rds := range p.Reads {
		first, n := m.RankPCs(h)
		if len(rds) != n {
			t.Fatalf("rank %d: %d reads for %d chunks", h, len(rds), n)
		}
		for _, rd := range rds {
			if rd.PC < first || rd.PC >= first+n || due[rd.PC] >= 0 {
				t.Fatalf("rank %d: chunk %d read twice or not its own", h, rd.PC)
			}
			if rd.Due < rd.Issue {
				t.Fatalf("rank %d: chunk %d due at %d before its issue at %d", h, rd.PC, rd.Due, rd.Issue)
			}
			due[rd.PC] = rd.Due
		}
	}
	// Replay: a read starts as soon as its rank's pool has room for it
	// in its issue step (the planner issues at a step's start, or when a
	// draw has emptied the pool), and must have started by the step's end.
	seen := make([]bool, m.Files())
	held := make([]int64, m.Ranks())
	next := make([]int, m.Ranks())
	start := func(h int, step int32) {
		for rds := p.Reads[h]; next[h] < len(rds) && rds[next[h]].Issue <= step; next[h]++ {
			lo, hi := m.PCFiles(rds[next[h]].PC)
			var b int64
			for f := lo; f < hi; f++ {
				b += size(f)
			}
			if held[h]+b > in.Budget[h] {
				return
			}
			held[h] += b
		}
	}
	for step := range int32(p.Steps) {
		for h := range p.Reads {
			start(h, step)
		}
		for r, fs := range p.Files {
			if int(step) >= len(fs) {
				continue
			}
			f := fs[step]
			if seen[f] {
				t.Fatalf("file %d answers two positions", f)
			}
			seen[f] = true
			if m.Home(f) != m.Home(in.Traces[r][step]) {
				t.Fatalf("rank %d position %d: file %d of rank %d for a request of rank %d", r, step, f,
					m.Home(f), m.Home(in.Traces[r][step]))
			}
			if due[m.PC(f)] > step || p.At[r][step] != due[m.PC(f)] {
				t.Fatalf("rank %d position %d: file %d answers at step %d, its chunk due at %d (at %d)", r, step, f,
					step, due[m.PC(f)], p.At[r][step])
			}
			held[m.Home(f)] -= size(f)
			start(m.Home(f), step)
		}
		for h, rds := range p.Reads {
			if next[h] < len(rds) && rds[next[h]].Issue <= step {
				t.Fatalf("step %d: rank %d cannot start its read of chunk %d within its budget of %d (holds %d)",
					step, h, rds[next[h]].PC, in.Budget[h], held[h])
			}
		}
	}
	for f, ok := range seen {
		if !ok {
			t.Fatalf("file %d answered no position", f)
		}
	}
	checkPushes(t, in, p)
}

// checkPushes checks each rank's pushes: other ranks' files only, not
// before their home has them nor more than Window positions ahead, and
// never more bytes held ahead than the rank's Remote budget.
func checkPushes(t *testing.T, in proto.WindowInput, p *proto.WindowPlan) {
	t.Helper()
	m := in.Mapping
	for r, fs := range p.Files {
		delta := make([]int64, len(fs)+1)
		for sn, f := range fs {
			push := p.PushAt[r][sn]
			if (push < 0) != (m.Home(f) == r) {
				t.Fatalf("rank %d position %d: file %d of rank %d pushed at %d", r, sn, f, m.Home(f), push)
			}
			if push < 0 || push == int32(sn) {
				continue
			}
			if push > int32(sn) || push < p.At[r][sn] || int(push) < sn-in.Window {
				t.Fatalf("rank %d position %d: pushed at %d, in its home from %d, window %d", r, sn, push,
					p.At[r][sn], in.Window)
			}
			b := in.Sizes[m.Home(f)][f-mustFirst(m, m.Home(f))]
			delta[push] += b
			delta[sn+1] -= b
		}
		var held, limit int64
		if in.Remote != nil {
			limit = in.Remote[r]
		}
		for step, d := range delta[:len(fs)] {
			if held += d; held > limit {
				t.Fatalf("rank %d step %d: %d bytes pushed ahead, remote budget %d", r, step, held, limit)
			}
		}
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
		for h, d := range p.Drains {
			ahead += checkDrainFill(t, next, h, d, q.Reads[h])
		}
	}
	if ahead == 0 {
		t.Fatal("no read was planned before an epoch's start")
	}
}

// checkDrainFill checks rank h's reads issued before the epoch's start
// against the previous epoch's drain d, and returns how many there were.
func checkDrainFill(t *testing.T, in proto.WindowInput, h int, d proto.Drain, rds []proto.PlannedRead) int {
	t.Helper()
	var held int64
	n, last := 0, d.LastDue
	for s := -int32(len(d.Held)); s < 0; s++ {
		for ; n < len(rds) && rds[n].Issue == s; n++ {
			held += pcBytes(in, rds[n].PC)
			want := max(s, last) + int32(in.Lead)
			if n < in.Ramp {
				want = min(want, 0) // the ramp: in before the epoch's first answer
			}
			// a draw from an empty pool makes a read due earlier (a wait)
			if rds[n].Due > want {
				t.Fatalf("rank %d: chunk %d issued at %d due at %d, want %d", h, rds[n].PC, s, rds[n].Due, want)
			}
			last = want
		}
		if used := held + d.Held[int(s)+len(d.Held)]; used > in.Budget[h] {
			t.Fatalf("rank %d step %d before the epoch: %d bytes with the previous pool, budget %d", h, -s, used, in.Budget[h])
		}
	}
	if n < len(rds) && rds[n].Issue < 0 {
		t.Fatalf("rank %d: chunk %d issued at %d, before the previous epoch's drain of %d steps", h, rds[n].PC,
			rds[n].Issue, len(d.Held))
	}
	return n
}

func pcBytes(in proto.WindowInput, pc int) int64 {
	lo, hi := in.Mapping.PCFiles(pc)
	var b int64
	for f := lo; f < hi; f++ {
		b += in.FileSize(f)
	}
	return b
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
		100*got/shuffle, p.Waits[0])
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
