package rt

import (
	"sync"
	"sync/atomic"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// readResult is a finished chunk read, and then what the loop kept of it.
type readResult struct {
	read proto.Read
	ch   *chunk.Chunk
	buf  *chunkBuf
	err  error
	// damage lists the files of the chunk that are damaged on storage
	// (left out of ch), header the damage of its header and table, if
	// any; retried says that a first read found damage, so the chunk was
	// read again (what is here is the last read's: see readChunk).
	damage  []chunk.Damage
	header  *chunk.Damage
	retried bool
	// transient is what a first read found damaged when a later read
	// found the chunk intact.
	transient *chunk.Damage
	// staged is the damage a staged copy held when the chunk was read
	// from the source instead (fallback), stagedFrom the source's chunk
	// file; source says why the source could not stand in for a
	// damaged copy.
	staged     *chunk.Damage
	stagedFrom string
	source     error
	// replaced is set when the dataset on storage is no longer the one
	// opened (Node.replaced, asked by the worker: it reads the
	// manifests), asked when a read found damage and by each epoch's
	// first read: chunk files kept open (Config.OpenFiles) read on after
	// a pack --force replaced them, and find no damage.
	replaced error
	// resident: the chunk came from memory, not storage. kc, set for a
	// read that keeps its chunk and for one answered from memory, holds
	// the files' own buffers, which its files take (loop.load).
	resident bool
	kc       *keptChunk
	// kept are the files proto loaded from the chunk.
	kept      []*file
	keptBytes int64
}

// ioPool runs chunk reads in worker goroutines, at most workers at once,
// and within readMem bytes. Only the loop calls its methods.
type ioPool struct {
	queue    chan proto.Read
	done     chan readResult
	backlog  []proto.Read
	inflight int // reads added and not yet stepped back
	// reading is the bytes of the reads given to the workers that the
	// loop has not yet let go of (readDone): at most readMem, or one read
	// of any size. bytes gives a chunk's, as its buffer takes them.
	reading, readMem int64
	bytes            func(pc int) int64
	wg               sync.WaitGroup
	// resident holds the chunks read to be kept (proto.Read.Keep): the
	// chunks an epoch reads last stay for the next, which begins with
	// them (proto.WindowInput.Resident), their files each in a buffer of
	// its own from mem (read into it, or copied out of the read). A read of a resident
	// chunk is answered from memory, and waits in ready; one that does
	// not keep it takes it out.
	resident map[int]*keptChunk
	mem      chunk.Memory
	ready    []readResult
	// waits holds, per chunk being read from storage to be kept, the
	// later reads of it that wait for that read (the next epoch's, read
	// ahead): they are answered from memory.
	waits map[int][]proto.Read
	watch *storageWatch
	// asked is the last epoch whose first read asked whether the
	// dataset was replaced.
	asked atomic.Int64
}

// newIOPool starts workers reading chunks of shard, and of src in place
// of a damaged staged copy (nil: none); w says what they do while
// storage cannot be reached. Reads put each file into a buffer of its
// own from mem where the file system allows (readOnce); the files of
// chunks read to be kept are copied into mem otherwise (nil: Go memory).
func newIOPool(shard *chunk.Home, src *fallback, firstPC, workers int, w *storageWatch, replaced func(gone bool) error, mem chunk.Memory) *ioPool {
	// done has no room: a finished read's buffer waits in its worker, so
	// that no more than workers chunk buffers are ever held by reads; the
	// loop takes results at once, and flush keeps them within readMem
	// bytes (Node.Footprint counts them).
	p := &ioPool{queue: make(chan proto.Read, workers), done: make(chan readResult), watch: w,
		resident: make(map[int]*keptChunk), waits: make(map[int][]proto.Read), mem: mem}
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for r := range p.queue {
				res := readChunk(shard, src, r, r.PC-firstPC, w, mem)
				if found := res.foundDamage(); found || p.firstOf(r.Epoch) {
					res.replaced = replaced(found)
				}
				p.done <- res
			}
		}()
	}
	return p
}

// firstOf reports whether a read of epoch is the first to ask.
func (p *ioPool) firstOf(epoch uint32) bool {
	for {
		a := p.asked.Load()
		if int64(epoch) <= a {
			return false
		}
		if p.asked.CompareAndSwap(a, int64(epoch)) {
			return true
		}
	}
}

