package proto

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// DefaultLead and DefaultRamp are the Lead and Ramp that simulate and
// serve plan with, so that both deliver the same order.
const (
	DefaultLead = 8
	DefaultRamp = 64
)

// WindowInput is everything the window policy plans an epoch from. Every
// rank knows all of it when the epoch starts, so every rank computes the
// same plan.
type WindowInput struct {
	// Mapping is the dataset's static mapping.
	Mapping *Mapping
	// Sizes holds, per rank, the size in bytes of each of its files, in
	// file order.
	Sizes [][]int64
	// Traces holds, per rank, the files it requests this epoch, in order.
	// A position is answered by some file of the same home rank; no file
	// may appear twice.
	Traces [][]FileID
	// Seed and Epoch drive every random choice: the order in which each
	// rank reads its chunks and the draws from its pool.
	Seed  uint64
	Epoch uint32
	// Budget is, per rank, the most bytes of its pool: the chunks it has
	// read or is reading whose files are not yet delivered. It must hold
	// the rank's largest chunk.
	Budget []int64
	// Lead is the number of logical steps a chunk read takes: a read
	// issued at step t answers positions from step t+Lead on, and a rank
	// reads one chunk at a time.
	Lead int
	// Ramp is the number of chunks each rank has read before the epoch's
	// first position is answered (as many as fit, if fewer): the start-up
	// wait traded for the randomness of the first batches.
	Ramp int
	// Remote is, per rank, the most bytes of files other ranks pushed to
	// it ahead of their positions; nil or 0 pushes nothing ahead.
	Remote []int64
	// Window is how many positions ahead of the current step a file may
	// be pushed to the rank that will ask for it.
	Window int
	// After is the previous epoch's Drains, one per rank: its pools' room
	// as they empty at its end, which this epoch's first reads fill
	// (steps before 0). Nil starts every pool empty at step 0, as the
	// first epoch does.
	After []Drain
	// Delivered, when set, marks the files delivered before this plan
	// begins (the rest of an epoch resumed on another number of ranks,
	// RestTraces): they answer no position, and a chunk left with none of
	// its files to answer is not read. Indexed by file id.
	Delivered []bool
	// Keep is the share of a budget that the chunks an epoch reads last
	// may take to stay in memory into the next epoch, in [0, 1]
	// (windowkeep.go). A rank whose budget holds its shard keeps it all,
	// whatever Keep.
	Keep float64
	// Resident marks, per chunk (global id), the chunks in memory when
	// the epoch begins (the previous plan's Resident): they come first in
	// its order, cost no read, and their files may be drawn from the
	// first step. Nil: none.
	Resident []bool
}

// Drain is what one rank's pool leaves the next epoch: once its last read
// is issued, the pool only shrinks, and the next epoch may read into the
// room it frees.
type Drain struct {
	// Held[i] is the bytes the pool holds at the start of step
	// Steps-len(Held)+i of its epoch, once that step's reads are issued.
	Held []int64
	// LastDue is the step its last read is due, counted from the end of
	// the epoch (-1: the epoch's last step): a rank reads one chunk at a
	// time, so the next epoch's first read is due Lead steps later.
	LastDue int32
}

// PlannedRead is one chunk read of a window plan. Logical step t is the
// step at which every rank answers its position t.
type PlannedRead struct {
	// PC is the chunk's global id.
	PC int
	// Issue is the step from which the budget has room for it.
	Issue int32
	// Due is the step from which its files answer positions: the read
	// must be done by then.
	Due int32
	// Kept says the chunk stays in memory, whole, to the epoch's end and
	// into the next; Resident that it was in memory as the epoch began:
	// it is not read from storage.
	Kept, Resident bool
}

// WindowPlan is one epoch of the window policy: each rank reads each of
// its chunks once, into a pool bounded by its budget, and a position
// whose file has home H is answered by a file drawn uniformly from H's
// pool.
type WindowPlan struct {
	// Files[r][sn] is the file that answers position sn of rank r.
	Files [][]FileID
	// At[r][sn] is the step from which that file is in its home's pool:
	// the earliest its home may push it to r.
	At [][]int32
	// PushAt[r][sn] is the step at which a file from another rank is
	// pushed to r: before sn ahead of the request, within r's Remote
	// bytes; sn itself when it is sent on demand; -1 for r's own files.
	PushAt [][]int32
	// Reads[h] are rank h's chunk reads in the order it issues them.
	Reads [][]PlannedRead
	// WaitSteps[h] counts the logical steps by which draws from h's pool
	// moved a read's Due earlier than its lead allowed, because the pool
	// was empty: what requests would wait for storage. A wait of d steps
	// brings every later pending read d steps closer as well.
	WaitSteps []int64
	// PeakBytes[h] is the most bytes h's pool held at any step.
	PeakBytes []int64
	// Drains[h] is what h's pool leaves the next epoch (its After).
	Drains []Drain
	// Resident is the next epoch's Resident: the chunks kept to this
	// epoch's end. Nil when none is.
	Resident []bool
	// Steps is the length of the longest trace.
	Steps int
}

