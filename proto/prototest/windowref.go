package prototest

import (
	"fmt"
	"slices"

	"github.com/brandrt/brandrt/proto"
)

// ReferencePlan recomputes a window plan's schedule the slow, plain way,
// from the policy's rules alone: given which file answers each position
// (files) and each rank's chunk order (order, PCs), it rebuilds the reads'
// issue and due steps, the waits, the peak bytes, the pushes and the
// drains, recounting every pool's bytes from scratch at every step. A
// plan from proto.PlanWindow must equal it; a file that is not in its
// home's pool when it answers is an error.
func ReferencePlan(in proto.WindowInput, files [][]proto.FileID, order [][]int) (*proto.WindowPlan, error) {
	ref := &refPlan{in: in, drawn: make([]bool, in.Mapping.Files()), kept: make([]bool, in.Mapping.PCs())}
	for h := range in.Mapping.Ranks() {
		ref.ranks = append(ref.ranks, &refRank{order: order[h], due: make([]int32, len(order[h])), landed: make([]bool, len(order[h]))})
		ref.keepTail(h)
	}
	p := &proto.WindowPlan{Files: files, Reads: make([][]proto.PlannedRead, len(ref.ranks)), Resident: ref.residentAfter(order)}
	for _, fs := range files {
		p.Steps = max(p.Steps, len(fs))
		p.At = append(p.At, make([]int32, len(fs)))
	}
	for h, rk := range ref.ranks {
		if in.After != nil {
			rk.lastDue = in.After[h].LastDue
			for i, held := range in.After[h].Held {
				ref.issue(h, int32(i-len(in.After[h].Held)), held)
			}
		}
	}
	for t := range int32(p.Steps) {
		if err := ref.step(p, t); err != nil {
			return nil, err
		}
	}
	for h, rk := range ref.ranks {
		for i := range rk.next {
			pc := rk.order[i]
			p.Reads[h] = append(p.Reads[h], proto.PlannedRead{PC: pc, Issue: rk.issue[i], Due: rk.due[i], Kept: ref.isKept(pc), Resident: ref.isResident(pc)})
		}
		p.WaitSteps = append(p.WaitSteps, rk.waits)
		p.PeakBytes = append(p.PeakBytes, rk.peak)
		p.Drains = append(p.Drains, proto.Drain{Held: rk.drain, LastDue: rk.lastDue - int32(p.Steps)})
	}
	for r := range files {
		p.PushAt = append(p.PushAt, ref.pushes(r, files[r], p.At[r]))
	}
	return p, nil
}

// CheckWindowReference checks that p's schedule equals ReferencePlan's
// for the same draws and chunk orders.
func CheckWindowReference(in proto.WindowInput, p *proto.WindowPlan) error {
	order := make([][]int, len(p.Reads))
	for h, rds := range p.Reads {
		for _, rd := range rds {
			order[h] = append(order[h], rd.PC)
		}
	}
	ref, err := ReferencePlan(in, p.Files, order)
	if err != nil {
		return err
	}
	if got, want := p.String(), ref.String(); got != want {
		return fmt.Errorf("the plan differs from the reference schedule:\n%s\nreference:\n%s", got, want)
	}
	for r := range p.At {
		if !slices.Equal(p.At[r], ref.At[r]) {
			return fmt.Errorf("rank %d: at %v, reference %v", r, p.At[r], ref.At[r])
		}
	}
	return nil
}

type refPlan struct {
	in    proto.WindowInput
	ranks []*refRank
	drawn []bool
	kept  []bool
}

func (ref *refPlan) isKept(pc int) bool     { return ref.kept[pc] }
func (ref *refPlan) isResident(pc int) bool { return ref.in.Resident != nil && ref.in.Resident[pc] }

// keepTail marks the chunks h keeps to the epoch's end: the longest run
// at the end of its order whose bytes (those not delivered before) fit
// KeepBytes.
func (ref *refPlan) keepTail(h int) {
	room := ref.in.KeepBytes(h)
	order := ref.ranks[h].order
	for i := len(order) - 1; i >= 0; i-- {
		b := ref.restBytes(order[i])
		if b > room {
			return
		}
		room -= b
		ref.kept[order[i]] = true
	}
}

// restBytes is the bytes of chunk pc's files not delivered before.
func (ref *refPlan) restBytes(pc int) int64 {
	var b int64
	lo, hi := ref.in.Mapping.PCFiles(pc)
	for f := lo; f < hi; f++ {
		if ref.in.Delivered == nil || !ref.in.Delivered[f] {
			b += ref.in.FileSize(f)
		}
	}
	return b
}

// residentAfter is the next epoch's Resident: the chunks kept, or nil.
func (ref *refPlan) residentAfter(order [][]int) []bool {
	for _, pcs := range order {
		for _, pc := range pcs {
			if ref.isKept(pc) {
				return ref.kept
			}
		}
	}
	return nil
}

type refRank struct {
	order   []int
	next    int // reads issued
	issue   []int32
	due     []int32
	landed  []bool
	lastDue int32
	stored  int // reads from storage issued
	waits   int64
	peak    int64
	drain   []int64
}

