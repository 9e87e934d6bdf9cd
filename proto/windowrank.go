package proto

import (
	"errors"
	"fmt"
	"slices"
)

// A Machine is one rank's policy as a state machine, driven the same way
// whatever the policy: the papers' Rank or the window policy's
// WindowRank.
type Machine interface {
	Step(ev Event) error
	HasReady() bool
	Ready() Ready
	Advance(rd Ready)
	Stats() Stats
	// CheckTraces reports whether an epoch could start with traces.
	CheckTraces(traces [][]FileID) error
	// Epoch returns the epoch the rank is in, and whether it started one.
	Epoch() (uint32, bool)
	// CheckInvariants returns the first broken internal invariant, or
	// nil; with the invariants tag, Step checks them itself and panics.
	CheckInvariants() error
	// String dumps the rank's state, for golden tests.
	String() string
}

var (
	_ Machine = (*Rank)(nil)
	_ Machine = (*WindowRank)(nil)
)

// WindowConfig configures one rank of the window policy.
type WindowConfig struct {
	// Rank is this rank; Mapping the dataset's mapping, whose MemBytes
	// are the ranks' budgets.
	Rank    int
	Mapping *Mapping
	// Sizes holds, per rank, the size of each of its files: every rank
	// plans every rank's part of the epoch.
	Sizes [][]int64
	// Seed drives the plan with the epoch (WindowInput).
	Seed uint64
	// Lead and Ramp shape the plan (WindowInput); they change which file
	// answers a position, not what the rank reads.
	Lead, Ramp int
	// Window is how many positions ahead of its clients' highest request
	// the rank asks other ranks for the files planned for it, within
	// RemoteMemBytes of files received and not yet delivered.
	Window         int
	RemoteMemBytes int64
	// Traces, when set, gives the traces of any epoch: each epoch's plan
	// starts from the previous one's (WindowInput.After), so a rank that
	// starts at a later epoch than 1 (a resumed job) plans the epochs
	// before it again. Without it, it can start only at epoch 1 or right
	// after the epoch it served last.
	Traces func(epoch uint32) [][]FileID
	// Epochs, with Traces, is the job's last epoch: once an epoch's reads
	// are all issued, the rank plans the next one and reads its first
	// chunks into the room the drain frees, as the plan assumes
	// (WindowInput.After). 0 reads nothing ahead.
	Epochs uint32
}

// WindowRank carries out window plans for one rank. At the start of an
// epoch it plans the whole epoch (PlanWindow); then it reads its own
// chunks in plan order whenever its budget has room for the next, answers
// each position with its planned file, asks the home rank of a file
// planned for one of its positions ahead of its clients (up to Window
// positions, within RemoteMemBytes), and answers other ranks' requests for
// its files as soon as their chunks are in. Positions may be asked in any
// order. The plan's logical steps are not a schedule here: the rank reads
// as far ahead as memory allows, and a request waits only when its file's
// chunk is not yet in.
type WindowRank struct {
	cfg   WindowConfig
	in    WindowInput // what every epoch is planned from, less its traces
	me    int
	first FileID
	rd    Ready
	stats Stats

	epoch    uint32
	started  bool
	plan     *WindowPlan
	deferred []Message // messages of a later epoch
	start    int32     // the first position this rank's clients ask for
	// early is the next epoch, read ahead while this one drains
	early *earlyEpoch

	// own files: state per local index, bytes held, the next read
	state   []fileState
	held    int64
	nextRd  int
	waiters map[FileID][]waiter // requests for own files not yet in

	// this rank's positions
	asked    []bool // a client asked for the position
	fetched  []bool // the file was asked of its home (ahead or on demand)
	reserved []bool // fetched ahead: its bytes count in buffered
	arrived  []bool // the file came from its home, not yet delivered
	failed   []bool // its home could not read it
	buffered int64  // bytes fetched ahead and not yet delivered
	// clientsDone: this rank's clients ask for nothing more this epoch;
	// dropped: own files planned for a rank that asks nothing more,
	// dropped from memory as soon as they are in
	clientsDone bool
	dropped     []bool
	done        []bool // per rank, said it asks for nothing more
	frontier    int32  // one past the highest position a client asked for
	ahead       int32  // the next position to consider fetching ahead
}