// pool is one home rank's state while an epoch is planned.
type pool struct {
	rng     *rand.Rand
	order   []int         // the rank's PCs, in read order
	bytes   []int64       // per entry of order, the chunk's bytes
	next    int           // the next of order to issue
	pending []PlannedRead // issued, not yet due, in issue order
	ready   []FileID      // files due and not yet drawn
	since   []int32       // per ready file, the step it became due
	held    int64         // bytes of pending and ready, and of kept chunks issued
	kept    int64         // bytes of kept chunks issued
	keep    []bool        // per chunk, kept to the epoch's end (retained)
	stored  int           // reads from storage issued
	lastDue int32
	drain   []int64 // held less kept at each step's start once every read is issued
	reads   []PlannedRead
	waits   int64
	peak    int64
}

// PlanWindow plans one epoch of the window policy. It is pure and
// deterministic: the same input gives the same plan.
func PlanWindow(in WindowInput) (*WindowPlan, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	m := in.Mapping
	kept := make([]bool, m.PCs())
	pools := make([]*pool, m.Ranks())
	for h := range pools {
		pools[h] = in.newPool(h, kept)
		if in.After != nil {
			in.fillDrain(h, pools[h], in.After[h])
		}
	}
	p := &WindowPlan{Files: make([][]FileID, len(in.Traces)), At: make([][]int32, len(in.Traces))}
	for r, tr := range in.Traces {
		p.Files[r] = make([]FileID, len(tr))
		p.At[r] = make([]int32, len(tr))
		p.Steps = max(p.Steps, len(tr))
	}
	for t := int32(0); int(t) < p.Steps; t++ {
		for h, pl := range pools {
			in.begin(pl, h, t)
		}
		for r, tr := range in.Traces {
			if int(t) < len(tr) {
				h := m.Home(tr[t])
				p.Files[r][t], p.At[r][t] = in.draw(h, pools[h], t)
			}
		}
	}
	for r := range in.Traces {
		p.PushAt = append(p.PushAt, in.pushes(r, p.Files[r], p.At[r], nil))
	}
	for _, pl := range pools {
		// reads still pending serve no position (the traces left files of
		// that rank out) but were planned, and read
		p.Reads = append(p.Reads, append(pl.reads, pl.pending...))
		p.Resident = residentAfter(p.Resident, kept, p.Reads[len(p.Reads)-1])
		p.WaitSteps = append(p.WaitSteps, pl.waits)
		p.PeakBytes = append(p.PeakBytes, pl.peak)
		p.Drains = append(p.Drains, Drain{Held: pl.drain, LastDue: pl.lastDue - int32(p.Steps)})
	}
	return p, nil
}

// begin starts step t of h's pool, before its draws: the reads its
// budget has room for issued, those due by t landed, and, once every read
// is issued, what it holds noted for the next epoch's drain. The pools
// of one step may begin in any order: none looks at another (PlanHome).
func (in WindowInput) begin(pl *pool, h int, t int32) {
	in.issue(h, pl, t, 0)
	in.admit(pl, t)
	if pl.next == len(pl.order) {
		pl.drain = append(pl.drain, pl.held-pl.kept)
	}
}

// fillDrain issues h's first reads into the room the previous epoch's
// pool frees as it drains, at steps counted back from this epoch's start.
func (in WindowInput) fillDrain(h int, pl *pool, d Drain) {
	pl.lastDue = d.LastDue
	for i, held := range d.Held {
		in.issue(h, pl, int32(i-len(d.Held)), held)
	}
}

