package proto

import (
	"errors"
	"fmt"
)

// WindowConfig configures one rank of the window policy.
type WindowConfig struct {
	// Rank is this rank; Mapping the dataset's mapping, whose MemBytes
	// are the ranks' budgets.
	Rank    int
	Mapping *Mapping
	// Sizes holds, per rank, the size of each of its files: a rank plans
	// its pool by its own, and counts the files of other ranks it receives
	// by theirs (the sizes the homes' answers carry must be the same).
	Sizes [][]int64
	// Seed drives the plan with the epoch (WindowInput).
	Seed uint64
	// Lead and Ramp shape the plan (WindowInput); they change which file
	// answers a position, not what the rank reads.
	Lead, Ramp int
	// Window and Remote shape the plan's pushes (WindowInput): the files
	// of other ranks planned for a rank's next Window positions are
	// pushed to it ahead of its clients' requests, within Remote[r] bytes
	// of files received and not yet delivered (every rank's limit, as
	// WindowInput takes them; a rank plans its own pushes by its own).
	Window int
	Remote []int64
	// Keep is the share of each budget that keeps chunks in memory
	// across epochs (WindowInput.Keep).
	Keep float64
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
	// Whole has the rank also plan each epoch whole (PlanWindow), as no
	// rank needs to, for Plan: tests hold what it does against it.
	Whole bool
}

// WindowRank carries out window plans for one rank. At the start of an
// epoch it plans its own pool (PlanHome) and tells every other rank which
// of its files answer that rank's positions (MsgAnswers); once every
// home's answers are in, it puts its positions together (PlanShare) and
// tells each home which of its positions that home's files are pushed
// to ahead (MsgAhead). So it plans in its share of the files, not the
// whole epoch (windowhome.go). It reads its own
// chunks in plan order whenever its budget has room for the next, and
// answers each position with its planned file; its clients' requests for
// other ranks' files wait for its share. The files of other ranks
// that the plan pushes ahead (PushAt) come unasked: the rank grants their
// homes (MsgGrant) the positions whose files fit its Remote bytes, and a
// home pushes (MsgPush) each granted file once its chunk is in; the rest
// it asks for on demand (MsgRequest), and a home answers as soon as the
// chunk is in (windowrank_positions.go says more). Positions may be asked
// in any order. The plan's logical steps are not a schedule here: the
// rank reads as far ahead as memory allows, and a request waits only when
// its file's chunk is not yet in.
type WindowRank struct {
	cfg   WindowConfig
	in    WindowInput // what every epoch is planned from, less its traces
	me    int
	first FileID
	// keep marks, per own chunk, those the plan keeps in memory to the
	// epoch's end; kept is the bytes of those issued, part of held
	keep  []bool
	kept  int64
	rd    Ready
	stats Stats

	epoch   uint32
	started bool
	traces  [][]FileID
	// home is the epoch's plan of this rank's pool: its reads, and the
	// positions of every rank its files answer (answers, by rank, each in
	// position order)
	home    *HomePlan
	answers [][]Answer
	// share is this rank's positions, nil until every home's answers
	// came (fromHomes, by home; answersIn of them); queued the positions
	// its clients asked for before; aheadIn, per rank, whether it said
	// which of its positions this rank's files are pushed to ahead
	share     *RankShare
	fromHomes [][]Answer
	answersIn int
	queued    []int32
	aheadIn   []bool
	// whole is the epoch's whole plan, with WindowConfig.Whole
	whole    *WindowPlan
	deferred []Message // messages of a later epoch
	start    int32     // the first position this rank's clients ask for
	// early is the next epoch, read ahead while this one drains
	early *earlyEpoch

	// own files: state per local index, bytes held, the next read;
	// damaged, per local index, a file in memory whose bytes are damaged
	// on storage (ReadDone.Damaged): it leaves with StatusDamaged
	state   []fileState
	held    int64
	nextRd  int
	damaged []bool
	waiters map[FileID][]waiter // requests for own files not yet in

	// this rank's positions
	asked   []bool // a client asked for the position
	planned []bool // the plan pushes its file (of another rank) ahead
	fetched []bool // the file was asked of its home, on demand
	arrived []bool // the file came from its home, not yet delivered
	// arrivedAs is an arrived file's status: ok, or damaged at its home
	arrivedAs []Status
	failed    []bool // its home could not read it
	// buffered counts the bytes of files arrived and not yet delivered.
	// low is the lowest position not yet asked for; granted the last
	// position whose planned push fits Remote, with the positions from
	// low on not yet asked for (grantBytes their bytes); told the last
	// granted position the homes were told of (grant).
	buffered     int64
	low, granted int32
	told         int32
	grantBytes   int64

	// own files pushed to other ranks: pushTo[r] lists the positions of
	// rank r whose planned push is of this rank's file, in order, with
	// the file;
	// pushNext[r] is the first of them maybe not yet sent; grantOf[r] the
	// last position r granted; pushing the pushes of this step, per rank;
	// per own file, the position it is pushed to (pushAt) and whether it
	// was, or its read's failure told to the rank it is planned for
	// (pushedOut)
	pushTo    [][]Answer
	pushNext  []int
	grantOf   []int32
	pushing   [][]Pushed
	pushAt    []pushTarget
	pushedOut []bool
	// clientsDone: this rank's clients ask for nothing more this epoch;
	// dropped: own files planned for a rank that asks nothing more,
	// dropped from memory as soon as they are in
	clientsDone bool
	dropped     []bool
	done        []bool // per rank, said it asks for nothing more
}