// earlyEpoch is the next epoch while the current one drains: its plan,
// and the reads of its first chunks, made within what the current
// epoch's files leave of the budget.
type earlyEpoch struct {
	epoch  uint32
	traces [][]FileID
	plan   *WindowPlan // nil when planning it failed: nothing is read ahead
	state  []fileState // per own file, as WindowRank.state
	held   int64
	nextRd int
	stats  Stats // its reads, counted in its own epoch
}

type fileState uint8

const (
	notRead fileState = iota
	reading
	inMemory
	gone // delivered or sent
	lost // its chunk's read failed
)

// waiter is a request for a file not yet in: of this rank's client
// (from = -1) or of rank from, for its position sn.
type waiter struct {
	from int
	sn   int32
}

// NewWindowRank returns rank cfg.Rank of the window policy.
func NewWindowRank(cfg WindowConfig) (*WindowRank, error) {
	m := cfg.Mapping
	if m == nil {
		return nil, errors.New("proto: window rank without a mapping")
	}
	if cfg.Rank < 0 || cfg.Rank >= m.Ranks() || len(cfg.Sizes) != m.Ranks() {
		return nil, fmt.Errorf("proto: window rank %d of %d ranks given %d size lists", cfg.Rank, m.Ranks(), len(cfg.Sizes))
	}
	if cfg.Window < 0 || cfg.RemoteMemBytes < 0 {
		return nil, fmt.Errorf("proto: window %d and remote memory %d bytes, want ≥ 0", cfg.Window, cfg.RemoteMemBytes)
	}
	w := &WindowRank{cfg: cfg, me: cfg.Rank, in: WindowInput{Mapping: m, Sizes: cfg.Sizes, Seed: cfg.Seed,
		Lead: cfg.Lead, Ramp: cfg.Ramp, Traces: make([][]FileID, m.Ranks())}}
	for h := range m.Ranks() {
		w.in.Budget = append(w.in.Budget, m.MemBytes(h))
	}
	w.first, _ = m.RankFiles(cfg.Rank)
	return w, w.in.validate()
}

// input returns the input of epoch e's plan on traces.
func (w *WindowRank) input(e uint32, traces [][]FileID) WindowInput {
	in := w.in
	in.Epoch, in.Traces = e, traces
	return in
}

// Plan returns the current epoch's plan (nil before the first epoch).
func (w *WindowRank) Plan() *WindowPlan { return w.plan }

// CheckTraces reports whether an epoch could be planned on traces.
func (w *WindowRank) CheckTraces(traces [][]FileID) error {
	return w.input(w.epoch, traces).validate()
}

// Step applies one event. Bad input (an unknown position, a malformed
// peer message) is returned as an error; with the invariants tag, a
// broken internal invariant panics.
func (w *WindowRank) Step(ev Event) error {
	err := w.step(ev)
	if invariantsEnabled {
		w.checkInvariants()
	}
	return err
}

func (w *WindowRank) step(ev Event) error {
	switch e := ev.(type) {
	case EpochStart:
		return w.startEpoch(e)
	case ClientRequest:
		return w.clientRequest(e.Sn)
	case ReadDone:
		return w.readDone(e)
	case Message:
		return w.message(e)
	case PeerDone:
		if e.Rank < 0 || e.Rank >= w.cfg.Mapping.Ranks() || e.Rank == w.me {
			return fmt.Errorf("proto: rank %d: rank %d said it is done", w.me, e.Rank)
		}
		if w.started {
			w.done[e.Rank] = true
			w.drop(e.Rank)
		}
		return nil
	case ClientsDone:
		if !w.started {
			return nil
		}
		w.clientsDone = true
		for sn, f := range w.plan.Files[w.me] {
			w.unreserve(int32(sn), f)
		}
		w.drop(w.me)
		return nil
	}
	return fmt.Errorf("proto: unknown event %T", ev)
}