// newPool returns rank h's pool at the epoch's start: its chunks in an
// order drawn from the seed and the epoch, those resident first (they
// cost no read: all are in from the start), and those it keeps to the
// end marked in kept.
func (in WindowInput) newPool(h int, kept []bool) *pool {
	first, n := in.Mapping.RankPCs(h)
	pl := &pool{rng: rand.New(rand.NewPCG(in.Seed^0x5749_4e44_4f57, uint64(in.Epoch)<<32|uint64(h))), keep: kept}
	pl.order, pl.bytes = make([]int, 0, n), make([]int64, 0, n)
	var later []int
	var laterBytes []int64
	for _, j := range pl.rng.Perm(n) {
		pc := first + j
		b := in.restBytes(pc)
		switch {
		case b < 0:
		case in.resident(pc):
			pl.order, pl.bytes = append(pl.order, pc), append(pl.bytes, b)
		default:
			later, laterBytes = append(later, pc), append(laterBytes, b)
		}
	}
	pl.order, pl.bytes = append(pl.order, later...), append(pl.bytes, laterBytes...)
	in.retained(h, pl, kept)
	return pl
}

// resident reports whether chunk pc is in memory as the epoch begins.
func (in WindowInput) resident(pc int) bool { return in.Resident != nil && in.Resident[pc] }

// residentAfter marks in res (made when nil and a chunk is kept) the
// chunks of reads rds kept to the epoch's end.
func residentAfter(res, kept []bool, rds []PlannedRead) []bool {
	for _, rd := range rds {
		if kept[rd.PC] {
			if res == nil {
				res = make([]bool, len(kept))
			}
			res[rd.PC] = true
		}
	}
	return res
}

// restBytes returns the bytes of chunk pc's files not yet delivered
// (Delivered), or -1 when none is left to deliver: the chunk is not read.
func (in WindowInput) restBytes(pc int) int64 {
	if in.Delivered == nil {
		return in.ChunkBytes(pc)
	}
	lo, hi := in.Mapping.PCFiles(pc)
	h := in.Mapping.Home(lo)
	b, left := int64(0), false
	for f := lo; f < hi; f++ {
		if !in.Delivered[f] {
			b, left = b+in.size(h, f), true
		}
	}
	if !left {
		return -1
	}
	return b
}

// issue starts reads of h's next chunks while its budget, less other
// bytes (what the previous epoch's pool holds beside the chunks it
// keeps), has room. A resident chunk needs no read: its files are due at
// once.
func (in WindowInput) issue(h int, pl *pool, t int32, other int64) {
	for pl.next < len(pl.order) {
		pc, b := pl.order[pl.next], pl.bytes[pl.next]
		rd := PlannedRead{PC: pc, Issue: t, Due: t, Kept: pl.keep[pc], Resident: in.resident(pc)}
		if other+pl.held+b > in.Budget[h] {
			return
		}
		if !rd.Resident {
			rd.Due = max(t, pl.lastDue) + int32(in.Lead)
			if pl.stored < in.Ramp && t <= 0 {
				rd.Due = min(rd.Due, 0) // read before the epoch's first answer
			}
			pl.lastDue = rd.Due
			pl.stored++
		}
		pl.pending = append(pl.pending, rd)
		pl.held += b
		if rd.Kept {
			pl.kept += b
		}
		pl.peak = max(pl.peak, pl.held)
		pl.next++
	}
}

// admit moves the reads due by step t into the pool.
func (in WindowInput) admit(pl *pool, t int32) {
	for len(pl.pending) > 0 && pl.pending[0].Due <= t {
		in.land(pl)
	}
}

// land moves the oldest pending read's files into the pool.
func (in WindowInput) land(pl *pool) {
	rd := pl.pending[0]
	pl.pending = pl.pending[1:]
	pl.reads = append(pl.reads, rd)
	lo, hi := in.Mapping.PCFiles(rd.PC)
	for f := lo; f < hi; f++ {
		if in.Delivered != nil && in.Delivered[f] {
			continue
		}
		pl.ready = append(pl.ready, f)
		pl.since = append(pl.since, rd.Due)
	}
}

// draw answers a position whose file has home h at step t with a file
// drawn uniformly from h's pool; an empty pool takes its next read now.
// A drawn file leaves memory, unless its chunk is kept to the end.
func (in WindowInput) draw(h int, pl *pool, t int32) (FileID, int32) {
	if len(pl.ready) == 0 {
		if len(pl.pending) == 0 {
			in.issue(h, pl, t, 0) // the pool is empty: its next chunk fits
		}
		if len(pl.pending) == 0 {
			panic(fmt.Sprintf("proto: invariant violated: rank %d has no file left for a position of step %d", h, t))
		}
		pl.stall(t)
		in.land(pl)
	}
	i := pl.rng.IntN(len(pl.ready))
	f, at := pl.ready[i], pl.since[i]
	last := len(pl.ready) - 1
	pl.ready[i], pl.since[i] = pl.ready[last], pl.since[last]
	pl.ready, pl.since = pl.ready[:last], pl.since[:last]
	if !pl.keep[in.Mapping.PC(f)] {
		pl.held -= in.size(h, f)
	}
	return f, at
}

