package proto

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

type slotState uint8

const (
	slotEmpty   slotState = iota // holds nothing
	slotPending                  // a read in flight will fill it
	slotValid                    // holds a file not yet delivered
)

// req is a request being served by the owner: from a local client (from
// equals the rank) or from a peer.
type req struct {
	from int32
	sn   int32
	file FileID
}

var noReq = req{from: -1}

// read is a chunk read in flight: the local PC and the slots it will fill.
type read struct {
	pc    int
	slots []int32
}

// Rank is the protocol state of one rank. It is driven by Step and emits its
// effects through Ready; it performs no I/O and is not safe for concurrent
// use.
type Rank struct {
	cfg    Config
	m      *Mapping
	me     int
	k      int
	words  int // uint64 words in a per-VC or per-PC slot mask
	policy Redirector

	firstFile FileID
	nFiles    int
	firstPC   int
	nPC       int
	firstVC   int
	nVC       int
	sizes     []int64
	pcBytes   []int64
	budget    int64
	share     int64 // buffer bytes this rank grants each owner

	epoch   uint32
	started bool
	// clientsDone: this rank's clients ask for nothing more this epoch,
	// and the others were told (MsgDone)
	clientsDone bool
	rng         *rand.Rand
	traces      [][]FileID

	// Local VCs: nVC×K slots, slot index = vc×K + o.
	slotFile []FileID
	state    []slotState
	empty    []uint64 // per VC: slots holding nothing
	valid    []uint64 // per VC: slots holding a file
	counted  bitset   // slots whose bytes are in held
	waiter   []req    // per slot: the request a pending slot will answer
	queue    map[int32][]req
	free     []uint64 // per local PC: files not yet loaded this epoch
	reads    []*read  // per local PC: its read in flight
	held     int64
	// damaged are the own files loaded this epoch whose bytes are
	// damaged on storage (ReadDone.Damaged): each leaves with
	// StatusDamaged
	damaged map[FileID]bool

	peers     []peer  // owner side, per requester
	owners    []owner // requester side, per owner
	requested bitset  // own positions a client asked for
	awaiting  bitset  // own positions with a remote request outstanding
	got       bitset  // files received from peers this epoch
	frontier  int32   // one past the highest own position requested
	buffered  int64

	deferred []Message
	stats    Stats
	rd       Ready
	cand     []int
}

// NewRank returns the state machine of rank cfg.Rank. It serves nothing
// until the first EpochStart.
func NewRank(cfg Config) (*Rank, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := cfg.Mapping
	r := &Rank{cfg: cfg, m: m, me: cfg.Rank, k: m.K(), words: (m.K() + 63) / 64, policy: cfg.Redirect, sizes: cfg.Sizes}
	if r.policy == nil {
		r.policy = SameSlot{}
	}
	r.firstFile, r.nFiles = m.RankFiles(r.me)
	r.firstPC, r.nPC = m.RankPCs(r.me)
	r.firstVC, r.nVC = m.RankVCs(r.me)
	r.budget = m.MemBytes(r.me)
	if n := m.Ranks() - 1; n > 0 {
		r.share = cfg.RemoteMemBytes / int64(n)
	}
	r.pcBytes = make([]int64, r.nPC)
	for i, s := range r.sizes {
		r.pcBytes[i/r.k] += s
	}
	slots := r.nVC * r.k
	r.slotFile = make([]FileID, slots)
	r.state = make([]slotState, slots)
	r.empty = make([]uint64, r.nVC*r.words)
	r.valid = make([]uint64, r.nVC*r.words)
	r.counted = newBitset(slots)
	r.waiter = make([]req, slots)
	r.free = make([]uint64, r.nPC*r.words)
	r.reads = make([]*read, r.nPC)
	return r, nil
}

// Step feeds one event to the rank. Bad input (an unknown position, a
// malformed peer message) is returned as an error and leaves the state as
// it was; a broken internal invariant panics.
func (r *Rank) Step(ev Event) error {
	var err error
	switch e := ev.(type) {
	case EpochStart:
		err = r.startEpoch(e)
	case ClientRequest:
		err = r.clientRequest(e.Sn)
	case ReadDone:
		err = r.readDone(e)
	case Message:
		err = r.receive(e)
	case ClientsDone:
		// nothing is kept for a rank that asks nothing more; the others
		// hear of it all the same
		if r.started && !r.clientsDone {
			r.clientsDone = true
			r.rd.Sends = append(r.rd.Sends, doneMessages(r.me, r.m.Ranks(), r.epoch)...)
		}
	default:
		err = fmt.Errorf("proto: rank %d: unknown event %T", r.me, ev)
	}
	r.stats.PeakHeld = max(r.stats.PeakHeld, r.held)
	r.stats.PeakBuffered = max(r.stats.PeakBuffered, r.buffered)
	r.stats.PeakMem = max(r.stats.PeakMem, r.held+r.buffered)
	if invariantsEnabled {
		r.checkInvariants()
	}
	return err
}

// Ready returns the pending effects. They stay valid until Advance.
func (r *Rank) Ready() Ready { return r.rd }

// HasReady reports whether Ready has anything for the caller.
func (r *Rank) HasReady() bool { return r.rd.pending() }

// Advance acknowledges that rd was carried out.
func (r *Rank) Advance(rd Ready) { r.rd.clear() }

