package rt

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// loop is the event loop of one epoch. It runs on the serving goroutine,
// which alone calls into MPI and the machine (Node's collectives between
// epochs run there too); chunk reads run in I/O workers and clients talk
// to it through channels.
type loop struct {
	n       *Node
	p       proto.Machine
	comm    collectives.Comm
	io      *ioPool
	pool    *recvPool
	reqs    <-chan ClientEvent
	waiting map[int32]chan<- Delivery
	files   map[proto.FileID]*file
	just    *readResult // the read whose ReadDone is being carried out
	sends   []pendingSend
	stuck   []bool // per rank, scratch for testSends
	// inbox holds, per peer, what it sent that is not yet stepped, in
	// its order: messages whose files are still arriving, and what came
	// after them (see inbound).
	inbox   [][]inbound
	inboxed int // how many, over every peer
	epoch   uint32
	// traceLen is this rank's trace length; answered counts the positions
	// answered so far; ended is set when a client ended the epoch.
	traceLen, answered int
	ended              bool
	// asked marks the positions asked for; endedShare the shares whose
	// clients ended the epoch, dropping the positions the rank asked for
	// itself to end them (see end). endedEarly: a client ended the epoch,
	// whole or a share. goneChecked: when checkGone last ran.
	asked       []bool
	endedShare  map[Share]bool
	dropping    map[int32]bool
	endedEarly  bool
	goneChecked time.Time
	// order holds the file delivered at each position (Config.Order).
	order    []int32
	done     bool   // local clients finished; the machine told the peers (MsgDone)
	doneIn   int    // peers whose MsgDone of this epoch arrived
	doneFrom []bool // per rank, whether its MsgDone arrived
	// moved is when the loop last made progress; waitsWhat says what the
	// loop waits for, in peerWatch's messages
	moved     time.Time
	waitsWhat string
	stats     loopStats
	// start, cpu0: when the epoch began and the process's CPU time then;
	// first: when the first client request came; idleCPU: the CPU time
	// the process used in between.
	start, first  time.Time
	cpu0, idleCPU time.Duration
	// answered1: when the first answer went out
	answered1 time.Time
}

// markFirst notes the end of the idle stretch at the start of the epoch.
func (l *loop) markFirst() {
	l.first = time.Now()
	l.idleCPU = processCPU() - l.cpu0
}

// loopStats counts what the loop itself sees.
type loopStats struct {
	bytesOut                   int64 // bytes sent to peers
	remoteFiles, remoteBytes   int64 // delivered files other ranks sent
	storageReads, storageBytes int64 // chunk reads that went to storage
	// files delivered to clients, their bytes, and the sums of their
	// checksums and labels as their owners' indexes have them
	delivered, deliveredBytes, failed int64
	crcSum, labelSum                  int64
	// files left out as damaged, and the sums of their checksums and
	// labels
	skipped, skippedCRC, skippedLabel int64
}