// HasReady reports whether there is something to carry out.
func (w *WindowRank) HasReady() bool { return w.rd.pending() }

// Ready returns what to carry out.
func (w *WindowRank) Ready() Ready { return w.rd }

// Advance acknowledges that rd was carried out.
func (w *WindowRank) Advance(Ready) { w.rd.clear() }

// Stats returns the epoch's counters.
func (w *WindowRank) Stats() Stats { return w.stats }

func (w *WindowRank) startEpoch(e EpochStart) error {
	if w.started && e.Epoch <= w.epoch {
		return fmt.Errorf("proto: epoch %d after epoch %d", e.Epoch, w.epoch)
	}
	if e.Start != nil && e.Delivered != nil {
		return fmt.Errorf("proto: rank %d: epoch %d resumes both at start positions and after delivered files", w.me, e.Epoch)
	}
	if e.Start != nil && len(e.Start) != len(e.Traces) {
		return fmt.Errorf("proto: rank %d: epoch %d starts with %d start positions for %d traces", w.me, e.Epoch, len(e.Start), len(e.Traces))
	}
	for r, sn := range e.Start {
		if sn < 0 || int(sn) > len(e.Traces[r]) {
			return fmt.Errorf("proto: rank %d: epoch %d starts at position %d of rank %d, whose trace has %d", w.me, e.Epoch, sn, r, len(e.Traces[r]))
		}
	}
	x := w.early
	if x != nil && x.plan == nil { // its planning failed: plan again, and report it
		x = nil
	}
	if x != nil && (x.epoch != e.Epoch || e.Start != nil || e.Delivered != nil || !sameTraces(x.traces, e.Traces)) {
		return fmt.Errorf("proto: rank %d: epoch %d starts (on other traces, or mid-way), but epoch %d was read ahead on its own",
			w.me, e.Epoch, x.epoch)
	}
	var p *WindowPlan
	_, n := w.cfg.Mapping.RankFiles(w.me)
	if x != nil {
		p = x.plan
	} else {
		var err error
		if p, err = w.planEpoch(e); err != nil {
			return err
		}
		x = &earlyEpoch{state: make([]fileState, n)}
	}
	steps := len(p.Files[w.me])
	*w = WindowRank{cfg: w.cfg, in: w.in, me: w.me, first: w.first, rd: w.rd, epoch: e.Epoch, started: true, plan: p,
		deferred: w.deferred, state: x.state, held: x.held, nextRd: x.nextRd, stats: x.stats, dropped: make([]bool, n),
		done: make([]bool, w.cfg.Mapping.Ranks()), waiters: map[FileID][]waiter{},
		asked: make([]bool, steps), fetched: make([]bool, steps), reserved: make([]bool, steps),
		arrived: make([]bool, steps), failed: make([]bool, steps)}
	w.stats.PeakHeld, w.stats.PeakMem = w.held, w.held
	w.skip(e.Start)
	for f := range e.Delivered {
		if e.Delivered[f] && w.cfg.Mapping.Home(FileID(f)) == w.me {
			w.dropped[FileID(f)-w.first] = true
		}
	}
	w.issue()
	held := w.deferred
	w.deferred = nil
	for _, m := range held {
		if err := w.message(m); err != nil {
			w.rd.Dropped = append(w.rd.Dropped, err)
		}
	}
	return nil
}

// sameTraces reports whether a and b are the same traces.
func sameTraces(a, b [][]FileID) bool {
	return slices.EqualFunc(a, b, func(x, y []FileID) bool { return slices.Equal(x, y) })
}

// planEpoch plans the epoch e starts: from the previous epoch's drains,
// or, resumed after delivered files, as RestPlan does.
func (w *WindowRank) planEpoch(e EpochStart) (*WindowPlan, error) {
	in := w.input(e.Epoch, e.Traces)
	if e.Delivered == nil {
		after, err := w.after(e.Epoch)
		if err != nil {
			return nil, err
		}
		in.After = after
		return PlanWindow(in)
	}
	in.Delivered = e.Delivered
	p, err := PlanWindow(in)
	if err != nil || w.cfg.Traces == nil {
		return p, err
	}
	// the epochs after it are planned as a job that was not interrupted
	// plans them
	if p.Drains, err = w.drainsOf(e.Epoch); err != nil {
		return nil, err
	}
	return p, nil
}