type fileState uint8

const (
	notRead fileState = iota
	reading
	inMemory
	gone // delivered or sent
	lost // its chunk's read failed
)

// pushTarget is the position of rank rank that a file is pushed to; rank
// −1 for a file not pushed ahead.
type pushTarget struct{ rank, sn int32 }

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
	if cfg.Window < 0 || (cfg.Remote != nil && len(cfg.Remote) != m.Ranks()) {
		return nil, fmt.Errorf("proto: window %d and %d remote limits for %d ranks", cfg.Window, len(cfg.Remote), m.Ranks())
	}
	for r, b := range cfg.Remote {
		if b < 0 {
			return nil, fmt.Errorf("proto: rank %d's remote limit is %d bytes, want ≥ 0", r, b)
		}
	}
	w := &WindowRank{cfg: cfg, me: cfg.Rank, in: cfg.Input()}
	w.in.Traces = make([][]FileID, m.Ranks())
	w.first, _ = m.RankFiles(cfg.Rank)
	return w, w.in.validate()
}

// Input returns the plan input the rank plans every epoch from, less the
// epoch, its traces and what the epoch before left (After, Resident):
// every rank's sizes, budgets (the mapping's) and remote limits, and the
// plan's shape.
func (c WindowConfig) Input() WindowInput {
	m := c.Mapping
	in := WindowInput{Mapping: m, Sizes: c.Sizes, Seed: c.Seed, Lead: c.Lead, Ramp: c.Ramp, Window: c.Window, Remote: c.Remote, Keep: c.Keep}
	for h := range m.Ranks() {
		in.Budget = append(in.Budget, m.MemBytes(h))
	}
	return in
}

// input returns the input of epoch e's plan on traces.
func (w *WindowRank) input(e uint32, traces [][]FileID) WindowInput {
	in := w.in
	in.Epoch, in.Traces = e, traces
	return in
}

// Plan returns the current epoch's whole plan, made only with
// WindowConfig.Whole (nil otherwise, and before the first epoch).
func (w *WindowRank) Plan() *WindowPlan { return w.whole }

// Share returns this rank's positions in the current epoch's plan: nil
// until every home's answers came.
func (w *WindowRank) Share() *RankShare { return w.share }

// CheckTraces reports whether an epoch could be planned on traces.
func (w *WindowRank) CheckTraces(traces [][]FileID) error {
	return w.input(w.epoch, traces).validate()
}

// Step applies one event. Bad input (an unknown position, a malformed
// peer message) is returned as an error; with the invariants tag, a
// broken internal invariant panics.
func (w *WindowRank) Step(ev Event) error {
	err := w.step(ev)
	if w.started {
		w.flush()
	}
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
	case ClientsDone:
		if !w.started || w.clientsDone {
			return nil
		}
		w.clientsDone = true
		w.queued = nil // asked for, but not to be asked of their homes after the done
		w.rd.Sends = append(w.rd.Sends, doneMessages(w.me, w.cfg.Mapping.Ranks(), w.epoch)...)
		if w.share != nil { // (before it, nothing arrived)
			for sn, f := range w.share.Files {
				if w.arrived[sn] { // never to be asked for
					w.arrived[sn] = false
					w.buffered -= w.size(f)
					w.rd.Forget = append(w.rd.Forget, f)
				}
			}
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

func (w *WindowRank) size(f FileID) int64 { return w.in.FileSize(f) }

// leaves is what own file f gives back of the budget as it leaves
// memory: its size, or nothing when the epoch keeps its chunk to the end.
func (w *WindowRank) leaves(f FileID) int64 {
	if w.keep[w.cfg.Mapping.PC(f)-w.firstPC()] {
		return 0
	}
	return w.size(f)
}

func (w *WindowRank) firstPC() int {
	pc, _ := w.cfg.Mapping.RankPCs(w.me)
	return pc
}

// keptOf marks the own chunks pool hp keeps to its epoch's end.
func (w *WindowRank) keptOf(hp *HomePlan) []bool {
	_, n := w.cfg.Mapping.RankPCs(w.me)
	keep := make([]bool, n)
	for _, rd := range hp.Reads {
		keep[rd.PC-w.firstPC()] = rd.Kept
	}
	return keep
}
