package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Offsets and sizes of the ring layout (see the package documentation).
const (
	ringMagic   = "BRTRING1"
	headerBytes = 4096

	offMagic          = 0
	offHeaderBytes    = 8
	offSlots          = 12
	offDataOff        = 16
	offDataBytes      = 24
	offRank           = 32
	offClient         = 36
	offReqHead        = 64
	offReqTail        = 128
	offRepHead        = 192
	offRankSleeping   = 256
	offClientSleeping = 320
	offDataHead       = 384
	offDataTail       = 448
	offEpoch          = 512
	offTraceLen       = 516
	offRanks          = 520
	offResume         = 524
	offSeed           = 528
	offResumedEpoch   = 536
	offResumedFrom    = 540
	offResumedRest    = 544
	offEpochs         = 548
	offAwaited        = 552
	offAwaitedFirst   = 556
	offJobBytes       = 1024
	offJob            = 1028
	// jobMax is the most bytes of the job's JSON the header holds.
	jobMax = headerBytes - offJob

	slotBytes    = 16
	recordHeader = 32
	recordAlign  = 64

	// Request kinds: read the file at a trace position; end the epoch;
	// declare a training process (see doc.go).
	KindRead     = 1
	KindEndEpoch = 2
	KindSession  = 3
	KindHand     = 4
	KindHold     = 5
	KindRelease  = 6
	// Record kinds. A shared record carries, instead of the bytes, their
	// offset in the arena (u64 after the header); a skipped one, a message
	// naming a damaged file the rank skipped.
	RecFile    = 1
	RecError   = 2
	RecPad     = 3
	RecShared  = 4
	RecSkipped = 5
	RecHanded  = 6
	// Where a rank stands with resuming (the ring's resume field): it
	// cannot resume (its first epoch starts at once); waiting for a start
	// (--resume); resumed where a start said, or started fresh (its first
	// epoch has started); waiting for its clients' first word, a start or
	// a read (a read from a client that offers none starts fresh).
	ResumeNone      = 0
	ResumeWaiting   = 1
	ResumeTaken     = 2
	ResumeFirstWord = 3
)

// Ring is a client's ring pair, mapped in this process.
type Ring struct {
	mem       []byte
	slots     uint32
	dataOff   uint64
	dataBytes uint64
}

// layout returns the data offset and total size for slots request slots
// and data bytes of replies.
func layout(slots uint32, data uint64) (dataOff, total uint64) {
	dataOff = (headerBytes + uint64(slots)*slotBytes + 4095) &^ 4095
	return dataOff, dataOff + data
}

// newRing creates the rings of a client in a memfd, sealed at its size,
// and maps them.
func newRing(slots uint32, data uint64, rank, client uint32) (*Ring, int, error) {
	if slots == 0 || slots&(slots-1) != 0 || data == 0 || data%4096 != 0 {
		return nil, -1, fmt.Errorf("shm: ring of %d slots and %d data bytes: slots must be a power of two, data a multiple of 4096", slots, data)
	}
	fd, err := memfd("brandrt-ring")
	if err != nil {
		return nil, -1, err
	}
	dataOff, total := layout(slots, data)
	if err := syscall.Ftruncate(fd, int64(total)); err != nil {
		syscall.Close(fd)
		return nil, -1, fmt.Errorf("shm: size a ring of %d bytes: %w", total, err)
	}
	if err := seal(fd, sealSize); err != nil { // the client cannot truncate it under the rank
		syscall.Close(fd)
		return nil, -1, err
	}
	r, err := mapRing(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, -1, err
	}
	le := binary.LittleEndian
	copy(r.mem[offMagic:], ringMagic)
	le.PutUint32(r.mem[offHeaderBytes:], headerBytes)
	le.PutUint32(r.mem[offSlots:], slots)
	le.PutUint64(r.mem[offDataOff:], dataOff)
	le.PutUint64(r.mem[offDataBytes:], data)
	le.PutUint32(r.mem[offRank:], rank)
	le.PutUint32(r.mem[offClient:], client)
	r.slots, r.dataOff, r.dataBytes = slots, dataOff, data
	return r, fd, nil
}