// after returns the drains epoch e's plan starts from: the previous
// epoch's. A rank that did not just plan that epoch plans the epochs
// before e again, from epoch 1, on cfg.Traces.
func (w *WindowRank) after(e uint32) ([]Drain, error) {
	switch {
	case e <= 1:
		return nil, nil
	case w.plan != nil && w.epoch == e-1:
		return w.plan.Drains, nil
	}
	return w.drainsOf(e - 1)
}

// drainsOf plans epochs 1 to e on cfg.Traces and returns epoch e's
// drains.
func (w *WindowRank) drainsOf(e uint32) ([]Drain, error) {
	if w.cfg.Traces == nil {
		return nil, fmt.Errorf("proto: rank %d: epoch %d plans from epoch %d's, whose traces it does not know", w.me, e+1, e)
	}
	p, err := planThrough(w.in, e, w.cfg.Traces)
	if err != nil {
		return nil, fmt.Errorf("proto: rank %d: planning the epochs before epoch %d again: %w", w.me, e+1, err)
	}
	if p == nil {
		return nil, nil
	}
	return p.Drains, nil
}

// skip takes the positions before start (a resumed epoch) as delivered:
// this rank's clients will not ask for them, and the own files planned
// for any rank's are not kept. Chunks left with no file to keep are not
// read (issue).
func (w *WindowRank) skip(start []int32) {
	if start == nil {
		return
	}
	for r, n := range start {
		for _, f := range w.plan.Files[r][:n] {
			if w.cfg.Mapping.Home(f) == w.me {
				w.dropped[f-w.first] = true
			}
		}
	}
	w.start = start[w.me]
	for sn := range w.start {
		w.asked[sn] = true
	}
	w.frontier, w.ahead = w.start, w.start
}

// issue starts reads of the rank's next chunks, in plan order, while its
// budget has room for them.
func (w *WindowRank) issue() {
	m := w.cfg.Mapping
	for rds := w.plan.Reads[w.me]; w.nextRd < len(rds); w.nextRd++ {
		pc := rds[w.nextRd].PC
		lo, hi := m.PCFiles(pc)
		if w.unwanted(lo, hi) {
			for f := lo; f < hi; f++ {
				w.state[f-w.first] = gone
			}
			continue
		}
		b := w.in.ChunkBytes(pc)
		if w.held+b > m.MemBytes(w.me) {
			return
		}
		w.held += b
		w.stats.PeakHeld = max(w.stats.PeakHeld, w.held)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held+w.buffered)
		w.startRead(pc, w.epoch, w.state, &w.stats)
	}
	w.issueEarly()
}

// startRead asks for chunk pc's read for epoch e: its files are being
// read in state (the epoch's own files), and st counts the read.
func (w *WindowRank) startRead(pc int, e uint32, state []fileState, st *Stats) {
	lo, hi := w.cfg.Mapping.PCFiles(pc)
	for f := lo; f < hi; f++ {
		state[f-w.first] = reading
	}
	st.ChunkReads++
	st.FilesRead += int64(hi - lo)
	st.BytesRead += w.in.ChunkBytes(pc)
	w.rd.Reads = append(w.rd.Reads, Read{PC: pc, VC: -1, Epoch: e})
}