// pendingSend is a send in flight to rank to; frame must live, and file
// keep its bytes, until it completes.
type pendingSend struct {
	req   collectives.Request
	to    int
	frame []byte
	file  *file
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
			if err := l.n.training.check(l.comm); err != nil {
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
// request while its clients wait, for r's word that it is done, for a
// send to r. While its own storage does not answer (storageWatch) it
// blames no peer.
func (l *loop) waitsFor(r int) bool {
	if l.io.watch.stuck() {
		return false
	}
	if len(l.waiting) > 0 && l.n.peers.owes(r) || l.done && !l.doneFrom[r] || l.inbox != nil && len(l.inbox[r]) > 0 {
		return true
	}
	for _, s := range l.sends {
		if s.to == r {
			return true
		}
	}
	return false
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
	return len(l.waiting) > 0 || !l.io.idle() || len(l.sends) > 0 || l.inboxed > 0
}

func (l *loop) finished() bool {
	return l.done && l.doneIn == l.n.size-1 && len(l.sends) == 0 && l.io.idle() && len(l.waiting) == 0 && l.inboxed == 0
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
	stepped, err := l.drainAll()
	if err != nil {
		return progress, err
	}
	got = got || stepped
	sent, err := l.testSends()
	if err != nil {
		return progress, err
	}
	progress = progress || got || l.io.flush() || sent
	if !l.done && (l.answered == l.traceLen || (l.ended && len(l.waiting) == 0)) {
		progress = true
		if err := l.sayDone(); err != nil {
			return progress, err
		}
	}
	return progress, nil
}

// client steps what a client said.
func (l *loop) client(ev ClientEvent) error {
	switch ev := ev.(type) {
	case Session:
		l.n.session(ev)
		l.n.readers.session(ev)
		return nil
	case Over:
		l.ended = true
		return nil
	case End:
		return l.endEpoch(ev)
	case Ask:
		return l.ask(ev)
	}
	return fmt.Errorf("rt: rank %d: unknown client event %T", l.n.me, ev)
}

// endEpoch takes an End: held when it is for a later epoch, ignored when
// for an epoch over or past the job's last.
func (l *loop) endEpoch(r End) error {
	if l.first.IsZero() {
		l.markFirst()
	}
	switch {
	case int64(r.Epoch) > int64(l.n.cfg.Epochs) || r.Epoch < l.epoch:
		return nil
	case r.Epoch > l.epoch:
		l.n.next.held = append(l.n.next.held, r)
		return nil
	}
	return l.end(r.Share)
}

// ask steps a client's ask for a position.
func (l *loop) ask(r Ask) error {
	if l.first.IsZero() {
		l.markFirst()
	}
	switch {
	case int64(r.Epoch) > int64(l.n.cfg.Epochs):
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: epoch %d is past the job's last, epoch %d (brandrt serve --epochs %d)", l.n.me, r.Epoch, l.n.cfg.Epochs, l.n.cfg.Epochs)})
		return nil
	case r.Epoch > l.epoch:
		l.n.next.held = append(l.n.next.held, r)
		return nil
	case r.Epoch < l.epoch:
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: epoch %d is over (this is epoch %d)", l.n.me, r.Epoch, l.epoch)})
		return nil
	}
	if err := l.n.readers.refusal(l.n.me, r, l.epoch); err != nil {
		r.fail(Delivery{Sn: r.Sn, Err: err})
		return nil
	}
	if _, dup := l.waiting[r.Sn]; dup {
		r.fail(Delivery{Sn: r.Sn, Err: fmt.Errorf("rt: rank %d: position %d is already requested", l.n.me, r.Sn)})
		return nil
	}
	if err := l.p.Step(proto.ClientRequest{Sn: r.Sn}); err != nil {
		r.fail(Delivery{Sn: r.Sn, Err: err})
		return nil
	}
	l.waiting[r.Sn] = r.Reply
	l.asked[r.Sn] = true
	l.n.readers.took(r)
	return l.carry()
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
	ok, st, err := l.comm.Iprobe()
	if !ok || err != nil {
		return false, err
	}
	l.n.peers.heardFrom(st.Source)
	b := make([]byte, st.Len)
	if err := l.comm.Recv(b, st.Source, st.Tag); err != nil {
		return true, err
	}
	switch st.Tag {
	case tagMsg:
		if err := l.message(st.Source, b); err != nil {
			return true, err
		}
		return true, l.drain(st.Source)
	case tagTraining:
		l.n.training.heard(st.Source)
		return true, nil
	case tagSync: // a rank whose epoch ended, at the barrier after it
		if l.n.me == 0 {
			l.n.peers.synced = append(l.n.peers.synced, st.Source)
			return true, nil
		}
	}
	return true, fmt.Errorf("rt: rank %d: message with unknown tag %d from rank %d", l.n.me, st.Tag, st.Source)
}

// inbound is what a peer sent, waiting to be stepped: a message (m) whose
// files' bytes are still arriving, one receive each (reqs, nil once
// complete), and the messages after it. The loop never waits for the
// bytes: it posts the receives (MPI matches them in the order the peer
// sent) and steps the message once they are in, and what the peer sent
// after it, after it.
type inbound struct {
	m     proto.Message
	files []*file
	reqs  []collectives.Request
}

// message takes a peer's frame: it posts a receive, into a recvPool
// buffer, for each file whose bytes follow, and queues the message.
func (l *loop) message(src int, b []byte) error {
	m, files, err := decodeFrame(b)
	if err == nil && int(m.From) != src {
		err = fmt.Errorf("rt: message from rank %d claims to come from rank %d", src, m.From)
	}
	in := inbound{m: m, files: files, reqs: make([]collectives.Request, len(files))}
	items := cargo(&m)
	for i, f := range files {
		if err != nil {
			break
		}
		if !items[i].bytes { // damaged on its home's storage
			continue
		}
		if f.data, err = l.pool.get(int(items[i].size)); err == nil {
			f.pool = l.pool
			in.reqs[i], err = l.comm.Irecv(f.data, src, tagData)
		}
	}
	if err != nil {
		return fmt.Errorf("rt: rank %d: from rank %d: %w", l.n.me, src, err)
	}
	l.queue(src, in)
	return nil
}

// queue adds what src sent to its inbox.
func (l *loop) queue(src int, in inbound) {
	if l.inbox == nil {
		l.inbox = make([][]inbound, l.n.size)
	}
	l.inbox[src] = append(l.inbox[src], in)
	l.inboxed++
}

// drain steps what src sent, in order, as far as the files' bytes are in.
func (l *loop) drain(src int) error {
	for len(l.inbox[src]) > 0 {
		in := &l.inbox[src][0]
		for i, req := range in.reqs {
			if req == nil {
				continue
			}
			done, _, err := req.Test()
			if err != nil {
				return fmt.Errorf("rt: rank %d: a file from rank %d: %w", l.n.me, src, err)
			}
			if !done {
				return nil
			}
			in.reqs[i] = nil
		}
		next := *in
		l.inbox[src] = l.inbox[src][1:]
		l.inboxed--
		if err := l.stepInbound(src, next); err != nil {
			return err
		}
	}
	return nil
}

// stepInbound steps a peer's message whose files are in. A peer's done
// (proto.MsgDone) of this epoch also counts here: the loop's epoch ends
// once every peer's is in.
func (l *loop) stepInbound(src int, in inbound) error {
	if in.m.Type == proto.MsgDone && in.m.Epoch == l.epoch && !l.doneFrom[src] {
		l.doneIn++
		l.doneFrom[src] = true
	}
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

// drainAll steps what every peer sent whose files are in.
func (l *loop) drainAll() (bool, error) {
	if l.inboxed == 0 {
		return false, nil
	}
	before := l.inboxed
	for src := range l.inbox {
		if err := l.drain(src); err != nil {
			return true, err
		}
	}
	return l.inboxed < before, nil
}

// testSends forgets the sends that completed. Sends to one rank complete
// in about the order they started, and testing one that has not
// completed costs a turn of MPI's progress engine; so per rank it stops
// at the first that has not. A later one that did complete is found on
// a later round.
func (l *loop) testSends() (bool, error) {
	if l.stuck == nil {
		l.stuck = make([]bool, l.n.size)
	}
	clear(l.stuck)
	kept := l.sends[:0]
	for _, s := range l.sends {
		done := false
		if !l.stuck[s.to] {
			var err error
			if done, _, err = s.req.Test(); err != nil {
				return false, err
			}
			l.stuck[s.to] = !done
		}
		if !done {
			kept = append(kept, s)
		} else if s.file != nil {
			s.file.release()
		}
	}
	moved := len(kept) < len(l.sends)
	clear(l.sends[len(kept):])
	l.sends = kept
	return moved, nil
}
