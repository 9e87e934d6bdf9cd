package proto

import "fmt"

// An Event is one input to Rank.Step: EpochStart, ClientRequest, ReadDone
// or a Message from a peer.
type Event interface{ isEvent() }

// EpochStart begins epoch Epoch with every rank's trace (Traces[r] is the
// ordered list of files rank r will request). All per-epoch state is
// cleared. The traces must not share a file.
//
// Start, when set, resumes the epoch mid-way (the window policy only):
// Start[r] is the first position rank r's clients will ask for; the files
// planned for the positions before it were delivered before a restart,
// and are neither asked for nor kept.
//
// Delivered, when set, resumes the epoch on another job's plan (the
// window policy only): it marks the files delivered before the restart,
// Traces are the rest's (RestTraces), which the rank plans as RestPlan
// does, and its clients ask for every position from 0.
type EpochStart struct {
	Epoch     uint32
	Traces    [][]FileID
	Start     []int32
	Delivered []bool
}

// ClientRequest is a local client asking for the file at position Sn of
// this rank's trace.
type ClientRequest struct{ Sn int32 }

// ReadDone reports that the read of physical chunk PC, issued in epoch
// Epoch, finished; Failed when it could not be read. A read of an earlier
// epoch is dropped. Damaged lists the chunk's files whose bytes are
// damaged on storage (the runtime read them twice) and are to be left
// out: each still answers its position, with StatusDamaged.
type ReadDone struct {
	PC      int
	Epoch   uint32
	Failed  bool
	Damaged []FileID
}

// checkDamaged refuses a read of rank me's chunk, files [lo, hi), that
// names a file of another chunk damaged.
func (e ReadDone) checkDamaged(me int, lo, hi FileID) error {
	for _, f := range e.Damaged {
		if f < lo || f >= hi {
			return fmt.Errorf("proto: rank %d: read of chunk %d finds file %d damaged, which is not in it", me, e.PC, f)
		}
	}
	return nil
}

// ClientsDone says that this rank's own clients will ask for nothing more
// this epoch (all answered, or they ended it early). The rank tells the
// others (MsgDone).
type ClientsDone struct{}

func (ClientsDone) isEvent() {}

func (EpochStart) isEvent()    {}
func (ClientRequest) isEvent() {}
func (ReadDone) isEvent()      {}
func (Message) isEvent()       {}
