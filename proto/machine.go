package proto

// What every policy's rank is (Machine), and the effects a step leaves
// for its caller (Ready).

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
	// Plan returns the current epoch's whole plan, which file answers
	// each position of every rank; nil before the first epoch, for a
	// policy that plans nothing ahead (the papers' Rank redirects as
	// requests come), and for a WindowRank that plans only its share
	// (without WindowConfig.Whole).
	Plan() *WindowPlan
}

var (
	_ Machine = (*Rank)(nil)
	_ Machine = (*WindowRank)(nil)
)

// doneMessages are rank me's MsgDone to every other of ranks ranks, for
// epoch e.
func doneMessages(me, ranks int, e uint32) []Message {
	out := make([]Message, 0, ranks-1)
	for r := range ranks {
		if r != me {
			out = append(out, Message{Type: MsgDone, From: int32(me), To: int32(r), Epoch: e})
		}
	}
	return out
}

// Ready holds the effects of the events stepped since the last Advance.
type Ready struct {
	// Reads are PCs to read whole; each is answered by a ReadDone.
	Reads []Read
	// Loaded are the files of completed reads that entered memory; the
	// caller keeps each one's bytes until it is delivered or sent.
	Loaded []FileID
	// Sends are messages for peers, in the order they must be sent.
	Sends []Message
	// Deliveries are files for local clients.
	Deliveries []Delivery
	// Dropped are peer messages held for this epoch before it started that
	// proved malformed when it did; each was dropped.
	Dropped []error
	// Forget are files in memory the rank no longer keeps (the window
	// policy's, planned for a rank that asks for nothing more): the
	// caller frees their bytes.
	Forget []FileID
	// Early are the files of completed reads for the next epoch, made
	// while this one drains (the window policy's overlap): the caller
	// keeps them apart from this epoch's files until the next starts.
	Early []FileID
}

// pending reports whether rd holds anything.
func (rd *Ready) pending() bool {
	return len(rd.Reads)+len(rd.Loaded)+len(rd.Sends)+len(rd.Deliveries)+len(rd.Dropped)+len(rd.Forget)+len(rd.Early) > 0
}

// clear empties rd, keeping its slices' room.
func (rd *Ready) clear() {
	rd.Reads, rd.Loaded, rd.Sends = rd.Reads[:0], rd.Loaded[:0], rd.Sends[:0]
	rd.Deliveries, rd.Dropped, rd.Forget = rd.Deliveries[:0], rd.Dropped[:0], rd.Forget[:0]
	rd.Early = rd.Early[:0]
}