// mapRing maps the whole of the rings' file fd.
func mapRing(fd int) (*Ring, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: ring: %w", err)
	}
	mem, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map a ring of %d bytes: %w", st.Size, err)
	}
	return &Ring{mem: mem}, nil
}

// openRing maps the rings a rank handed over in fd and checks their
// header.
func openRing(fd int) (*Ring, error) {
	r, err := mapRing(fd)
	if err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// check validates a mapped header.
func (r *Ring) check() error {
	le := binary.LittleEndian
	if len(r.mem) < headerBytes || string(r.mem[:8]) != ringMagic {
		return errors.New("shm: not a brandrt ring")
	}
	r.slots = le.Uint32(r.mem[offSlots:])
	r.dataOff, r.dataBytes = le.Uint64(r.mem[offDataOff:]), le.Uint64(r.mem[offDataBytes:])
	if want, total := layoutOK(r.slots, r.dataOff, r.dataBytes); !want || total != uint64(len(r.mem)) {
		return fmt.Errorf("shm: ring header does not fit its %d bytes", len(r.mem))
	}
	return nil
}

func layoutOK(slots uint32, dataOff, data uint64) (bool, uint64) {
	if slots == 0 || slots&(slots-1) != 0 || data%4096 != 0 {
		return false, 0
	}
	off, total := layout(slots, data)
	return off == dataOff, total
}

// Close unmaps the rings.
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := syscall.Munmap(r.mem)
	r.mem = nil
	return err
}

func (r *Ring) u32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *Ring) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

// Request is one request slot.
type Request struct {
	Sn    int32
	Kind  uint32
	Epoch uint32
	// Extra is the slot's last word: the replicas of an end or a session.
	Extra uint32
}

// errBadHead is returned when a client's request head is not within the
// ring's reach of the tail: it wrote what the protocol does not allow.
var errBadHead = errors.New("shm: the client's request head is out of range")

// takeRequests appends the requests written since the last call, up to
// reads of kind KindRead: it stops before the next one.
func (r *Ring) takeRequests(dst []Request, reads int) ([]Request, error) {
	head, tail := atomic.LoadUint32(r.u32(offReqHead)), atomic.LoadUint32(r.u32(offReqTail))
	if head-tail > r.slots {
		return dst, fmt.Errorf("%w: head %d, tail %d, %d slots", errBadHead, head, tail, r.slots)
	}
	le := binary.LittleEndian
	for ; tail != head; tail++ {
		s := r.mem[headerBytes+uint64(tail%r.slots)*slotBytes:]
		req := Request{Sn: int32(le.Uint32(s)), Kind: le.Uint32(s[4:]), Epoch: le.Uint32(s[8:]), Extra: le.Uint32(s[12:])}
		if req.Kind == KindRead {
			if reads == 0 {
				break
			}
			reads--
		}
		dst = append(dst, req)
	}
	atomic.StoreUint32(r.u32(offReqTail), tail)
	return dst, nil
}

// requestsWaiting reports whether the client wrote requests the rank has
// not taken.
func (r *Ring) requestsWaiting() bool {
	return atomic.LoadUint32(r.u32(offReqHead)) != atomic.LoadUint32(r.u32(offReqTail))
}

// waitRequests sleeps until the client writes a request, or d passes.
func (r *Ring) waitRequests(d time.Duration) {
	head := r.u32(offReqHead)
	seen := atomic.LoadUint32(head)
	atomic.StoreUint32(r.u32(offRankSleeping), 1)
	if seen == atomic.LoadUint32(r.u32(offReqTail)) {
		futexWait(head, seen, d)
	}
	atomic.StoreUint32(r.u32(offRankSleeping), 0)
}

// Record is one reply for the data ring.
type Record struct {
	Kind     uint32
	Sn, File int32
	Label    int32
	CRC      uint32
	// Data is the file's bytes; for a shared record, Off is where they
	// start in the arena.
	Data []byte
	Off  uint64
	// Token names a handed record's file (hand.go).
	Token uint32
	end   uint64 // where the record ends in the data ring
}

