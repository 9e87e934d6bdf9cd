package shm

import (
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// Handing files over. A DataLoader worker reads a batch and hands it to
// the training process that started it, which is where the files are
// used; as bytes, every file crosses a pipe between them (a copy on each
// side, pickling, a system call per page or so). A file whose bytes live
// in the arena need not cross: the worker sends its place and a token,
// and the training process maps the place itself. The file is then
// neither the worker's nor the ring's to release: it belongs to the
// handed table until every process holding it let go.
//
// A client asks for it once (KindHand); from then on each of its files in
// the arena is handed to its parent process (the rank finds the parent
// itself: the client names nobody) as a record of kind RecHanded, holding
// one reference. A process that holds the file (whoever unpacks the
// token) releases its reference with KindRelease; a process that passes
// the token on to another first adds one (KindHold). The file's bytes
// are released when the last reference goes, or when the process it was
// handed to no longer exists (checked every handSweep), or when the
// server closes. Only the process it was handed to and its descendants
// may hold or release it.
//
// Handed files keep their bytes from being reused for longer than a ring
// record would, so their bytes are bounded (Options.HandCap, for all the
// processes together: a term of the rank's footprint, rt.Footprint.Handed):
// past the bound a file goes as a shared record, as without handing
// (Server.HandFull counts those). Without a bound (a single rank whose
// budget holds its shard: rt.Node.HandCap) the table has an entry for
// each file the processes keep; each is a mapping in one of them, which
// the kernel's vm.max_map_count bounds (65,530 by default).

// handSweep is how often the table looks for owners that died.
const handSweep = time.Second

// handedFile is one file handed over: its delivery (whose Release gives
// the bytes back), where it is in the arena, and who holds it.
type handedFile struct {
	d     rt.Delivery
	off   uint64
	owner int
	refs  int
}

// errUnknownToken says that a hold or release names no handed file.
var errUnknownToken = errors.New("no file handed over with that token and place")

// hand registers d, whose bytes are at off in the arena, as handed to
// owner with one reference, and returns its token; false when the files
// handed on and not released hold the bound already (the file then goes
// as a shared record).
func (s *Server) hand(d *rt.Delivery, off uint64, owner int) (uint32, bool) {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	n := uint64(len(d.Data))
	if s.handTotal+n > s.opt.HandCap {
		s.HandFull.Add(1)
		return 0, false
	}
	if s.handed == nil {
		s.handed = make(map[uint32]*handedFile)
		s.handBytes = make(map[int]uint64)
	}
	s.token++
	for s.token == 0 || s.handed[s.token] != nil { // wrapped: skip 0 and live tokens
		s.token++
	}
	s.handed[s.token] = &handedFile{d: *d, off: off, owner: owner, refs: 1}
	s.handBytes[owner] += n
	s.handTotal += n
	s.handPeak = max(s.handPeak, s.handTotal)
	s.Handed.Add(1)
	return s.token, true
}

// holdHanded adds delta references to the handed file named by token and
// place, on behalf of a process whose lineage is line; it releases the
// file once none is left.
func (s *Server) holdHanded(token uint32, off uint64, delta int, line []int) error {
	s.handMu.Lock()
	h := s.handed[token]
	if h == nil || h.off != off {
		s.handMu.Unlock()
		return errUnknownToken
	}
	if !slices.Contains(line, h.owner) {
		s.handMu.Unlock()
		return errors.New("the file was handed to another process")
	}
	if h.refs += delta; h.refs > 0 {
		s.handMu.Unlock()
		return nil
	}
	s.dropLocked(token, h)
	s.handMu.Unlock()
	h.d.Release()
	return nil
}

// dropLocked takes h out of the table; the caller releases its bytes.
func (s *Server) dropLocked(token uint32, h *handedFile) {
	delete(s.handed, token)
	s.handTotal -= uint64(len(h.d.Data))
	if s.handBytes[h.owner] -= uint64(len(h.d.Data)); s.handBytes[h.owner] == 0 {
		delete(s.handBytes, h.owner)
	}
}

// dropHanded releases the handed files whose owner gone says is gone
// (all of them when gone is nil) and returns how many.
func (s *Server) dropHanded(gone func(owner int) bool) int {
	s.handMu.Lock()
	dead := map[int]bool{}
	for owner := range s.handBytes {
		dead[owner] = gone == nil || gone(owner)
	}
	var free []rt.Delivery
	for token, h := range s.handed {
		if dead[h.owner] {
			s.dropLocked(token, h)
			free = append(free, h.d)
		}
	}
	s.handMu.Unlock()
	for i := range free {
		free[i].Release()
	}
	return len(free)
}

// HandedBytes returns the bytes of the files handed over and not yet
// released.
func (s *Server) HandedBytes() uint64 {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	return s.handTotal
}

// HandedPeak returns the most bytes of files handed over and not yet
// released at once so far: how full the training kept Options.HandCap.
func (s *Server) HandedPeak() uint64 {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	return s.handPeak
}

// sweepHanded releases, every handSweep until the server closes, the
// files handed to processes that no longer exist.
func (s *Server) sweepHanded() {
	defer s.wg.Done()
	t := time.NewTicker(handSweep)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			s.dropHanded(nil)
			return
		case <-t.C:
			s.dropHanded(processGone)
		}
	}
}

// processGone reports whether no process has the id pid.
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
