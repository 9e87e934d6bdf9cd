package shm

import (
	"encoding/binary"
	"sync/atomic"
)

// What a ring's header tells its client of the job and of the epoch
// (the layout is in doc.go): the rank writes it, the client reads it
// whenever it looks.

// setJob publishes what a client saves with its position to resume from:
// the job's ranks and seed, and where the rank stands with resuming (a
// Resume* value); and the job's last epoch.
func (r *Ring) setJob(ranks uint32, seed uint64, epochs uint32, job []byte, resume uint32) {
	le := binary.LittleEndian
	le.PutUint32(r.mem[offRanks:], ranks)
	le.PutUint32(r.mem[offEpochs:], epochs)
	le.PutUint64(r.mem[offSeed:], seed)
	copy(r.mem[offJob:offJob+jobMax], job)
	le.PutUint32(r.mem[offJobBytes:], uint32(min(len(job), jobMax)))
	r.setResume(resume)
}

// setResumed publishes where the job resumed: epoch e (0 none yet), from
// this rank's position from, on the job's plan of the rest when rest.
// Written before resume turns ResumeTaken.
func (r *Ring) setResumed(e, from uint32, rest bool) {
	v := uint32(0)
	if rest {
		v = 1
	}
	atomic.StoreUint32(r.u32(offResumedFrom), from)
	atomic.StoreUint32(r.u32(offResumedRest), v)
	atomic.StoreUint32(r.u32(offResumedEpoch), e)
}

// setResume publishes where the rank stands with resuming.
func (r *Ring) setResume(v uint32) { atomic.StoreUint32(r.u32(offResume), v) }

// setAwaited publishes how many ranks of the job have had no training
// attached, and the first of them.
func (r *Ring) setAwaited(n, first uint32) {
	atomic.StoreUint32(r.u32(offAwaitedFirst), first)
	atomic.StoreUint32(r.u32(offAwaited), n)
}

// setEpoch publishes the epoch being served and this rank's trace length.
func (r *Ring) setEpoch(e, n uint32) {
	atomic.StoreUint32(r.u32(offTraceLen), n)
	atomic.StoreUint32(r.u32(offEpoch), e)
}
