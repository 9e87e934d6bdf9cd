package rt

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// loop is the event loop of one epoch. It runs on the serving goroutine,
// which alone calls into MPI and the machine (Node's collectives between
// epochs run there too); chunk reads run in I/O workers and clients talk
// to it through channels. Its state is in parts: what the clients asked
// (asks), the traffic with the peers (link), the files it holds, and
// the epoch's clock and counts; the loop steps the machine with what
// each part hands it and carries out what the machine asks (carry).
type loop struct {
	n     *Node
	p     proto.Machine
	io    *ioPool
	reqs  <-chan ClientEvent
	asks  *asks
	link  *link
	files map[proto.FileID]*file
	just  *readResult // the read whose ReadDone is being carried out
	epoch uint32
	// done: the clients will ask for nothing more; the machine told the
	// peers (MsgDone).
	done bool
	// moved is when the loop last made progress; waitsWhat says what the
	// loop waits for, in peerWatch's messages; goneChecked when checkGone
	// last ran.
	moved       time.Time
	waitsWhat   string
	goneChecked time.Time
	clock       epochClock
	stats       loopStats
}

// epochClock times an epoch: when it began and the process's CPU time
// then (start, cpu0); when the first client request came (first) and
// the CPU time the process used before it (idleCPU); when the first
// answer went out (answered1).
type epochClock struct {
	start, first, answered1 time.Time
	cpu0, idleCPU           time.Duration
}

// begin starts the clock.
func (c *epochClock) begin() { c.start, c.cpu0 = time.Now(), processCPU() }

// markFirst notes the end of the idle stretch at the start of the epoch,
// once.
func (c *epochClock) markFirst() {
	if c.first.IsZero() {
		c.first = time.Now()
		c.idleCPU = processCPU() - c.cpu0
	}
}

// answeredOne notes an answer, the first one's time.
func (c *epochClock) answeredOne() {
	if c.answered1.IsZero() {
		c.answered1 = time.Now()
	}
}

// firstWait is how long the epoch's first request waited for an answer
// (0 when nothing was answered).
func (c *epochClock) firstWait() float64 {
	if c.answered1.IsZero() {
		return 0
	}
	return c.answered1.Sub(c.first).Seconds()
}