// issueEarly, once every read of the epoch is issued, reads the next
// epoch's chunks in its plan's order, while this epoch's files and those
// read ahead leave the budget room.
func (w *WindowRank) issueEarly() {
	if w.cfg.Traces == nil || w.epoch >= w.cfg.Epochs {
		return
	}
	if w.early == nil {
		e := w.epoch + 1
		in := w.input(e, w.cfg.Traces(e))
		in.After = w.plan.Drains
		w.early = &earlyEpoch{epoch: e, traces: in.Traces}
		p, err := PlanWindow(in)
		if err != nil {
			return // nothing read ahead (tried once, not on every call); the epoch's start plans again and reports it
		}
		_, n := w.cfg.Mapping.RankFiles(w.me)
		w.early.plan, w.early.state = p, make([]fileState, n)
	}
	x := w.early
	if x.plan == nil {
		return
	}
	for rds := x.plan.Reads[w.me]; x.nextRd < len(rds); x.nextRd++ {
		pc := rds[x.nextRd].PC
		b := w.in.ChunkBytes(pc)
		if w.held+x.held+b > w.cfg.Mapping.MemBytes(w.me) {
			return
		}
		x.held += b
		w.stats.PeakHeld = max(w.stats.PeakHeld, w.held+x.held)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held+x.held+w.buffered)
		w.startRead(pc, x.epoch, x.state, &x.stats)
		x.stats.EarlyReads++
	}
}

// earlyDone takes a read of the next epoch's, made while this one drains.
func (w *WindowRank) earlyDone(e ReadDone) error {
	x := w.early
	lo, hi := w.cfg.Mapping.PCFiles(e.PC)
	if w.cfg.Mapping.Home(lo) != w.me || x.state[lo-w.first] != reading {
		return fmt.Errorf("proto: rank %d: read of chunk %d done for epoch %d, which it is not reading", w.me, e.PC, e.Epoch)
	}
	if e.Failed {
		x.stats.FailedReads++
	}
	for f := lo; f < hi; f++ {
		if e.Failed {
			x.state[f-w.first] = lost
			x.held -= w.size(f)
			continue
		}
		x.state[f-w.first] = inMemory
		x.stats.FilesLoaded++
		x.stats.BytesLoaded += w.size(f)
		w.rd.Early = append(w.rd.Early, f)
	}
	w.issue()
	return nil
}

// unwanted reports whether every own file in [lo, hi) was dropped: its
// chunk need not be read.
func (w *WindowRank) unwanted(lo, hi FileID) bool {
	for f := lo; f < hi; f++ {
		if !w.dropped[f-w.first] {
			return false
		}
	}
	return true
}

func (w *WindowRank) size(f FileID) int64 { return w.in.FileSize(f) }

func (w *WindowRank) clientRequest(sn int32) error {
	if !w.started {
		return fmt.Errorf("proto: rank %d: request for position %d before the first epoch", w.me, sn)
	}
	if sn < 0 || int(sn) >= len(w.asked) {
		return fmt.Errorf("proto: rank %d: position %d outside its trace of %d", w.me, sn, len(w.asked))
	}
	if sn < w.start {
		return fmt.Errorf("proto: rank %d: position %d asked for, but epoch %d resumed at position %d", w.me, sn, w.epoch, w.start)
	}
	if w.asked[sn] {
		return fmt.Errorf("proto: rank %d: position %d asked twice in epoch %d", w.me, sn, w.epoch)
	}
	w.asked[sn] = true
	w.stats.Requests++
	w.frontier = max(w.frontier, sn+1)
	f := w.plan.Files[w.me][sn]
	switch {
	case w.cfg.Mapping.Home(f) == w.me:
		w.local(f, waiter{from: -1, sn: sn})
	case w.arrived[sn]:
		w.stats.BufferHits++
		w.unreserve(sn, f)
		w.deliver(sn, f, FromBuffer)
	case w.failed[sn]:
		w.fail(f, waiter{from: -1, sn: sn})
	case !w.fetched[sn]:
		w.stats.RemoteRequests++
		w.fetch(sn, f, false)
	}
	w.fetchAhead()
	return nil
}

// local answers a request for own file f: at once when it is in memory,
// once its chunk is in otherwise.
func (w *WindowRank) local(f FileID, q waiter) {
	switch w.state[f-w.first] {
	case inMemory:
		if q.from < 0 {
			w.stats.LocalHits++
		}
		w.answer(f, q, FromMemory)
	case lost:
		w.fail(f, q)
	case gone:
		panic(fmt.Sprintf("proto: invariant violated: rank %d: file %d asked for twice in epoch %d", w.me, f, w.epoch))
	default:
		if q.from < 0 {
			w.stats.Misses++
		}
		w.waiters[f] = append(w.waiters[f], q)
	}
}

