package proto_test

import (
	"fmt"
	"slices"
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
		for pc := first; pc < first+n; pc++ {
			alone := hp.Resident != nil && hp.Resident[pc-first]
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