// Epoch returns the current epoch and whether one has started.
func (r *Rank) Epoch() (uint32, bool) { return r.epoch, r.started }

// Plan returns nil: the papers' policy plans nothing ahead.
func (r *Rank) Plan() *WindowPlan { return nil }

// Stats returns the counters of the current epoch.
func (r *Rank) Stats() Stats { return r.stats }

// Usage returns the bytes held in local VCs and in buffer VCs now.
func (r *Rank) Usage() (held, buffered int64) { return r.held, r.buffered }

// startEpoch begins a new epoch. The Ready of the old one must have been
// carried out and advanced: its deliveries belong to the old epoch.
func (r *Rank) startEpoch(e EpochStart) error {
	if r.started && e.Epoch <= r.epoch {
		return fmt.Errorf("proto: rank %d: epoch %d does not follow epoch %d", r.me, e.Epoch, r.epoch)
	}
	if r.HasReady() {
		return fmt.Errorf("proto: rank %d: epoch %d started before the last Ready was advanced", r.me, e.Epoch)
	}
	if err := r.CheckTraces(e.Traces); err != nil {
		return err
	}
	if slices.ContainsFunc(e.Start, func(sn int32) bool { return sn != 0 }) {
		return fmt.Errorf("proto: rank %d: epoch %d cannot start mid-way: the papers' protocol chooses files as requests come, so an interrupted epoch cannot be taken up where it stopped", r.me, e.Epoch)
	}
	r.epoch, r.started, r.traces, r.clientsDone = e.Epoch, true, e.Traces, false
	r.rng = rand.New(rand.NewPCG(r.cfg.Seed, uint64(e.Epoch)<<32|uint64(r.me)))
	r.resetLocal()
	r.resetRemote()
	r.stats = Stats{}
	r.replayDeferred()
	return nil
}

// CheckTraces reports why traces cannot start an epoch: one per rank, every
// file in range, no file twice across them. EpochStart checks the same.
func (r *Rank) CheckTraces(traces [][]FileID) error {
	if len(traces) != r.m.Ranks() {
		return fmt.Errorf("proto: rank %d: %d traces for %d ranks", r.me, len(traces), r.m.Ranks())
	}
	seen := newBitset(r.m.Files())
	for t, trace := range traces {
		if len(trace) > MaxFiles {
			return fmt.Errorf("proto: trace of rank %d is too long (%d)", t, len(trace))
		}
		for p, f := range trace {
			if f < 0 || int(f) >= r.m.Files() {
				return fmt.Errorf("proto: trace of rank %d, position %d: file %d out of range [0, %d)", t, p, f, r.m.Files())
			}
			if seen.has(int(f)) {
				return fmt.Errorf("proto: trace of rank %d, position %d: file %d appears twice in the epoch's traces", t, p, f)
			}
			seen.set(int(f))
		}
	}
	return nil
}

func (r *Rank) resetLocal() {
	for i := range r.slotFile {
		r.slotFile[i] = NoFile
		r.state[i] = slotEmpty
		r.waiter[i] = noReq
	}
	r.counted.reset()
	for v := 0; v < r.nVC; v++ {
		clear(r.validOf(v))
		bitset(r.emptyOf(v)).setRange(0, r.k)
	}
	for pc := 0; pc < r.nPC; pc++ {
		f := r.freeOf(pc)
		clear(f)
		lo, hi := r.pcRange(pc)
		bitset(f).setRange(0, hi-lo)
		r.reads[pc] = nil
	}
	r.queue = make(map[int32][]req)
	r.held = 0
	r.damaged = nil
}

// replayDeferred handles the messages held for the epoch just started;
// those that prove malformed are dropped and reported in Ready.Dropped.
func (r *Rank) replayDeferred() {
	pending := r.deferred
	r.deferred = nil
	for _, msg := range pending {
		if err := r.receive(msg); err != nil {
			r.rd.Dropped = append(r.rd.Dropped, err)
		}
	}
}

// Slot masks and layout helpers.

func (r *Rank) emptyOf(v int) []uint64 { return r.empty[v*r.words : (v+1)*r.words] }
func (r *Rank) validOf(v int) []uint64 { return r.valid[v*r.words : (v+1)*r.words] }
func (r *Rank) freeOf(pc int) []uint64 { return r.free[pc*r.words : (pc+1)*r.words] }

// pcRange returns the local file indices [lo, hi) of local PC pc.
func (r *Rank) pcRange(pc int) (lo, hi int) {
	return pc * r.k, min(pc*r.k+r.k, r.nFiles)
}

// localIndex returns f's index among this rank's files.
func (r *Rank) localIndex(f FileID) int { return int(f - r.firstFile) }

func (r *Rank) size(f FileID) int64 { return r.sizes[r.localIndex(f)] }

// slotOf returns the local slot of one of this rank's files.
func (r *Rank) slotOf(f FileID) int32 {
	li := r.localIndex(f)
	return int32(groupOf(li/r.k, r.nVC, r.nPC)*r.k + li%r.k)
}

func (r *Rank) vcOfPC(pc int) int { return groupOf(pc, r.nVC, r.nPC) }

func (r *Rank) isLocal(f FileID) bool { return f >= r.firstFile && int(f-r.firstFile) < r.nFiles }
