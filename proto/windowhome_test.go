package proto_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// Each home's pool planned alone is that pool in the whole plan, to the
// byte: over random inputs (partial residency in half), in a first epoch
// and in the next one, which reads into the first's drain and starts
// from its resident chunks, and in the rest of an epoch after delivered
// files.
func TestPlanHomeIsItsPartOfTheWindowPlan(t *testing.T) {
	for seed := range uint64(200) {
		in := windowCase(t, 9000+seed)
		p, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		checkHomes(t, fmt.Sprintf("seed %d, epoch 1", seed), in, p)
		next := in
		next.Epoch++
		next.After, next.Resident = p.Drains, p.Resident
		next.Traces = reshuffle(in.Traces, seed)
		q, err := proto.PlanWindow(next)
		if err != nil {
			t.Fatal(err)
		}
		checkHomes(t, fmt.Sprintf("seed %d, epoch 2", seed), next, q)
		rest := in
		rest.Delivered, rest.Traces = make([]bool, in.Mapping.Files()), nil
		for _, tr := range in.Traces {
			cut := len(tr) / 3
			for _, f := range tr[:cut] {
				rest.Delivered[f] = true
			}
			rest.Traces = append(rest.Traces, tr[cut:])
		}
		if r, err := proto.PlanWindow(rest); err == nil {
			checkHomes(t, fmt.Sprintf("seed %d, rest", seed), rest, r)
		}
	}
}

// checkHomes holds PlanHome(in, h) of every h against plan p of in.
func checkHomes(t *testing.T, what string, in proto.WindowInput, p *proto.WindowPlan) {
	t.Helper()
	m := in.Mapping
	answered := 0
	for h := range m.Ranks() {
		hp, err := proto.PlanHome(in, h)
		if err != nil {
			t.Fatalf("%s: home %d: %v", what, h, err)
		}
		if !slices.Equal(hp.Reads, p.Reads[h]) || hp.WaitSteps != p.WaitSteps[h] || hp.PeakBytes != p.PeakBytes[h] ||
			hp.Steps != p.Steps || hp.Drain.LastDue != p.Drains[h].LastDue || !slices.Equal(hp.Drain.Held, p.Drains[h].Held) {
			t.Fatalf("%s: home %d planned alone: reads %v, waits %d, peak %d, drain %+v; in the whole plan: %v, %d, %d, %+v",
				what, h, hp.Reads, hp.WaitSteps, hp.PeakBytes, hp.Drain, p.Reads[h], p.WaitSteps[h], p.PeakBytes[h], p.Drains[h])
		}
		first, n := m.RankPCs(h)
		for pc, res := range hp.Resident {
			if res && (pc < first || pc >= first+n) {
				t.Fatalf("%s: home %d marks chunk %d, of another home, resident", what, h, pc)
			}
		}
		for pc := first; pc < first+n; pc++ {
			alone := hp.Resident != nil && hp.Resident[pc]
			whole := p.Resident != nil && p.Resident[pc]
			if alone != whole {
				t.Fatalf("%s: home %d: chunk %d resident after the epoch %v alone, %v in the whole plan", what, h, pc, alone, whole)
			}
		}
		last := proto.Answer{Sn: -1}
		for _, a := range hp.Answers {
			if a.Sn < last.Sn || (a.Sn == last.Sn && a.Rank <= last.Rank) {
				t.Fatalf("%s: home %d answers position %d of rank %d after %d of rank %d", what, h, a.Sn, a.Rank, last.Sn, last.Rank)
			}
			last = a
			if f, at := p.Files[a.Rank][a.Sn], p.At[a.Rank][a.Sn]; f != a.File || at != a.At || m.Home(in.Traces[a.Rank][a.Sn]) != h {
				t.Fatalf("%s: home %d answers position %d of rank %d with file %d from step %d; the whole plan with %d from %d",
					what, h, a.Sn, a.Rank, a.File, a.At, f, at)
			}
		}
		answered += len(hp.Answers)
	}
	positions := 0
	for _, tr := range in.Traces {
		positions += len(tr)
	}
	if answered != positions {
		t.Fatalf("%s: the homes answer %d positions of %d", what, answered, positions)
	}
}

