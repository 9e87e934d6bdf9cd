package proto

import "fmt"

// A window plan is made of one pool per home rank, and no pool looks at
// another: pool h's reads, its drain and the files it answers depend on
// h's chunks and budget and on which positions, step by step, ask for a
// file of h. PlanHome plans one pool alone, in memory and time that grow
// with h's share of the files (and one pass over the traces), where
// PlanWindow plans every pool: it is the part of the plan a rank can make
// by itself, which a plan per rank starts from.

// Answer is a position answered by a home's pool: position Sn of rank
// Rank gets File, in the pool from step At.
type Answer struct {
	Rank, Sn int32
	File     FileID
	At       int32
}

// HomePlan is one home rank's pool in an epoch's window plan: the parts
// of WindowPlan that are h's (Reads[h], WaitSteps[h], PeakBytes[h],
// Drains[h], Resident of h's chunks), and the positions its files answer,
// in step order and, within a step, in rank order.
type HomePlan struct {
	Home      int
	Reads     []PlannedRead
	WaitSteps int64
	PeakBytes int64
	Drain     Drain
	// Resident marks, per chunk of h (from its first, Mapping.RankPCs),
	// those kept to the epoch's end: the next epoch's Resident.
	Resident []bool
	Answers  []Answer
	// Steps is the length of the longest trace, as WindowPlan's.
	Steps int
}

// PlanHome plans home h's pool of the epoch in: what PlanWindow(in) plans
// for it, the same to the byte. in.Resident and in.After are read for h
// only, in.Sizes and in.Budget only for h's files and h (and checked for
// h only); the traces whole.
func PlanHome(in WindowInput, h int) (*HomePlan, error) {
	if in.Mapping != nil && (h < 0 || h >= in.Mapping.Ranks()) {
		return nil, fmt.Errorf("proto: the pool of rank %d in a job of %d ranks", h, in.Mapping.Ranks())
	}
	if err := in.validateFor(h); err != nil {
		return nil, err
	}
	m := in.Mapping
	kept := make([]bool, m.PCs())
	pl := in.newPool(h, kept)
	if in.After != nil {
		in.fillDrain(h, pl, in.After[h])
	}
	hp := &HomePlan{Home: h, Steps: in.steps()}
	for t := int32(0); int(t) < hp.Steps; t++ {
		in.begin(pl, h, t)
		for r, tr := range in.Traces {
			if int(t) < len(tr) && m.Home(tr[t]) == h {
				f, at := in.draw(h, pl, t)
				hp.Answers = append(hp.Answers, Answer{Rank: int32(r), Sn: t, File: f, At: at})
			}
		}
	}
	hp.Reads = append(pl.reads, pl.pending...)
	hp.WaitSteps, hp.PeakBytes = pl.waits, pl.peak
	hp.Drain = Drain{Held: pl.drain, LastDue: pl.lastDue - int32(hp.Steps)}
	first, n := m.RankPCs(h)
	for _, rd := range hp.Reads {
		if kept[rd.PC] {
			if hp.Resident == nil {
				hp.Resident = make([]bool, n)
			}
			hp.Resident[rd.PC-first] = true
		}
	}
	return hp, nil
}
