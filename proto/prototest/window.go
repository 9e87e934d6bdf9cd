package prototest

import (
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// CheckWindowPlan checks a window plan against its input, replaying it
// step by step: every file answers exactly one position, of a rank asking
// for a file of its home, never before its chunk's read is due; every
// chunk is read once; each pool stays within its budget at every step,
// with the previous epoch's drain before step 0 when in.After is set;
// and each rank's pushes are other ranks' files, not before their home
// has them nor more than Window positions ahead, within its Remote bytes.
func CheckWindowPlan(in proto.WindowInput, p *proto.WindowPlan) error {
	due, err := checkReads(in, p)
	if err != nil {
		return err
	}
	if err := replayPools(in, p, due); err != nil {
		return err
	}
	for h := range p.Reads {
		if err := checkDrainFill(in, p, h); err != nil {
			return err
		}
	}
	return checkPushes(in, p)
}

// checkReads checks that each rank reads each of its chunks once, and
// returns each chunk's due step.
func checkReads(in proto.WindowInput, p *proto.WindowPlan) ([]int32, error) {
	m := in.Mapping
	due := make([]int32, m.PCs())
	read := make([]bool, m.PCs())
	for h, rds := range p.Reads {
		first, n := m.RankPCs(h)
		if len(rds) != n {
			return nil, fmt.Errorf("rank %d: %d reads for %d chunks", h, len(rds), n)
		}
		for _, rd := range rds {
			if rd.PC < first || rd.PC >= first+n || read[rd.PC] {
				return nil, fmt.Errorf("rank %d: chunk %d read twice or not its own", h, rd.PC)
			}
			if rd.Due < rd.Issue {
				return nil, fmt.Errorf("rank %d: chunk %d due at %d before its issue at %d", h, rd.PC, rd.Due, rd.Issue)
			}
			read[rd.PC], due[rd.PC] = true, rd.Due
		}
	}
	return due, nil
}

// replayPools replays the plan from step 0: a read starts as soon as its
// rank's pool has room for it in its issue step (the planner issues at a
// step's start, or when a draw has emptied the pool), and must have
// started by the step's end.
func replayPools(in proto.WindowInput, p *proto.WindowPlan, due []int32) error {
	m := in.Mapping
	seen := make([]bool, m.Files())
	held := make([]int64, m.Ranks())
	next := make([]int, m.Ranks())
	start := func(h int, step int32) {
		for rds := p.Reads[h]; next[h] < len(rds) && rds[next[h]].Issue <= step; next[h]++ {
			b := in.ChunkBytes(rds[next[h]].PC)
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
				return fmt.Errorf("file %d answers two positions", f)
			}
			seen[f] = true
			if m.Home(f) != m.Home(in.Traces[r][step]) {
				return fmt.Errorf("rank %d position %d: file %d of rank %d for a request of rank %d", r, step, f,
					m.Home(f), m.Home(in.Traces[r][step]))
			}
			if due[m.PC(f)] > step || p.At[r][step] != due[m.PC(f)] {
				return fmt.Errorf("rank %d position %d: file %d answers at step %d, its chunk due at %d (at %d)",
					r, step, f, step, due[m.PC(f)], p.At[r][step])
			}
			held[m.Home(f)] -= in.FileSize(f)
			start(m.Home(f), step)
		}
		for h, rds := range p.Reads {
			if next[h] < len(rds) && rds[next[h]].Issue <= step {
				return fmt.Errorf("step %d: rank %d cannot start its read of chunk %d within its budget of %d (holds %d)",
					step, h, rds[next[h]].PC, in.Budget[h], held[h])
			}
		}
	}
	for f, ok := range seen {
		if !ok {
			return fmt.Errorf("file %d answered no position", f)
		}
	}
	return nil
}

// checkDrainFill checks rank h's reads issued before the epoch's start:
// within the previous epoch's drain, one at a time after its last read,
// and within the budget together with the previous pool.
func checkDrainFill(in proto.WindowInput, p *proto.WindowPlan, h int) error {
	var d proto.Drain
	if in.After != nil {
		d = in.After[h]
	}
	rds := p.Reads[h]
	var held int64
	n, last := 0, d.LastDue
	for s := -int32(len(d.Held)); s < 0; s++ {
		for ; n < len(rds) && rds[n].Issue == s; n++ {
			held += in.ChunkBytes(rds[n].PC)
			want := max(s, last) + int32(in.Lead)
			if n < in.Ramp {
				want = min(want, 0) // the ramp: in before the epoch's first answer
			}
			// a draw from an empty pool makes a read due earlier (a wait)
			if rds[n].Due > want {
				return fmt.Errorf("rank %d: chunk %d issued at %d due at %d, want %d", h, rds[n].PC, s, rds[n].Due, want)
			}
			last = want
		}
		if used := held + d.Held[int(s)+len(d.Held)]; used > in.Budget[h] {
			return fmt.Errorf("rank %d, %d steps before the epoch: %d bytes with the previous pool, budget %d",
				h, -s, used, in.Budget[h])
		}
	}
	if n < len(rds) && rds[n].Issue < 0 {
		return fmt.Errorf("rank %d: chunk %d issued at %d, before the previous epoch's drain of %d steps",
			h, rds[n].PC, rds[n].Issue, len(d.Held))
	}
	return nil
}

// checkPushes checks each rank's pushes.
func checkPushes(in proto.WindowInput, p *proto.WindowPlan) error {
	m := in.Mapping
	for r, fs := range p.Files {
		delta := make([]int64, len(fs)+1)
		for sn, f := range fs {
			push := p.PushAt[r][sn]
			if (push < 0) != (m.Home(f) == r) {
				return fmt.Errorf("rank %d position %d: file %d of rank %d pushed at %d", r, sn, f, m.Home(f), push)
			}
			if push < 0 || push == int32(sn) {
				continue
			}
			if push > int32(sn) || push < p.At[r][sn] || int(push) < sn-in.Window {
				return fmt.Errorf("rank %d position %d: pushed at %d, in its home from %d, window %d", r, sn, push,
					p.At[r][sn], in.Window)
			}
			delta[push] += in.FileSize(f)
			delta[sn+1] -= in.FileSize(f)
		}
		var held int64
		for step, d := range delta[:len(fs)] {
			if held += d; held > remoteLimit(in, r) {
				return fmt.Errorf("rank %d step %d: %d bytes pushed ahead, remote budget %d", r, step, held,
					remoteLimit(in, r))
			}
		}
	}
	return nil
}

func remoteLimit(in proto.WindowInput, r int) int64 {
	if in.Remote == nil {
		return 0
	}
	return in.Remote[r]
}