// A pool of a rank the job does not have is refused.
func TestPlanHomeRefusesOtherRanks(t *testing.T) {
	in := windowCase(t, 1)
	for _, h := range []int{-1, in.Mapping.Ranks()} {
		if _, err := proto.PlanHome(in, h); err == nil {
			t.Errorf("PlanHome(%d) of %d ranks: no error", h, in.Mapping.Ranks())
		}
	}
}

// The three steps of a plan per rank (each home's pool, each rank's
// share of its positions, the pushes each home is told of) put together
// are the whole plan's Files, At and PushAt, to the byte.
func TestPlanPerRankIsTheWindowPlan(t *testing.T) {
	for seed := range uint64(200) {
		in := windowCase(t, 12000+seed)
		p, err := proto.PlanWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		m := in.Mapping
		told := make([][][]proto.Answer, m.Ranks()) // told[r][h]: home h's answers to r
		for r := range told {
			told[r] = make([][]proto.Answer, m.Ranks())
		}
		for h := range m.Ranks() {
			hp, err := proto.PlanHome(in, h)
			if err != nil {
				t.Fatal(err)
			}
			for r, as := range hp.ByRank(m.Ranks()) {
				told[r][h] = as
			}
		}
		ahead := make([][]int32, m.Ranks()) // what the ranks told each home
		for r := range m.Ranks() {
			rs, err := proto.PlanShare(in, r, told[r])
			if err != nil {
				t.Fatalf("seed %d, rank %d: %v", seed, r, err)
			}
			if !slices.Equal(rs.Files, p.Files[r]) || !slices.Equal(rs.At, p.At[r]) || !slices.Equal(rs.PushAt, p.PushAt[r]) {
				t.Fatalf("seed %d, rank %d: its share\n%v %v %v\nthe whole plan\n%v %v %v",
					seed, r, rs.Files, rs.At, rs.PushAt, p.Files[r], p.At[r], p.PushAt[r])
			}
			for h, sns := range rs.AheadBy(m) {
				for _, sn := range sns {
					ahead[h] = append(ahead[h], int32(r)<<20|sn)
				}
			}
		}
		for h := range m.Ranks() { // the whole plan's pushes ahead of h's files
			var want []int32
			for r := range m.Ranks() {
				for sn, at := range p.PushAt[r] {
					if at >= 0 && int(at) < sn && m.Home(p.Files[r][sn]) == h {
						want = append(want, int32(r)<<20|int32(sn))
					}
				}
			}
			if !slices.Equal(ahead[h], want) {
				t.Fatalf("seed %d, home %d: told of pushes %v, the whole plan has %v", seed, h, ahead[h], want)
			}
		}
	}
}

// A share is refused when its answers are not its positions' once each.
func TestPlanShareRefusesBadAnswers(t *testing.T) {
	in := windowCase(t, 3)
	for in.Mapping.Ranks() < 2 || len(in.Traces[0]) < 2 {
		in = windowCase(t, uint64(len(in.Traces))+100)
	}
	m := in.Mapping
	told := make([][]proto.Answer, m.Ranks())
	for h := range m.Ranks() {
		hp, err := proto.PlanHome(in, h)
		if err != nil {
			t.Fatal(err)
		}
		told[h] = hp.ByRank(m.Ranks())[0]
	}
	if _, err := proto.PlanShare(in, 0, told); err != nil {
		t.Fatal(err)
	}
	h := m.Home(in.Traces[0][0])
	cases := map[string]func() [][]proto.Answer{
		"answered twice": func() [][]proto.Answer {
			c := slices.Clone(told)
			c[h] = append(slices.Clone(c[h]), c[h][0])
			return c
		},
		"no home answered": func() [][]proto.Answer {
			c := slices.Clone(told)
			c[h] = c[h][1:]
			return c
		},
		"answers position": func() [][]proto.Answer { // by another home
			c := slices.Clone(told)
			other := (h + 1) % m.Ranks()
			c[other] = append(slices.Clone(c[other]), c[h][0])
			return c
		},
	}
	for two := range told {
		if len(told[two]) >= 2 {
			cases["answers two positions"] = func() [][]proto.Answer { // with one file
				c := slices.Clone(told)
				c[two] = slices.Clone(c[two])
				c[two][1].File = c[two][0].File
				return c
			}
			break
		}
	}
	if len(cases) < 4 {
		t.Fatal("no home answers two of rank 0's positions")
	}
	for want, bad := range cases {
		if _, err := proto.PlanShare(in, 0, bad()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}
