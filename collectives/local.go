package collectives

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Local is a Comm between goroutines of one process, for tests of code
// that runs on MPI. Messages between a pair of ranks arrive in the order
// they were sent, as with MPI; collectives block until every rank calls
// them. Isend copies its buffer and completes at once; Issend copies it
// and completes once a receive took it.
type Local struct {
	h    *hub
	rank int
}

var _ Comm = (*Local)(nil)

// NewLocal returns n connected ranks.
func NewLocal(n int) []*Local {
	h := &hub{n: n, vals: make([]any, n), inbox: make([][]envelope, n), posted: make([][]*localReq, n)}
	h.cond = sync.NewCond(&h.mu)
	ls := make([]*Local, n)
	for r := range ls {
		ls[r] = &Local{h: h, rank: r}
	}
	return ls
}

// hub is what the ranks of a Local share.
type hub struct {
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	// Collectives: the deposits of the round in progress and of the last
	// completed round.
	gen     int
	arrived int
	vals    []any
	done    []any
	// Point-to-point: per destination, messages not yet received and
	// receives not yet matched, both in order.
	inbox   [][]envelope
	posted  [][]*localReq
	aborted error
}

type envelope struct {
	src, tag int
	data     []byte
	sent     *localReq // an Issend's request, completed when received
}

// taken completes e's Issend, if it was one: a receive took e.
func (e envelope) taken() {
	if e.sent != nil {
		e.sent.done = true
	}
}

// ErrAborted is returned by every call on a Local after a rank aborted.
var ErrAborted = errors.New("collectives: a local rank aborted")

// exchange deposits v and returns every rank's deposit, in rank order,
// once all have deposited.
func (h *hub) exchange(rank int, v any) ([]any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aborted != nil {
		return nil, h.aborted
	}
	gen := h.gen
	h.vals[rank] = v
	if h.arrived++; h.arrived == h.n {
		h.done, h.vals, h.arrived = h.vals, make([]any, h.n), 0
		h.gen++
		h.cond.Broadcast()
	}
	for gen == h.gen && h.aborted == nil {
		h.cond.Wait()
	}
	if gen == h.gen {
		return nil, h.aborted
	}
	return h.done, nil
}

// Rank returns this rank.
func (l *Local) Rank() int { return l.rank }

// Size returns the number of ranks.
func (l *Local) Size() int { return l.h.n }

// Barrier waits for every rank.
func (l *Local) Barrier() error {
	_, err := l.h.exchange(l.rank, nil)
	return err
}

// AllreduceSum returns the element-wise sum over the ranks.
func (l *Local) AllreduceSum(in []int64) ([]int64, error) {
	return l.reduce(in, func(a, b int64) int64 { return a + b })
}

// AllreduceMax returns the element-wise maximum over the ranks.
func (l *Local) AllreduceMax(in []int64) ([]int64, error) {
	return l.reduce(in, func(a, b int64) int64 { return max(a, b) })
}

func (l *Local) reduce(in []int64, op func(a, b int64) int64) ([]int64, error) {
	all, err := l.h.exchange(l.rank, slices.Clone(in))
	if err != nil {
		return nil, err
	}
	out := slices.Clone(all[0].([]int64))
	for _, v := range all[1:] {
		w := v.([]int64)
		if len(w) != len(out) {
			return nil, fmt.Errorf("collectives: allreduce of %d and %d elements", len(out), len(w))
		}
		for i := range out {
			out[i] = op(out[i], w[i])
		}
	}
	return out, nil
}

// Allgatherv concatenates every rank's send in rank order.
func (l *Local) Allgatherv(send []int32) ([]int32, []int, error) {
	all, err := l.h.exchange(l.rank, slices.Clone(send))
	if err != nil {
		return nil, nil, err
	}
	var out []int32
	counts := make([]int, len(all))
	for r, v := range all {
		out = append(out, v.([]int32)...)
		counts[r] = len(v.([]int32))
	}
	return out, counts, nil
}

// Gatherv concatenates every rank's send in rank order on rank root;
// the others get the counts only.
func (l *Local) Gatherv(send []int32, root int) ([]int32, []int, error) {
	if root < 0 || root >= l.h.n {
		return nil, nil, fmt.Errorf("collectives: Gatherv to rank %d of %d", root, l.h.n)
	}
	all, counts, err := l.Allgatherv(send)
	if l.rank != root {
		all = nil
	}
	return all, counts, err
}