// bytes returns the room rec takes in the data ring.
func (rec *Record) bytes() uint64 {
	n := uint64(len(rec.Data))
	switch rec.Kind {
	case RecShared:
		n = 8
	case RecHanded:
		n = 16
	}
	return (recordHeader + n + recordAlign - 1) &^ (recordAlign - 1)
}

// room reports whether n bytes fit in the data ring now.
func (r *Ring) room(n uint64) bool {
	head, tail := atomic.LoadUint64(r.u64(offDataHead)), atomic.LoadUint64(r.u64(offDataTail))
	return r.dataBytes-(head-tail) >= n
}

// RewindAt is how far into its data ring the rank writes before, finding
// the ring empty (the client has read every record), it starts again at
// its beginning: a pad record takes the rest. The ring's pages are the
// rank's memory once written; most records are small (a file's place in
// the arena), so a ring written through would cost its whole size for
// the few records in flight at once. With the rewind a ring costs what it
// held at once, and RewindAt.
const RewindAt = 256 << 10

// putRecord writes rec into the data ring, waiting (while alive says
// so) for the client to release room, and returns where the record ends:
// once the client's data tail passes that, it is done with the record.
func (r *Ring) putRecord(rec Record, alive func() bool) (uint64, error) {
	n := rec.bytes()
	if n > r.dataBytes/2 {
		return 0, fmt.Errorf("%w: a file of %d bytes, a ring of %d (a file may take half)", errTooBig, len(rec.Data), r.dataBytes)
	}
	head := atomic.LoadUint64(r.u64(offDataHead))
	pos := head % r.dataBytes
	rewind := pos >= RewindAt && head == r.released() // the client read all
	// no wrapping inside a record
	if pad := r.dataBytes - pos; pad < n || rewind {
		if err := r.waitRoom(pad, alive); err != nil {
			return 0, err
		}
		r.writeHeader(head, Record{Kind: RecPad}, pad)
		head += pad
		atomic.StoreUint64(r.u64(offDataHead), head)
	}
	if err := r.waitRoom(n, alive); err != nil {
		return 0, err
	}
	r.writeHeader(head, rec, n)
	switch body := r.mem[r.dataOff+head%r.dataBytes+recordHeader:]; rec.Kind {
	case RecShared:
		binary.LittleEndian.PutUint64(body, rec.Off)
	case RecHanded:
		binary.LittleEndian.PutUint64(body, rec.Off)
		binary.LittleEndian.PutUint64(body[8:], uint64(rec.Token))
	default:
		copy(body, rec.Data)
	}
	atomic.StoreUint64(r.u64(offDataHead), head+n)
	atomic.AddUint32(r.u32(offRepHead), 1)
	if atomic.LoadUint32(r.u32(offClientSleeping)) != 0 {
		futexWake(r.u32(offRepHead))
	}
	return head + n, nil
}

// released returns the client's data tail: every record that ends at or
// before it is done with.
func (r *Ring) released() uint64 { return atomic.LoadUint64(r.u64(offDataTail)) }

func (r *Ring) writeHeader(head uint64, rec Record, n uint64) {
	h := r.mem[r.dataOff+head%r.dataBytes:]
	le := binary.LittleEndian
	le.PutUint32(h, uint32(n))
	le.PutUint32(h[4:], rec.Kind)
	le.PutUint32(h[8:], uint32(rec.Sn))
	le.PutUint32(h[12:], uint32(rec.File))
	le.PutUint32(h[16:], uint32(rec.Label))
	le.PutUint32(h[20:], uint32(len(rec.Data)))
	le.PutUint32(h[24:], rec.CRC)
	le.PutUint32(h[28:], 0)
}

// errClientGone is returned when a client died while the rank waited;
// errTooBig when a reply cannot fit the client's ring.
var (
	errClientGone = errors.New("shm: client gone")
	errTooBig     = errors.New("shm: reply too large for the ring")
)

// waitRoom waits until n bytes are free: the client releases records at
// its own pace and does not wake the rank, so this polls, backing off.
func (r *Ring) waitRoom(n uint64, alive func() bool) error {
	nap := 20 * time.Microsecond
	for !r.room(n) {
		if !alive() {
			return errClientGone
		}
		time.Sleep(nap)
		nap = min(2*nap, 2*time.Millisecond)
	}
	return nil
}
