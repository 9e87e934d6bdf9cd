package proto

import "fmt"

// A window plan is made of one pool per home rank, and no pool looks at
// another: pool h's reads, its drain and the files it answers depend on
// h's chunks and budget and on which positions, step by step, ask for a
// file of h. PlanHome plans one pool alone, in memory and time that grow
// with h's share of the files (and one pass over the traces), where
// PlanWindow plans every pool: it is the part of the plan a rank can make
// by itself, which a plan per rank starts from.
//
// A plan per rank is three steps, each in one rank's share of the files:
// each home plans its pool (PlanHome) and tells each rank the answers to
// its positions (HomePlan.ByRank); each rank puts its positions together
// from them and plans its pushes (PlanShare); each rank tells each home
// which of its files it takes ahead (RankShare.AheadBy). Together they
// are PlanWindow's Files, At and PushAt, to the byte
// (TestPlanPerRankIsTheWindowPlan). A WindowRank plans so: the answers
// travel in MsgAnswers, the positions taken ahead in MsgAhead.

// Answer is a position answered by a home's pool: position Sn of rank
// Rank gets File, of Size bytes, in the pool from step At.
type Answer struct {
	Rank, Sn int32
	File     FileID
	At       int32
	Size     int64
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
	// Resident marks, by global chunk id as WindowPlan's, h's chunks kept
	// to the epoch's end: the next epoch's Resident of h. Nil when none is.
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
	lo, files := m.RankFiles(h)
	hi := lo + FileID(files)
	asked := 0 // positions asking for a file of h's: the answers, allocated once
	for _, tr := range in.Traces {
		for _, f := range tr {
			if f >= lo && f < hi {
				asked++
			}
		}
	}
	hp.Answers = make([]Answer, 0, asked)
	for t := int32(0); int(t) < hp.Steps; t++ {
		in.begin(pl, h, t)
		for r, tr := range in.Traces {
			if int(t) < len(tr) && tr[t] >= lo && tr[t] < hi { // a file of h's
				f, at := in.draw(h, pl, t)
				hp.Answers = append(hp.Answers, Answer{Rank: int32(r), Sn: t, File: f, At: at, Size: in.size(h, f)})
			}
		}
	}
	hp.Reads = append(pl.reads, pl.pending...)
	hp.WaitSteps, hp.PeakBytes = pl.waits, pl.peak
	hp.Drain = Drain{Held: pl.drain, LastDue: pl.lastDue - int32(hp.Steps)}
	hp.Resident = residentAfter(nil, kept, hp.Reads)
	return hp, nil
}

// ByRank returns the home's answers by the rank whose positions they
// answer, each in position order: what the home tells each rank of the
// plan.
func (hp *HomePlan) ByRank(ranks int) [][]Answer {
	n := make([]int, ranks)
	for _, a := range hp.Answers {
		n[a.Rank]++
	}
	out := make([][]Answer, ranks)
	for r := range out {
		out[r] = make([]Answer, 0, n[r])
	}
	for _, a := range hp.Answers {
		out[a.Rank] = append(out[a.Rank], a)
	}
	return out
}

// RankShare is rank r's own positions in an epoch's window plan: the
// file answering each (Files, from step At) and when a file of another
// rank is pushed to it (PushAt): WindowPlan's Files[r], At[r] and
// PushAt[r].
type RankShare struct {
	Rank   int
	Files  []FileID
	At     []int32
	PushAt []int32
}

// PlanShare puts together rank r's positions from the answers each home
// gave them (fromHomes[h]: HomePlan.ByRank of h, r's part) and plans its
// pushes as PlanWindow does. Every position of r's trace must be
// answered once.
func PlanShare(in WindowInput, r int, fromHomes [][]Answer) (*RankShare, error) {
	m := in.Mapping
	if m == nil || r < 0 || r >= m.Ranks() || r >= len(in.Traces) || len(fromHomes) != m.Ranks() {
		return nil, fmt.Errorf("proto: rank %d's share of a plan given answers of %d homes", r, len(fromHomes))
	}
	n := len(in.Traces[r])
	rs := &RankShare{Rank: r, Files: make([]FileID, n), At: make([]int32, n)}
	sizes, seen := make([]int64, n), make([]bool, n)
	files := newBitset(m.Files()) // a bit per file of the dataset: no file answers two positions
	for h, as := range fromHomes {
		for _, a := range as {
			switch {
			case int(a.Rank) != r || a.Sn < 0 || int(a.Sn) >= n:
				return nil, fmt.Errorf("proto: home %d answers position %d of rank %d, not one of rank %d's %d", h, a.Sn, a.Rank, r, n)
			case a.File < 0 || int(a.File) >= m.Files() || m.Home(a.File) != h || m.Home(in.Traces[r][a.Sn]) != h:
				return nil, fmt.Errorf("proto: home %d answers position %d of rank %d with file %d, not one of its own, for file %d of home %d",
					h, a.Sn, r, a.File, in.Traces[r][a.Sn], m.Home(in.Traces[r][a.Sn]))
			case seen[a.Sn]:
				return nil, fmt.Errorf("proto: position %d of rank %d answered twice (again by home %d)", a.Sn, r, h)
			case files.has(int(a.File)):
				return nil, fmt.Errorf("proto: home %d answers two positions of rank %d with file %d", h, r, a.File)
			}
			seen[a.Sn] = true
			files.set(int(a.File))
			rs.Files[a.Sn], rs.At[a.Sn], sizes[a.Sn] = a.File, a.At, a.Size
		}
	}
	for sn, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("proto: no home answered position %d of rank %d", sn, r)
		}
	}
	rs.PushAt = in.pushes(r, rs.Files, rs.At, sizes)
	return rs, nil
}

// AheadBy returns, by home, the positions of the share that the home's
// file is pushed to ahead of the position's step, in position order:
// what the rank tells each home of the plan (the home pushes them as the
// rank grants; the others it sends when asked).
func (rs *RankShare) AheadBy(m *Mapping) [][]int32 {
	out := make([][]int32, m.Ranks())
	for sn, at := range rs.PushAt {
		if at >= 0 && int(at) < sn {
			h := m.Home(rs.Files[sn])
			out[h] = append(out[h], int32(sn))
		}
	}
	return out
}

// after returns the drains the next epoch's plan of h's pool starts from
// (WindowInput.After): h's own; the other pools' are not read.
func (hp *HomePlan) after(ranks int) []Drain {
	d := make([]Drain, ranks)
	d[hp.Home] = hp.Drain
	return d
}

// homeThrough plans home h's pool in epochs 1 to e on in with traces,
// each from what the one before it left, and returns epoch e's (nil when
// e is 0): planThrough's part for h.
func homeThrough(in WindowInput, h int, e uint32, traces func(uint32) [][]FileID) (*HomePlan, error) {
	in.After, in.Delivered, in.Resident = nil, nil, nil
	var hp *HomePlan
	for k := uint32(1); k <= e; k++ {
		in.Epoch, in.Traces = k, traces(k)
		var err error
		if hp, err = PlanHome(in, h); err != nil {
			return nil, fmt.Errorf("proto: epoch %d: %w", k, err)
		}
		in.After, in.Resident = hp.after(in.Mapping.Ranks()), hp.Resident
	}
	return hp, nil
}