func (ref *refPlan) step(p *proto.WindowPlan, t int32) error {
	for h, rk := range ref.ranks {
		ref.issue(h, t, 0)
		for i := range rk.next {
			rk.landed[i] = rk.landed[i] || rk.due[i] <= t
		}
		if rk.next == len(rk.order) {
			rk.drain = append(rk.drain, ref.held(h)-ref.keptIssued(h))
		}
	}
	for r, fs := range p.Files {
		if int(t) >= len(fs) {
			continue
		}
		i, err := ref.draw(fs[t], t)
		if err != nil {
			return fmt.Errorf("rank %d position %d: %w", r, t, err)
		}
		p.At[r][t] = ref.ranks[ref.in.Mapping.Home(fs[t])].due[i]
	}
	return nil
}

// draw takes file f from its home's pool at step t, first making the
// oldest pending read due now if the pool is empty, and returns the index
// of f's read.
func (ref *refPlan) draw(f proto.FileID, t int32) (int, error) {
	h := ref.in.Mapping.Home(f)
	rk := ref.ranks[h]
	if ref.poolEmpty(h) {
		if !slices.Contains(rk.landed[:rk.next], false) {
			ref.issue(h, t, 0)
		}
		i := slices.Index(rk.landed[:rk.next], false)
		if i < 0 {
			return 0, fmt.Errorf("rank %d has no file left", h)
		}
		d := rk.due[i] - t
		rk.waits += int64(d)
		for j := i; j < rk.next; j++ {
			rk.due[j] -= d // the reader kept reading while the position waited
		}
		rk.lastDue -= d
		rk.landed[i] = true
	}
	i := slices.Index(rk.order, ref.in.Mapping.PC(f))
	if i < 0 || i >= rk.next || !rk.landed[i] || ref.drawn[f] {
		return 0, fmt.Errorf("file %d is not in rank %d's pool", f, h)
	}
	ref.drawn[f] = true
	return i, nil
}

// issue starts h's next reads at step t while the budget, less other,
// has room; a resident one is due at once, without a read.
func (ref *refPlan) issue(h int, t int32, other int64) {
	rk := ref.ranks[h]
	for rk.next < len(rk.order) {
		pc := rk.order[rk.next]
		if other+ref.held(h)+ref.restBytes(pc) > ref.in.Budget[h] {
			return
		}
		due := t
		if !ref.isResident(pc) {
			due = max(t, rk.lastDue) + int32(ref.in.Lead)
			if rk.stored < ref.in.Ramp && t <= 0 {
				due = min(due, 0)
			}
			rk.lastDue = due
			rk.stored++
		}
		rk.issue = append(rk.issue, t)
		rk.due[rk.next] = due
		rk.next++
		rk.peak = max(rk.peak, ref.held(h))
	}
}

// keptIssued counts the bytes of h's issued reads of kept chunks.
func (ref *refPlan) keptIssued(h int) int64 {
	var b int64
	for _, pc := range ref.ranks[h].order[:ref.ranks[h].next] {
		if ref.isKept(pc) {
			b += ref.restBytes(pc)
		}
	}
	return b
}

// held counts the bytes of h's issued reads not yet drawn, and all of
// those of kept chunks.
func (ref *refPlan) held(h int) int64 {
	b := ref.keptIssued(h)
	for _, pc := range ref.ranks[h].order[:ref.ranks[h].next] {
		if ref.isKept(pc) {
			continue
		}
		lo, hi := ref.in.Mapping.PCFiles(pc)
		for f := lo; f < hi; f++ {
			if !ref.drawn[f] {
				b += ref.in.FileSize(f)
			}
		}
	}
	return b
}

func (ref *refPlan) poolEmpty(h int) bool {
	rk := ref.ranks[h]
	for i, pc := range rk.order[:rk.next] {
		lo, hi := ref.in.Mapping.PCFiles(pc)
		for f := lo; f < hi && rk.landed[i]; f++ {
			if !ref.drawn[f] {
				return false
			}
		}
	}
	return true
}

// pushes: at each step t, r's remote positions are taken in order, each
// pushed at t when it is within Window positions, in its home's pool, and
// fits with the bytes of the positions already pushed and not yet over;
// the first that cannot go stops the step. A position reached at its own
// step is sent on demand.
func (ref *refPlan) pushes(r int, files []proto.FileID, at []int32) []int32 {
	m := ref.in.Mapping
	push := make([]int32, len(files))
	var remote []int
	for sn, f := range files {
		push[sn] = -1
		if m.Home(f) != r {
			remote = append(remote, sn)
			push[sn] = int32(len(files)) // undecided
		}
	}
	for t := range len(files) {
		for _, sn := range remote {
			if int(push[sn]) < len(files) {
				continue
			}
			if sn == t {
				push[sn] = int32(t)
				continue
			}
			b := ref.in.FileSize(files[sn])
			if sn > t+ref.in.Window || at[sn] > int32(t) || ref.aheadBytes(files, push, t)+b > remoteLimit(ref.in, r) {
				break
			}
			push[sn] = int32(t)
		}
	}
	return push
}

// aheadBytes is the bytes of positions from t on already pushed ahead.
func (ref *refPlan) aheadBytes(files []proto.FileID, push []int32, t int) int64 {
	var b int64
	for sn := t; sn < len(files); sn++ {
		if push[sn] >= 0 && int(push[sn]) < sn {
			b += ref.in.FileSize(files[sn])
		}
	}
	return b
}
