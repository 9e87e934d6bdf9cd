package rt

import "fmt"

// Who reads the rank's trace. Each position of an epoch goes to one
// process. A second training process that reads positions another one
// already reads (a second training job started beside a rank that serves
// one, or BrandSamplers that disagree on the shares) would take files
// meant for the first, and each would find positions taken. The rank
// refuses the second and names the first: a process that declared a
// share (Session) overlapping the share of a process still attached that
// declared it earlier gets every read refused, and a process that asks
// for a position another process asked for in this epoch gets that one
// refused.

// readers is what the rank knows of the processes that read its trace
// (Node.readers).
type readers struct {
	// procs holds the training processes attached, by pid; declared
	// counts the declarations so far, to order them.
	procs    map[int]*reader
	declared int
	// by holds, for each position of this epoch's trace, the process that
	// asked for it (0: none yet, or one the rank could not name).
	by []int32
}

// reader is a training process: the share it declared, how many of its
// clients declared it and are still attached, and when it first did.
type reader struct {
	share       Share
	live, order int
}

// readersAdvice ends the messages of a process refused positions.
const readersAdvice = "each position goes to one process: is a second training job running beside this rank? " +
	"It needs a brandrt serve of its own, with its own $BRANDRT_ATTACH"

// session notes a training process that declared a share or went away.
func (rs *readers) session(s Session) {
	if s.Pid <= 0 {
		return
	}
	if rs.procs == nil {
		rs.procs = make(map[int]*reader)
	}
	p := rs.procs[s.Pid]
	if p == nil {
		rs.declared++
		p = &reader{share: s.Share, order: rs.declared}
		rs.procs[s.Pid] = p
	}
	if p.live += s.Delta; p.live <= 0 {
		delete(rs.procs, s.Pid)
	}
}

// begin starts an epoch of n positions: none asked for yet.
func (rs *readers) begin(n int) { rs.by = make([]int32, n) }

// refusal returns why ask r of epoch is refused, or nil: its process
// declared a share that another one declared before it, or another
// process asked for its position already.
func (rs *readers) refusal(me int, r Ask, epoch uint32) error {
	if r.Pid <= 0 {
		return nil
	}
	if first, p := rs.before(r.Pid); first > 0 {
		q := rs.procs[first]
		return fmt.Errorf("rt: rank %d: another training process (pid %d) already reads share %d of %d of this rank's trace; process %d, which declared share %d of %d, would take positions of it, and its reads are refused (%s)",
			me, first, q.share.Replica, q.share.Replicas, r.Pid, p.share.Replica, p.share.Replicas, readersAdvice)
	}
	if r.Sn < 0 || int(r.Sn) >= len(rs.by) {
		return nil // the machine refuses it
	}
	if q := int(rs.by[r.Sn]); q > 0 && q != r.Pid {
		return fmt.Errorf("rt: rank %d: position %d of epoch %d was asked for already, by process %d: another training process (pid %d) already reads these positions of this rank's trace, and process %d is refused them (%s)",
			me, r.Sn, epoch, q, q, r.Pid, readersAdvice)
	}
	return nil
}

// took notes that ask r's process asked for its position.
func (rs *readers) took(r Ask) {
	if r.Sn >= 0 && int(r.Sn) < len(rs.by) {
		rs.by[r.Sn] = int32(r.Pid)
	}
}

// before returns the process, if any, that declared a share overlapping
// pid's before pid did (the earliest one), and pid's own reader.
func (rs *readers) before(pid int) (first int, p *reader) {
	p = rs.procs[pid]
	if p == nil {
		return 0, nil
	}
	order := p.order
	for q, o := range rs.procs {
		if o.order < order && overlap(o.share, p.share) {
			first, order = q, o.order
		}
	}
	return first, p
}

// overlap reports whether shares a and b hold a position in common: the
// positions i mod n and j mod m meet where i ≡ j mod gcd(n, m). A share
// of no replicas is the whole trace.
func overlap(a, b Share) bool {
	if a.Replicas <= 0 || b.Replicas <= 0 {
		return true
	}
	g := gcd(a.Replicas, b.Replicas)
	return a.Replica%g == b.Replica%g
}

func gcd(a, b int32) int32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