// answer hands own file f, in memory, to its asker: this rank's client,
// or rank q.from in a reply. Either way it leaves the pool.
func (w *WindowRank) answer(f FileID, q waiter, src Source) {
	w.state[f-w.first] = gone
	w.held -= w.size(f)
	if q.from < 0 {
		w.deliver(q.sn, f, src)
	} else {
		w.stats.RemoteServed++
		w.rd.Sends = append(w.rd.Sends, Message{Type: MsgReply, From: int32(w.me), To: int32(q.from), Epoch: w.epoch,
			Sn: q.sn, File: f, Size: w.size(f), Status: StatusOK})
	}
	w.issue()
}

func (w *WindowRank) fail(f FileID, q waiter) {
	if q.from < 0 {
		w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: q.sn, File: f, Status: StatusReadFailed})
		return
	}
	w.rd.Sends = append(w.rd.Sends, Message{Type: MsgReply, From: int32(w.me), To: int32(q.from), Epoch: w.epoch,
		Sn: q.sn, File: f, Status: StatusReadFailed})
}

func (w *WindowRank) deliver(sn int32, f FileID, src Source) {
	w.stats.Delivered++
	w.stats.BytesDelivered += w.size(f)
	w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: sn, File: f, Size: w.size(f), Source: src, Status: StatusOK})
}

// fetch asks the home of file f, planned for position sn, for it; ahead
// reserves its bytes in the buffer until it is delivered.
func (w *WindowRank) fetch(sn int32, f FileID, ahead bool) {
	w.fetched[sn], w.reserved[sn] = true, ahead
	if ahead {
		w.buffered += w.size(f)
		w.stats.PeakBuffered = max(w.stats.PeakBuffered, w.buffered)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held+w.buffered)
		w.stats.Pushed++
		w.stats.PushedBytes += w.size(f)
	}
	w.rd.Sends = append(w.rd.Sends, Message{Type: MsgRequest, From: int32(w.me), To: int32(w.cfg.Mapping.Home(f)),
		Epoch: w.epoch, Sn: sn, File: f, Frontier: w.frontier})
}

// fetchAhead asks for the files of other ranks planned for the next
// positions, in order, up to Window past the frontier and while the
// buffer has room.
func (w *WindowRank) fetchAhead() {
	if w.clientsDone {
		return
	}
	files := w.plan.Files[w.me]
	w.ahead = max(w.ahead, w.frontier)
	for ; w.ahead < min(w.frontier+int32(w.cfg.Window), int32(len(files))); w.ahead++ {
		sn, f := w.ahead, files[w.ahead]
		if w.cfg.Mapping.Home(f) == w.me || w.fetched[sn] {
			continue
		}
		if w.buffered+w.size(f) > w.cfg.RemoteMemBytes {
			return
		}
		w.fetch(sn, f, true)
	}
}

func (w *WindowRank) readDone(e ReadDone) error {
	if w.early != nil && w.early.plan != nil && e.Epoch == w.early.epoch {
		return w.earlyDone(e)
	}
	if e.Epoch != w.epoch {
		return fmt.Errorf("proto: rank %d: read of chunk %d done for epoch %d in epoch %d", w.me, e.PC, e.Epoch, w.epoch)
	}
	lo, hi := w.cfg.Mapping.PCFiles(e.PC)
	if w.cfg.Mapping.Home(lo) != w.me || w.state[lo-w.first] != reading {
		return fmt.Errorf("proto: rank %d: read of chunk %d done, which it is not reading", w.me, e.PC)
	}
	if e.Failed {
		w.stats.FailedReads++
	}
	for f := lo; f < hi; f++ {
		switch {
		case w.dropped[f-w.first]:
			w.state[f-w.first] = gone
			w.held -= w.size(f)
		case e.Failed:
			w.state[f-w.first] = lost
			w.held -= w.size(f)
		default:
			w.state[f-w.first] = inMemory
			w.stats.FilesLoaded++
			w.stats.BytesLoaded += w.size(f)
			w.rd.Loaded = append(w.rd.Loaded, f)
		}
	}
	for f := lo; f < hi; f++ {
		qs := w.waiters[f]
		delete(w.waiters, f)
		for _, q := range qs {
			w.local(f, q)
		}
	}
	w.issue()
	return nil
}

