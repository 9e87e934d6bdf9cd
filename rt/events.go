package rt

import (
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// A ClientEvent is what a client tells its rank, on Node.ClientEvents:
// Ask for a file, End an epoch, a training process's Session begun or
// ended, or Over. The loop takes them in the order they come.
type ClientEvent interface{ clientEvent() }

// Ask asks the rank for the file at position Sn of its trace in epoch
// Epoch; the delivery goes to Reply, which must have room for it (the
// loop never waits on a client). An Ask for a later epoch waits for it;
// one for an earlier epoch, or past the job's last, gets an error. A nil
// Reply drops the answer, file or error (the rank's own asks for an ended
// share's positions). Pid is the process that asks: the training process
// the client belongs to (see readers), or the client's own; 0 when not
// known.
type Ask struct {
	Epoch uint32
	Sn    int32
	Reply chan<- Delivery
	Pid   int
}

// fail answers r with d, an error, unless its answer is dropped.
func (r Ask) fail(d Delivery) {
	if r.Reply != nil {
		answer(r.Reply, d)
	}
}

// answer hands d to reply, which has room for it (Ask): the loop never
// waits on a client. A reply channel that is full is a client's broken
// promise, which would stop the rank for every client and peer.
func answer(reply chan<- Delivery, d Delivery) {
	select {
	case reply <- d:
	default:
		panic(fmt.Sprintf("rt: the reply channel of position %d is full: a client asked for more than it has room for", d.Sn))
	}
}

// End says that the clients will ask for nothing more in epoch Epoch:
// every client, when Share.Replicas is 0, and the rank ends the epoch
// once the asks in flight are answered, even if some positions were
// never asked for; else the clients of that share alone (see
// loop.end). An End for an epoch over or past the job's last is ignored.
type End struct {
	Epoch uint32
	Share Share
}

// Session says that a training process of a share began (Delta +1) or
// went away (−1); Pid is the process's (see sessions).
type Session struct {
	Share Share
	Delta int
	Pid   int
}

// Over, sent by Node.TrainingOver, says that no client of this rank will
// ask for anything again.
type Over struct{}

// Share names a training process's share of the rank's trace: the
// positions p with p mod Replicas == Replica (as BrandSampler splits it).
type Share struct{ Replica, Replicas int32 }

func (Ask) clientEvent()     {}
func (End) clientEvent()     {}
func (Session) clientEvent() {}
func (Over) clientEvent()    {}

// Delivery is a file handed to a client: the file that answers position
// Sn (with redirection, not necessarily the one the trace names there).
type Delivery struct {
	Sn    int32
	File  proto.FileID
	Label int32
	// Data is the file's bytes, valid until Release; CRC is the checksum
	// the file's owner keeps for it in its index.
	Data []byte
	CRC  uint32
	// Err is set when no file answers: a failed chunk read, or an Ask
	// the rank refused (an epoch over or past the last, a position
	// already asked for, one the machine refuses).
	Err error
	// Damaged, when set, says that File is damaged on storage and left
	// out of the epoch (Config.OnDamage "skip"), naming it: there are no
	// bytes, and the position has no other answer.
	Damaged string
	// Holder holds Data's bytes until Release hands them back: the
	// runtime's file (its buffer from the pool, or its hold on the chunk
	// or the memory shared with the clients); or, for a delivery made
	// outside the runtime, whatever frees its bytes. Nil: nothing to
	// give back.
	Holder interface{ Release() }
}

// Release hands the delivered bytes back to their holder.
func (d *Delivery) Release() {
	if d.Holder != nil {
		d.Holder.Release()
		d.Holder = nil
	}
	d.Data = nil
}