// serve runs the epoch until every position of the rank's trace was
// answered (or a client ended the epoch), every peer said it is done, and
// nothing is in flight. With peers, after a few empty rounds (yielding),
// it polls MPI every spinNap while a client waits or a read or send is
// in flight, for up to busySpin after its last progress; otherwise, and
// after that, it sleeps between polls of MPI, longer and
// longer up to busyNap while busy (for busyWait after its last progress)
// and maxNap while idle or stuck: a rank that waits on a peer that does
// not answer (stopped, its node hung) takes next to no CPU, and says so
// after a while (peerWatch). Clients and I/O workers wake it at once.
func (l *loop) serve(ctx context.Context) error {
	idle := 0
	nap := minNap
	l.moved, l.waitsWhat = time.Now(), fmt.Sprintf("in epoch %d", l.epoch)
	l.n.peers.reset()
	for {
		progress, err := l.step()
		if err != nil {
			return err
		}
		if l.finished() {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if progress {
			idle, nap, l.moved = 0, minNap, time.Now()
			continue
		}
		busy := l.busy()
		if l.polls() {
			if err := l.n.peers.check(l.waitsFor, l.waitsWhat); err != nil {
				return err
			}
			if err := l.n.training.check(l.n.comm); err != nil {
				return err
			}
			if idle++; idle < spinRounds {
				runtime.Gosched()
				continue
			}
			if busy && time.Since(l.moved) < busySpin {
				// poll MPI every spinNap, not in a loop: a spinning rank
				// takes the core from the training processes beside it
				if err := l.wait(ctx, spinNap); err != nil {
					return err
				}
				continue
			}
		}
		if err := l.wait(ctx, nap); err != nil {
			return err
		}
		if nap = min(2*nap, maxNap); busy && time.Since(l.moved) < busyWait {
			nap = min(nap, busyNap)
		}
	}
}

// spinRounds is how many empty rounds the loop spins (yielding) before it
// sleeps; a round takes a few microseconds. It is short: clients and I/O
// workers wake a sleeping loop through channels at once, and spinning
// takes CPU from the training processes on the node. busySpin bounds the
// polling every spinNap while something is in flight: a peer that
// answers within it is heard within spinNap. Spinning there instead (a
// call of MPI_Iprobe every few µs) took 37 % of the rank's CPU on 3
// emulated nodes at a quarter, and polling every 50 µs delivered 1.12–1.28x
// its files/s in epoch 1 and 1.05–1.22x after, 1.12x with the dataset in
// memory (BENCHMARKS.md, "The rank's polling"; 200 µs: no better).
// minNap, busyNap and maxNap bound the sleeps: a
// peer's message waits at most busyNap for a busy rank, maxNap for an
// idle one, or for one where nothing moved for busyWait (a peer that does
// not answer: polling every 2 ms then cost 4-8 % of a core, for nothing).
const (
	busyWait   = 250 * time.Millisecond
	spinRounds = 20
	busySpin   = 10 * time.Millisecond
	spinNap    = 50 * time.Microsecond
	minNap     = time.Millisecond
	busyNap    = 2 * time.Millisecond
	maxNap     = 16 * time.Millisecond
)

// waitsFor reports whether the loop waits for rank r: for a reply to a
// request while its clients wait, for r's word that it is done, for what
// r sent, for a send to r. While its own storage does not answer
// (storageWatch) it blames no peer.
func (l *loop) waitsFor(r int) bool {
	if l.io.watch.stuck() {
		return false
	}
	return l.asks.pending() && l.n.peers.owes(r) || l.link.waitsOn(r, l.done)
}

// polls reports whether the loop must poll MPI: only with peers. With
// none, everything that can happen arrives on a channel, so the loop
// blocks at once when idle and sleeps without a timer.
func (l *loop) polls() bool { return l.n.size > 1 }

// wait blocks until a client or an I/O worker has something, or (when
// the loop polls MPI, which has no channel to wait on) nap passes.
func (l *loop) wait(ctx context.Context, nap time.Duration) error {
	var tick <-chan time.Time
	if l.polls() || l.watching() { // MPI, or clients gone: see checkGone
		t := time.NewTimer(nap)
		defer t.Stop()
		tick = t.C
	} else if l.midEpoch() { // clients may all go, and nothing would say so
		t := time.NewTimer(goneCheckEvery)
		defer t.Stop()
		tick = t.C
	}
	select {
	case r := <-l.reqs:
		return l.client(r)
	case res := <-l.io.done:
		return l.readDone(res)
	case <-ctx.Done():
	case <-tick:
	}
	return nil
}

// busy reports whether something is in flight that the loop must notice
// quickly: clients waiting (perhaps for a peer's reply), reads, sends.
func (l *loop) busy() bool {
	return l.asks.pending() || !l.io.idle() || l.link.busy()
}

// finished reports whether the epoch is over for this rank: its clients
// and every peer are done, and nothing is in flight.
func (l *loop) finished() bool {
	return l.done && l.link.peersDone() && !l.link.busy() && l.io.idle() && !l.asks.pending()
}

// step does one round of everything and reports whether anything moved.
func (l *loop) step() (bool, error) {
	progress := false
	for range 64 {
		if res, ok := l.io.next(); ok {
			progress = true
			if err := l.readDone(res); err != nil {
				return progress, err
			}
			continue
		}
		select {
		case r := <-l.reqs:
			progress = true
			if err := l.client(r); err != nil {
				return progress, err
			}
			continue
		default:
		}
		break
	}
	if time.Since(l.goneChecked) >= goneCheckEvery && l.watching() {
		l.goneChecked = time.Now()
		if err := l.checkGone(); err != nil {
			return progress, err
		}
	}
	got, err := l.receive()
	if err != nil {
		return progress, err
	}
	stepped, err := l.stepAll()
	if err != nil {
		return progress, err
	}
	got = got || stepped
	sent, err := l.link.testSends()
	if err != nil {
		return progress, err
	}
	progress = progress || got || l.io.flush() || sent
	if !l.done && l.asks.clientsDone() {
		progress = true
		if err := l.sayDone(); err != nil {
			return progress, err
		}
	}
	return progress, nil
}

// readDone steps a finished chunk read.
func (l *loop) readDone(res readResult) error {
	l.io.inflight--
	defer l.io.stepped(&res) // its buffer is gone by then
	st := &l.stats
	if res.read.Epoch > l.epoch { // read ahead while this epoch drains
		st = &l.n.next.stats
	}
	if !res.resident && res.ch != nil {
		st.storageReads++
		st.storageBytes += res.ch.BytesRead
	}
	l.io.keep(&res)
	if res.err != nil { // not the data's fault: no memory to read into, say
		return fmt.Errorf("rt: rank %d: %w", l.n.me, res.err)
	}
	if err := l.n.damaged(&res); err != nil {
		return err
	}
	l.just = &res
	err := l.p.Step(proto.ReadDone{PC: res.read.PC, Epoch: res.read.Epoch, Damaged: l.n.damagedIn(&res)})
	if err == nil {
		err = l.carry()
	}
	l.keepOrCopy()
	l.just = nil
	return err
}

// sayDone tells the machine that this rank's clients will request nothing
// more; it tells every peer (proto.MsgDone, sent by carry).
func (l *loop) sayDone() error {
	l.done = true
	if err := l.p.Step(proto.ClientsDone{}); err != nil {
		return err
	}
	return l.carry()
}

// receive takes one message from a peer, if one is waiting.
func (l *loop) receive() (bool, error) {
	ok, src, tag, b, err := l.link.probe()
	if !ok {
		return false, err
	}
	l.n.peers.heardFrom(src)
	if err != nil {
		return true, err
	}
	switch tag {
	case tagMsg:
		if err := l.link.post(src, b); err != nil {
			return true, err
		}
		_, err := l.stepFrom(src)
		return true, err
	case tagTraining:
		l.n.training.heard(src)
		return true, nil
	case tagSync: // a rank whose epoch ended, at the barrier after it
		if l.n.me == 0 {
			l.n.peers.synced = append(l.n.peers.synced, src)
			return true, nil
		}
	}
	return true, fmt.Errorf("rt: rank %d: message with unknown tag %d from rank %d", l.n.me, tag, src)
}

// stepFrom steps what src sent, in order, as far as the files' bytes are
// in, and reports whether it stepped anything.
func (l *loop) stepFrom(src int) (bool, error) {
	stepped := false
	for {
		in, ok, err := l.link.next(src)
		if !ok || err != nil {
			return stepped, err
		}
		stepped = true
		if err := l.stepInbound(src, in); err != nil {
			return stepped, err
		}
	}
}

// stepInbound steps a peer's message whose files are in.
func (l *loop) stepInbound(src int, in inbound) error {
	for _, f := range in.files {
		if l.files[f.id] != nil {
			return fmt.Errorf("rt: rank %d: from rank %d: rank %d sent file %d, which this rank already holds", l.n.me, src, src, f.id)
		}
		l.files[f.id] = f
	}
	if err := l.p.Step(in.m); err != nil {
		return fmt.Errorf("rt: rank %d: from rank %d: %w", l.n.me, src, err)
	}
	return l.carry()
}

// stepAll steps what every peer sent whose files are in.
func (l *loop) stepAll() (bool, error) {
	if l.link.inboxed == 0 {
		return false, nil
	}
	stepped := false
	for src := range l.n.size {
		got, err := l.stepFrom(src)
		if stepped = stepped || got; err != nil {
			return true, err
		}
	}
	return stepped, nil
}