// foundDamage reports whether the read found damage, on a first read or
// for good.
func (r *readResult) foundDamage() bool {
	return r.transient != nil || r.header != nil || len(r.damage) > 0
}

// readChunk reads chunk c whole. A read that finds a file damaged is
// made once more at once, since a fault on the way from storage may not
// repeat: what the second read finds stands, unless src, the source of
// a staged copy, has the chunk intact (fallback). A chunk file that
// cannot be opened or read is tried again while storage may come back
// (see storageWatch). With mem, each file is read into a buffer of its
// own from it (readOnce).
func readChunk(shard *chunk.Home, src *fallback, r proto.Read, c int, w *storageWatch, mem chunk.Memory) readResult {
	res := readTwice(shard, r, c, w.retry, mem)
	if len(res.damage) == 0 || res.err != nil || src == nil {
		return res
	}
	return src.standIn(res, r, c, w, mem)
}

// readTwice reads chunk c of shard whole through retry, and once more if
// the read finds damage.
func readTwice(shard *chunk.Home, r proto.Read, c int, retry func(func() error) error, mem chunk.Memory) readResult {
	var res readResult
	read := func() {
		res.err = retry(func() error { res = readOnce(shard, r, c, mem); return res.err })
	}
	if read(); len(res.damage) == 0 || res.err != nil {
		return res
	}
	first := res.damage[0]
	res.letGo()
	read()
	res.retried = true
	if len(res.damage) == 0 && res.err == nil {
		res.transient = &first
	}
	return res
}

// readOnce reads chunk c once: with mem, each file straight into a
// buffer of its own from it where the file system allows
// (chunk.Home.ReadInto), which the files take from the read without a
// copy (res.kc, one hold each: the read's); else whole, into one buffer
// (res.buf), from which loop.keepOrCopy copies the files kept.
func readOnce(shard *chunk.Home, r proto.Read, c int, mem chunk.Memory) readResult {
	var (
		ch     *chunk.Chunk
		damage []chunk.Damage
		err    error
		bufs   []*chunkBuf
	)
	if mem != nil {
		ch, damage, err = shard.ReadInto(c, func(i, n int) []byte {
			bufs = append(bufs, make([]*chunkBuf, max(0, i+1-len(bufs)))...)
			b, buf := lend(int64(n), mem)
			bufs[i] = buf
			return b
		})
	} else {
		ch, damage, err = shard.ReadWhole(c)
	}
	res := readResult{read: r, ch: ch, err: err}
	for i := range damage {
		if damage[i].Slot < 0 {
			res.header = &damage[i]
		} else {
			res.damage = append(res.damage, damage[i])
		}
	}
	for i, b := range bufs { // a damaged file's, or every file's when the chunk could not be read
		if b != nil && (ch == nil || ch.File(i) == nil) {
			b.release()
			bufs[i] = nil
		}
	}
	switch {
	case ch == nil:
	case ch.Scattered(): // a slot per file: the last ones may have had no buffer (empty, damaged)
		res.kc = &keptChunk{ch: ch, bufs: append(bufs, make([]*chunkBuf, ch.Slots()-len(bufs))...)}
	default:
		res.buf = newChunkBuf(ch)
	}
	return res
}

// letGo lets go of the read's buffers: its chunk's, or its hold on its
// files' own.
func (r *readResult) letGo() {
	if r.buf != nil {
		r.buf.release()
		r.buf = nil
	}
	if r.kc != nil {
		r.kc.release()
		r.kc = nil
	}
}

// add queues a read, or answers it from a resident chunk, or has it wait
// for the read of it under way that keeps it.
func (p *ioPool) add(r proto.Read) {
	p.inflight++
	if kc := p.resident[r.PC]; kc != nil {
		p.fromMemory(r, kc)
		return
	}
	if waits, ok := p.waits[r.PC]; ok {
		p.waits[r.PC] = append(waits, r)
		return
	}
	if r.Keep {
		p.waits[r.PC] = nil
	}
	p.backlog = append(p.backlog, r)
	p.flush()
}