// drop lets go of the own files planned for rank r's positions that
// were never answered, now that r asks for nothing more: those in memory
// at once, the others when their chunks are in; requests r left waiting
// are forgotten.
func (w *WindowRank) drop(r int) {
	for _, f := range w.plan.Files[r] {
		if w.cfg.Mapping.Home(f) != w.me {
			continue
		}
		i := f - w.first
		delete(w.waiters, f)
		switch w.state[i] {
		case inMemory:
			w.state[i] = gone
			w.held -= w.size(f)
			w.rd.Forget = append(w.rd.Forget, f)
		case notRead, reading:
			w.dropped[i] = true
		}
	}
	w.issue()
}

func (w *WindowRank) message(m Message) error {
	switch {
	case !w.started || m.Epoch > w.epoch:
		w.deferred = append(w.deferred, m)
		return nil
	case m.Epoch < w.epoch:
		w.stats.Stale++
		return nil
	case m.From < 0 || int(m.From) >= w.cfg.Mapping.Ranks() || int(m.From) == w.me || int(m.To) != w.me:
		return fmt.Errorf("proto: rank %d: message %v not meant for it", w.me, m)
	}
	switch m.Type {
	case MsgRequest:
		if w.done[m.From] { // a request sent ahead, overtaken by the rank's done
			w.stats.Stale++
			return nil
		}
		return w.peerRequest(m)
	case MsgReply:
		return w.reply(m)
	}
	return fmt.Errorf("proto: rank %d: unexpected %v", w.me, m)
}

// peerRequest answers rank m.From's request for the file planned for its
// position m.Sn.
func (w *WindowRank) peerRequest(m Message) error {
	files := w.plan.Files[m.From]
	if m.Sn < 0 || int(m.Sn) >= len(files) || files[m.Sn] != m.File || w.cfg.Mapping.Home(m.File) != w.me {
		return fmt.Errorf("proto: rank %d: rank %d asks for file %d at its position %d, which the plan does not give it here",
			w.me, m.From, m.File, m.Sn)
	}
	if w.state[m.File-w.first] == gone || len(w.waiters[m.File]) > 0 {
		return fmt.Errorf("proto: rank %d: rank %d asks again for file %d", w.me, m.From, m.File)
	}
	w.local(m.File, waiter{from: int(m.From), sn: m.Sn})
	return nil
}

// reply takes a file this rank asked for.
func (w *WindowRank) reply(m Message) error {
	files := w.plan.Files[w.me]
	if m.Sn < 0 || int(m.Sn) >= len(files) || files[m.Sn] != m.File || !w.fetched[m.Sn] || w.arrived[m.Sn] {
		return fmt.Errorf("proto: rank %d: unexpected reply of rank %d for position %d (file %d)", w.me, m.From, m.Sn, m.File)
	}
	if m.Status == StatusOK && !w.asked[m.Sn] {
		w.stats.PushesReceived++
		w.arrived[m.Sn] = true // its bytes stay reserved until its position is asked for
		return nil
	}
	w.unreserve(m.Sn, m.File)
	switch {
	case m.Status != StatusOK && w.asked[m.Sn]:
		w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: m.Sn, File: m.File, Status: m.Status})
	case m.Status != StatusOK:
		w.failed[m.Sn] = true
	default:
		w.stats.PushesReceived++
		w.deliver(m.Sn, m.File, FromRemote)
	}
	w.fetchAhead()
	return nil
}

// unreserve frees position sn's bytes in the buffer, if it had any.
func (w *WindowRank) unreserve(sn int32, f FileID) {
	if w.reserved[sn] {
		w.reserved[sn] = false
		w.buffered -= w.size(f)
	}
}