// Abort ends every rank's use of the hub: their blocked and later calls
// return ErrAborted. This goroutine exits; it does not return.
func (l *Local) Abort(code int) {
	h := l.h
	h.mu.Lock()
	if h.aborted == nil {
		h.aborted = fmt.Errorf("%w: rank %d, code %d", ErrAborted, l.rank, code)
	}
	h.cond.Broadcast()
	h.mu.Unlock()
	panic(h.aborted)
}

// localReq is a Local request; Isends complete at once. A posted
// receive is completed by the sender's goroutine, and an Issend by the
// receiver's, under mu, the hub's lock.
type localReq struct {
	mu       *sync.Mutex
	buf      []byte
	src, tag int
	done     bool
	st       Status
	err      error
}

// Test reports whether the request completed.
func (r *localReq) Test() (bool, Status, error) {
	if r.mu != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	return r.done, r.st, r.err
}

func matches(src, tag int, e envelope) bool {
	return (src == AnySource || src == e.src) && (tag == AnyTag || tag == e.tag)
}

// Isend copies b into dst's mailbox, or into a receive dst posted for it.
func (l *Local) Isend(b []byte, dst, tag int) (Request, error) { return l.send(b, dst, tag, false) }

// Issend is Isend whose request completes once a receive took b.
func (l *Local) Issend(b []byte, dst, tag int) (Request, error) { return l.send(b, dst, tag, true) }

func (l *Local) send(b []byte, dst, tag int, sync bool) (Request, error) {
	h := l.h
	if dst < 0 || dst >= h.n || tag < 0 {
		return nil, fmt.Errorf("collectives: send to rank %d tag %d of %d ranks", dst, tag, h.n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aborted != nil {
		return nil, h.aborted
	}
	e := envelope{src: l.rank, tag: tag, data: slices.Clone(b)}
	for i, r := range h.posted[dst] {
		if matches(r.src, r.tag, e) {
			h.posted[dst] = slices.Delete(h.posted[dst], i, i+1)
			r.fill(e)
			return &localReq{done: true}, nil
		}
	}
	sent := &localReq{done: true}
	if sync {
		sent = &localReq{mu: &h.mu}
		e.sent = sent
	}
	h.inbox[dst] = append(h.inbox[dst], e)
	h.cond.Broadcast() // a Recv may wait for it
	return sent, nil
}

func (r *localReq) fill(e envelope) {
	r.done, r.st = true, Status{Source: e.src, Tag: e.tag, Len: len(e.data)}
	if len(e.data) > len(r.buf) {
		r.err = fmt.Errorf("collectives: message of %d bytes from rank %d for a %d-byte receive", len(e.data), e.src, len(r.buf))
		return
	}
	copy(r.buf, e.data)
}

// Irecv receives the first matching message, now or when it arrives.
func (l *Local) Irecv(b []byte, src, tag int) (Request, error) {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aborted != nil {
		return nil, h.aborted
	}
	r := &localReq{mu: &h.mu, buf: b, src: src, tag: tag}
	for i, e := range h.inbox[l.rank] {
		if matches(src, tag, e) {
			h.inbox[l.rank] = slices.Delete(h.inbox[l.rank], i, i+1)
			r.fill(e)
			e.taken()
			return r, nil
		}
	}
	h.posted[l.rank] = append(h.posted[l.rank], r)
	return r, nil
}

// Iprobe reports the first message waiting for this rank.
func (l *Local) Iprobe() (bool, Status, error) {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aborted != nil {
		return false, Status{}, h.aborted
	}
	if len(h.inbox[l.rank]) == 0 {
		return false, Status{}, nil
	}
	e := h.inbox[l.rank][0]
	return true, Status{Source: e.src, Tag: e.tag, Len: len(e.data)}, nil
}

// Recv takes the first message from src with tag into b, waiting for it
// if it has not arrived, as MPI_Recv does.
func (l *Local) Recv(b []byte, src, tag int) error {
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.aborted == nil {
		for i, e := range h.inbox[l.rank] {
			if matches(src, tag, e) {
				if len(e.data) != len(b) {
					return fmt.Errorf("collectives: message of %d bytes from rank %d into %d bytes", len(e.data), e.src, len(b))
				}
				h.inbox[l.rank] = slices.Delete(h.inbox[l.rank], i, i+1)
				copy(b, e.data)
				e.taken()
				return nil
			}
		}
		h.cond.Wait()
	}
	return h.aborted
}