// stall makes h's oldest pending read due at step t, d steps before its
// lead allowed: the position waits d steps for storage, and the reader,
// busy meanwhile, brings every later read d steps closer too.
func (pl *pool) stall(t int32) {
	d := max(pl.pending[0].Due-t, 0)
	pl.waits += int64(d)
	for i := range pl.pending {
		pl.pending[i].Due -= d
	}
	pl.lastDue -= d
}

// pushes plans when each file of another rank reaches r: at step t the
// files of r's positions in (t, t+Window] are pushed, in position order,
// once they are in their home's pool and while r's Remote bytes allow; a
// pushed file's bytes are r's until its position's step is over. A file
// not pushed ahead is sent on demand, at its step. sizes[sn] is the size
// of files[sn]; nil: in.Sizes has them.
func (in WindowInput) pushes(r int, files []FileID, at []int32, sizes []int64) []int32 {
	push := make([]int32, len(files))
	var remote []int32 // r's positions answered by other ranks' files
	for sn, f := range files {
		push[sn] = -1
		if in.Mapping.Home(f) != r {
			remote = append(remote, int32(sn))
		}
	}
	limit := int64(0)
	if in.Remote != nil {
		limit = in.Remote[r]
	}
	held, release := int64(0), make([]int64, len(files))
	next := 0
	for t := int32(0); int(t) < len(files); t++ {
		for ; next < len(remote); next++ {
			sn := remote[next]
			var b int64
			if sizes != nil {
				b = sizes[sn]
			} else {
				b = in.FileSize(files[sn])
			}
			if sn == t {
				push[sn] = t // on demand
				continue
			}
			if int(sn) > int(t)+in.Window || at[sn] > t || held+b > limit {
				break
			}
			push[sn], held, release[sn] = t, held+b, release[sn]+b
		}
		held -= release[t]
	}
	return push
}

// FileSize returns the size of file f in bytes.
func (in WindowInput) FileSize(f FileID) int64 { return in.size(in.Mapping.Home(f), f) }

func (in WindowInput) size(h int, f FileID) int64 {
	first, _ := in.Mapping.RankFiles(h)
	return in.Sizes[h][f-first]
}

// ChunkBytes returns the size in bytes of chunk pc, the sum of its files'.
func (in WindowInput) ChunkBytes(pc int) int64 {
	lo, hi := in.Mapping.PCFiles(pc)
	h := in.Mapping.Home(lo)
	var b int64
	for f := lo; f < hi; f++ {
		b += in.size(h, f)
	}
	return b
}

// steps is the length of the longest trace.
func (in WindowInput) steps() int {
	n := 0
	for _, tr := range in.Traces {
		n = max(n, len(tr))
	}
	return n
}

// validate reports every problem of the input at once.
func (in WindowInput) validate() error { return in.validateFor(-1) }

// validateFor reports every problem of the input that planning home h's
// pool meets (-1: every home's).
func (in WindowInput) validateFor(h int) error {
	m := in.Mapping
	if m == nil {
		return errors.New("proto: window plan without a mapping")
	}
	var errs []error
	if len(in.Sizes) != m.Ranks() || len(in.Budget) != m.Ranks() || len(in.Traces) != m.Ranks() {
		return fmt.Errorf("proto: window plan for %d ranks given %d size lists, %d budgets and %d traces",
			m.Ranks(), len(in.Sizes), len(in.Budget), len(in.Traces))
	}
	if !(in.Keep >= 0 && in.Keep <= 1) {
		errs = append(errs, fmt.Errorf("proto: window keep %g of the budget, want 0 to 1", in.Keep))
	}
	if in.Lead < 0 || in.Ramp < 0 || in.Window < 0 {
		errs = append(errs, fmt.Errorf("proto: window lead %d, ramp %d and push window %d, want ≥ 0",
			in.Lead, in.Ramp, in.Window))
	}
	if steps := in.steps(); in.Lead > math.MaxInt32-steps {
		errs = append(errs, fmt.Errorf("proto: window lead %d steps past the last of %d positions: more than the limit of %d steps (int32)",
			in.Lead, steps, math.MaxInt32))
	}
	if in.Remote != nil && len(in.Remote) != m.Ranks() {
		errs = append(errs, fmt.Errorf("proto: window plan for %d ranks given %d remote budgets", m.Ranks(), len(in.Remote)))
	}
	if in.After != nil && len(in.After) != m.Ranks() {
		errs = append(errs, fmt.Errorf("proto: window plan for %d ranks given %d drains", m.Ranks(), len(in.After)))
		return errors.Join(errs...)
	}
	for r := range m.Ranks() {
		if h < 0 || r == h {
			errs = append(errs, in.validateRank(r))
		}
	}
	errs = append(errs, in.validateTraces())
	return errors.Join(errs...)
}