// fromMemory answers r from resident chunk kc. A read that does not keep
// the chunk takes it out: its files then leave memory one by one.
func (p *ioPool) fromMemory(r proto.Read, kc *keptChunk) {
	kc.hold() // the read's, until its files took theirs
	if !r.Keep {
		delete(p.resident, r.PC)
		kc.release() // the pool's
	}
	p.ready = append(p.ready, readResult{read: r, ch: kc.ch, kc: kc, resident: true})
}

// flush hands queued reads to the workers while they have room, and
// the bytes in flight too (readMem; one read goes whatever its size).
func (p *ioPool) flush() bool {
	moved := false
	for len(p.backlog) > 0 {
		n := p.bytes(p.backlog[0].PC)
		if p.reading > 0 && p.reading+n > p.readMem {
			return moved
		}
		select {
		case p.queue <- p.backlog[0]:
			p.backlog = p.backlog[1:]
			p.reading += n
			moved = true
		default:
			return moved
		}
	}
	return moved
}

// stepped lets go of the bytes of a read from storage that the loop has
// stepped (readDone): its buffer is gone by then (loop.keepOrCopy).
func (p *ioPool) stepped(res *readResult) {
	if !res.resident {
		p.reading -= p.bytes(res.read.PC)
	}
}

func (p *ioPool) idle() bool { return p.inflight == 0 }

// next returns a finished read without waiting, if there is one.
func (p *ioPool) next() (readResult, bool) {
	if n := len(p.ready); n > 0 {
		res := p.ready[n-1]
		p.ready = p.ready[:n-1]
		return res, true
	}
	select {
	case res := <-p.done:
		return res, true
	default:
		return readResult{}, false
	}
}

// keep makes res's chunk resident when its read keeps it, its files
// copied out (res.kc), and then takes the reads that waited for it: from
// memory, or from storage again when the read failed.
func (p *ioPool) keep(res *readResult) {
	if res.resident {
		return
	}
	pc := res.read.PC
	if res.read.Keep && res.ch != nil && res.err == nil && p.resident[pc] == nil {
		if res.kc == nil {
			res.kc = newKeptChunk(res.ch, p.mem) // one hold: the pool's
		}
		res.kc.hold() // the read's (read into its files' own buffers: the pool's)
		p.resident[pc] = res.kc
	}
	waits := p.waits[pc]
	delete(p.waits, pc)
	for _, w := range waits {
		p.inflight-- // counted when it was added
		p.add(w)
	}
}

// close stops the workers once the reads in flight finished; their
// results are dropped.
func (p *ioPool) close() {
	close(p.watch.stop)
	close(p.queue)
	go func() {
		for res := range p.done {
			res.letGo()
		}
	}()
	p.wg.Wait()
	close(p.done)
	for _, kc := range p.resident {
		kc.release()
	}
	clear(p.resident)
}

// keptChunk is a chunk whose files are each in a buffer of their own:
// read into them (readOnce), or copied out of the read (copyOut) to keep
// the chunk from one epoch into the next. A file's memory goes back as
// soon as the last hold on it goes, and later reads of a kept chunk hand
// out the same buffers, without a copy.
type keptChunk struct {
	ch   *chunk.Chunk // its files in their buffers: nil for a damaged file
	bufs []*chunkBuf  // per slot, its file's buffer (nil: Go memory, or none)
}

// newKeptChunk copies the files of ch into buffers of their own from mem,
// each with one hold: the pool's.
func newKeptChunk(ch *chunk.Chunk, mem chunk.Memory) *keptChunk {
	files, bufs := make([][]byte, ch.Slots()), make([]*chunkBuf, ch.Slots())
	for i := range files {
		if data := ch.File(i); data != nil {
			files[i], bufs[i] = copyOut(data, mem)
		}
	}
	return &keptChunk{ch: chunk.Held(ch.Rank, ch.Index, files), bufs: bufs}
}

// hold takes a hold on each file's buffer, release lets go of one.
func (kc *keptChunk) hold() {
	for _, b := range kc.bufs {
		if b != nil {
			b.hold()
		}
	}
}

func (kc *keptChunk) release() {
	for _, b := range kc.bufs {
		if b != nil {
			b.release()
		}
	}
}
