package collectives

import (
	"bytes"
	"fmt"
	"runtime"
	"time"
)

// The point-to-point check: every rank sends every other rank a message
// above the eager limit (the size that deadlocks blocking sends) and an
// empty one. Big messages from lower ranks arrive through pre-posted
// Irecv(src, AnyTag), those from higher ranks through Iprobe and Recv;
// empty ones through Irecv(AnySource, tagEmpty).
const (
	tagBig    = 5
	tagEmpty  = 6
	bigLen    = 200 << 10
	p2pExpiry = 20 * time.Second // well inside launch.Run's timeout
)

// bigMessage is what src sends dst: bigLen+src bytes that differ per
// pair and per position.
func bigMessage(src, dst int) []byte {
	b := make([]byte, bigLen+src)
	for i := range b {
		b[i] = byte(i*7 + i>>10 + src*31 + dst*101)
	}
	return b
}

// p2pOp is a request in flight and the check of what it reports.
type p2pOp struct {
	req   Request
	check func(Status) error
}

// p2pRank is one rank's side of the check.
type p2pRank struct {
	c         Comm
	ops       []p2pOp
	probes    int          // big messages still to arrive through Iprobe
	emptyFrom map[int]bool // sources of the empty messages received
	bigFrom   map[int]bool // sources of the probed messages received
}

func checkPointToPoint(w *World) error {
	p := &p2pRank{c: w, probes: w.Size() - 1 - w.Rank(), emptyFrom: map[int]bool{}, bigFrom: map[int]bool{}}
	if err := p.postReceives(); err != nil {
		return err
	}
	if err := w.Barrier(); err != nil { // every receive is posted before any send
		return err
	}
	if err := p.sendAll(); err != nil {
		return err
	}
	return p.progress()
}

func (p *p2pRank) postReceives() error {
	me := p.c.Rank()
	for src := range me {
		buf := make([]byte, bigLen+64) // longer than the message: Test must report its length
		req, err := p.c.Irecv(buf, src, AnyTag)
		if err != nil {
			return err
		}
		p.ops = append(p.ops, p2pOp{req, func(st Status) error { return checkBig(st, src, me, buf[:st.Len]) }})
	}
	for i := range p.c.Size() - 1 {
		req, err := p.c.Irecv(make([]byte, 0, i), AnySource, tagEmpty)
		if err != nil {
			return err
		}
		p.ops = append(p.ops, p2pOp{req, p.checkEmpty})
	}
	return nil
}

func (p *p2pRank) sendAll() error {
	for dst := range p.c.Size() {
		if dst == p.c.Rank() {
			continue
		}
		for _, m := range []struct {
			b   []byte
			tag int
		}{{bigMessage(p.c.Rank(), dst), tagBig}, {nil, tagEmpty}} {
			req, err := p.c.Isend(m.b, dst, m.tag)
			if err != nil {
				return err
			}
			p.ops = append(p.ops, p2pOp{req, func(Status) error { return nil }})
		}
	}
	return nil
}

// progress tests the requests and probes for messages, yielding when
// nothing moved, until all is done or p2pExpiry has passed.
func (p *p2pRank) progress() error {
	deadline := time.Now().Add(p2pExpiry)
	for len(p.ops) > 0 || p.probes > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("point-to-point: %d requests and %d probed messages outstanding after %v", len(p.ops), p.probes, p2pExpiry)
		}
		moved, err := p.step()
		if err != nil {
			return err
		}
		if !moved {
			runtime.Gosched()
		}
	}
	return nil
}

func (p *p2pRank) step() (bool, error) {
	moved, err := p.testAll()
	if err != nil {
		return false, err
	}
	ok, st, err := p.c.Iprobe()
	if err != nil || !ok {
		return moved, err
	}
	return true, p.receiveProbed(st)
}

// testAll tests every request once and drops those that completed.
func (p *p2pRank) testAll() (bool, error) {
	left := p.ops[:0]
	for _, op := range p.ops {
		done, st, err := op.req.Test()
		if err != nil {
			return false, err
		}
		if !done {
			left = append(left, op)
			continue
		}
		if again, st2, err := op.req.Test(); !again || st2 != st || err != nil {
			return false, fmt.Errorf("test after completion gave %v %+v %v, want true %+v", again, st2, err, st)
		}
		if err := op.check(st); err != nil {
			return false, err
		}
	}
	moved := len(left) < len(p.ops)
	p.ops = left
	return moved, nil
}

func (p *p2pRank) receiveProbed(st Status) error {
	me := p.c.Rank()
	if st.Tag != tagBig || st.Source <= me || st.Source >= p.c.Size() || p.bigFrom[st.Source] {
		return fmt.Errorf("unexpected probed message %+v", st)
	}
	p.bigFrom[st.Source] = true
	p.probes--
	buf := make([]byte, st.Len)
	if err := p.c.Recv(buf, st.Source, st.Tag); err != nil {
		return err
	}
	return checkBig(st, st.Source, me, buf)
}

func (p *p2pRank) checkEmpty(st Status) error {
	if st.Tag != tagEmpty || st.Len != 0 || st.Source == p.c.Rank() || st.Source < 0 ||
		st.Source >= p.c.Size() || p.emptyFrom[st.Source] {
		return fmt.Errorf("empty receive got %+v", st)
	}
	p.emptyFrom[st.Source] = true
	return nil
}

// checkBig checks a big message src sent dst that arrived as st and b.
func checkBig(st Status, src, dst int, b []byte) error {
	want := Status{Source: src, Tag: tagBig, Len: bigLen + src}
	if st != want || !bytes.Equal(b, bigMessage(src, dst)) {
		return fmt.Errorf("message from rank %d: got %+v (content equal: %v), want %+v", src, st, bytes.Equal(b, bigMessage(src, dst)), want)
	}
	return nil
}