func (in WindowInput) validateRank(h int) error {
	m := in.Mapping
	first, n := m.RankFiles(h)
	if len(in.Sizes[h]) != n {
		return fmt.Errorf("proto: rank %d has %d files but %d sizes", h, n, len(in.Sizes[h]))
	}
	if in.After != nil {
		for i, held := range in.After[h].Held {
			if held < 0 || held > in.Budget[h] {
				return fmt.Errorf("proto: rank %d's pool held %d bytes %d steps before the epoch, over its budget of %d",
					h, held, len(in.After[h].Held)-i, in.Budget[h])
			}
		}
	}
	for i, s := range in.Sizes[h] {
		if s < 0 {
			return fmt.Errorf("proto: file %d of rank %d has size %d", int(first)+i, h, s)
		}
		if s > in.Budget[h] {
			return fmt.Errorf("proto: file %d of rank %d is %d bytes, more than the rank's budget of %d",
				int(first)+i, h, s, in.Budget[h])
		}
	}
	pc0, pcs := m.RankPCs(h)
	for pc := pc0; pc < pc0+pcs; pc++ {
		if b := in.ChunkBytes(pc); b > in.Budget[h] {
			return fmt.Errorf("proto: chunk %d of rank %d is %d bytes, more than the rank's budget of %d; "+
				"the budget must hold its largest chunk", pc, h, b, in.Budget[h])
		}
	}
	return nil
}

func (in WindowInput) validateTraces() error {
	files := in.Mapping.Files()
	seen := newBitset(files) // a bit per file: a rank planning its share holds little else
	if in.Delivered != nil && len(in.Delivered) != files {
		return fmt.Errorf("proto: %d files marked delivered or not, for a dataset of %d", len(in.Delivered), files)
	}
	for r, tr := range in.Traces {
		for sn, f := range tr {
			if f < 0 || int(f) >= files {
				return fmt.Errorf("proto: position %d of rank %d names file %d, not in the dataset", sn, r, f)
			}
			if seen.has(int(f)) {
				return fmt.Errorf("proto: file %d appears twice in the traces (again at position %d of rank %d)", f, sn, r)
			}
			if in.Delivered != nil && in.Delivered[f] {
				return fmt.Errorf("proto: position %d of rank %d names file %d, delivered before the plan begins", sn, r, f)
			}
			seen.set(int(f))
		}
	}
	return nil
}

// mark is "k" after a kept chunk's read, "r" after a resident one's.
func (rd PlannedRead) mark() string {
	switch {
	case rd.Resident:
		return "r"
	case rd.Kept:
		return "k"
	}
	return ""
}

// String dumps the plan in a stable text form, for golden tests: per
// rank its reads (chunk@issue→due, then k when the chunk is kept, r when
// it was resident), the file answering each position,
// the positions answered by pushes ahead (sn@step) and its drain.
func (p *WindowPlan) String() string {
	var b strings.Builder
	for h, rds := range p.Reads {
		fmt.Fprintf(&b, "rank %d reads (waits %d, peak %d B):", h, p.WaitSteps[h], p.PeakBytes[h])
		for _, rd := range rds {
			fmt.Fprintf(&b, " %d@%d→%d%s", rd.PC, rd.Issue, rd.Due, rd.mark())
		}
		b.WriteByte('\n')
	}
	for r, fs := range p.Files {
		fmt.Fprintf(&b, "rank %d files:", r)
		for _, f := range fs {
			fmt.Fprintf(&b, " %d", f)
		}
		fmt.Fprintf(&b, "\nrank %d pushed ahead:", r)
		for sn, push := range p.PushAt[r] {
			if push >= 0 && push < int32(sn) {
				fmt.Fprintf(&b, " %d@%d", sn, push)
			}
		}
		b.WriteByte('\n')
	}
	for h, d := range p.Drains {
		fmt.Fprintf(&b, "rank %d drain: last due %d, held %v\n", h, d.LastDue, d.Held)
	}
	return b.String()
}
