package rt

import "math"

// What a rank costs in memory, as the kernel counts it: its Footprint
// (footprint.go) computed term by term, and the bounds its terms follow;
// cgroup.go checks it against the rank's memory cgroup and node.

// clientCounts is Config.Readers and Config.Procs, or their defaults: 1
// training process, and 4 readers for each (a DataLoader of 4 workers).
func (n *Node) clientCounts() (readers, procs int) {
	readers, procs = n.cfg.Readers, max(n.cfg.Procs, 1)
	if readers <= 0 {
		readers = 4 * procs
	}
	return readers, procs
}

// ReaderBytes is what one reader may hold in files answered in place
// beyond the rank's budget (the footprint counts it for each of
// --readers): a ring's worth (inFlight), in the arena's pages, and none
// when the budget holds the whole shard.
func (n *Node) ReaderBytes() int64 { return n.readerBytesAt(n.data.m.MemBytes(n.me)) }

// readerBytesAt is ReaderBytes with budget bytes of the rank's own.
func (n *Node) readerBytesAt(budget int64) int64 {
	return min(n.inArena(inFlight(n.data.maxSize)), n.inArena(max(n.data.facts.bytes-budget, 0)))
}

// arenaRatio is what the arena's pages take per byte of the shard's
// files: their slots and size classes (placed against bytes), and the
// arena's slack.
func (n *Node) arenaRatio() float64 {
	return ratio(n.data.facts.placed, n.data.facts.bytes) * (1 + arenaSlack)
}

// inArena is what b bytes of the shard's files take in the arena.
func (n *Node) inArena(b int64) int64 { return int64(float64(b) * n.arenaRatio()) }

// Readers is the readers the rank's footprint counts (Config.Readers).
func (n *Node) Readers() int { r, _ := n.clientCounts(); return r }

// RingBytes is the data ring of each client, for files of at most
// largest bytes: room for a record of such a file, or of 128 KiB when
// that is less, in every slot (64) and one more (a 32-byte header, the
// bytes, rounded up to 64), at least 4 MiB and at most 64 MiB, and always
// twice the largest record (one may take half the ring). A file in the
// arena reaches the client as its place (a record of 64 bytes), but
// counts as if copied in the ring's flow control: the ring's size bounds
// the files a client was answered and has not released, which stay in the
// arena. So: 64 files of 110 KB in flight (a ring of 4 MiB let a
// DataLoader worker have 37, and served 5 % fewer files/s), 8 of 1 MB
// (64 of them, 64 MiB a client, would hold 320 MiB beside --mem for a
// DataLoader of 4 workers). What a ring's own pages cost is what it holds
// at once (ringCost), since the rank rewinds it.
func RingBytes(largest int64) int64 {
	const grain = 4096
	b := max(65*ringRecord(min(largest, 128<<10)), 4<<20, 2*ringRecord(largest))
	return (b + grain - 1) / grain * grain
}

// ringRecord is the room a record of n bytes takes in a ring: a 32-byte
// header and the bytes, rounded up to 64 (shm's recordHeader and
// recordAlign).
func ringRecord(n int64) int64 { return (32 + n + 63) &^ 63 }

// ringCost is what a client's ring costs once written: the rank rewinds
// a ring it finds empty past its first RingRewind bytes (shm.RewindAt),
// so it holds that, its header, and the records in flight at once: one
// per slot (64) and one more, each a file's place in the arena (64
// bytes) or a copy of another rank's file of less than 32 KiB. At most
// RingBytes.
func ringCost(largest int64, ranks int) int64 {
	rec := int64(64)
	if ranks > 1 {
		rec = ringRecord(min(largest, 32<<10))
	}
	return min(RingBytes(largest), RingRewind+65*rec+8<<10)
}

// inFlight is what the files a client was answered in place and has not
// released hold in the arena at most, beside the budget (which frees a
// file's bytes once it is answered, to read more): the ring's flow
// control counts such a file as if it were copied into the ring, so a
// ring's worth of them, or 65 of the largest file when that is less (a
// ring has 64 slots). At most the part of the shard the budget does not
// hold: none when it holds the whole shard.
func inFlight(largest int64) int64 { return min(RingBytes(largest), 65*largest) }

// ReceivedBytes is what one reader may hold of the files of other ranks
// it was answered in place and has not released, in the buffers they
// were received into (recvPool's, lent from the memory shared with the
// clients), which leave --remote-mem once answered: the rank takes a
// reader's reads only while the files it was answered and holds, and
// each read not yet answered counted as the dataset's largest file, fit
// in its ring's bytes (shm's room; one read when it holds none). So a
// ring's worth, or the largest file, in the pages of those buffers
// (power-of-two classes, against the bytes of the files they hold: the
// shard's files of 32 KiB and more as a sample of the others', or twice
// their bytes, the most, when it has none), and the arena's slack. None
// with one rank, or when every file of the dataset is received into Go
// memory, and copied into the rings.
func (n *Node) ReceivedBytes() int64 {
	if n.size < 2 || !lentClass(sizeClass(int(n.data.largest))) {
		return 0
	}
	per := 2.0
	if mf := n.data.facts; mf.lent > 0 {
		per = ratio(mf.lentRecvd, mf.lent)
	}
	return int64(float64(max(RingBytes(n.data.maxSize), n.data.largest)) * per * (1 + arenaSlack))
}

// RingRewind is shm.RewindAt (rt cannot import shm; a test holds them
// equal).
const RingRewind = 256 << 10

// handCapAt bounds the bytes of the files handed on by DataLoader
// workers that the training processes of a rank with budget hold, all
// together (shm.Options.HandCap): Config.HandMemBytes, or by default the
// batches a DataLoader has in flight (handBatches of the shard's mean
// file for each reader), or an eighth of the budget when that is more,
// at least 8 MiB and at most 1 GiB, and no more than can be handed on
// (handableBytes). Beyond it the training processes get copies, which cost
// more memory than the files they copy, and CPU: with 1 MB files and
// the bound at an eighth of the budget (99 MiB), the loader benchmark's
// DataLoader held 2.1 GiB and delivered 207 files/s; with it at half
// (397 MiB), 1.5 GiB and 360 files/s.
// What fitsCgroup may lower it to, to fit the memory cgroup (fitHanded),
// is n.data.handFit. A single rank whose budget holds its whole shard
// hands every file on: its files stay in memory for every epoch, so
// those handed on take nothing beyond them, and a copy costs CPU (with
// 1 MB files on one node holding them, the default bound sent a fifth
// of them as copies, at 9 times the CPU per file: BENCHMARKS.md, "One
// rank holding its shard hands every file on").
func (n *Node) handCapAt(budget int64) int64 {
	if n.cfg.HandMemBytes >= 0 {
		return n.cfg.HandMemBytes
	}
	if n.holdsShard(budget) {
		return math.MaxInt64
	}
	if fit := n.data.handFit; fit > 0 {
		return min(fit, n.handRule(budget))
	}
	return n.handRule(budget)
}

// handRule is handCapAt's default, for budget bytes.
func (n *Node) handRule(budget int64) int64 {
	mf := n.data.facts
	readers, _ := n.clientCounts()
	inFlight := int64(float64(readers*handBatches) * float64(mf.bytes) / float64(max(mf.files, 1)))
	return min(max(budget/8, inFlight, 8<<20), 1<<30, n.handableBytes())
}

// handableBytes bounds the files that can be handed on: with one rank,
// its shard's that can (Handable); with several, the training processes
// also get other ranks' files, so nothing.
func (n *Node) handableBytes() int64 {
	if n.size == 1 {
		return n.data.facts.handable
	}
	return math.MaxInt64
}

// holdsShard reports whether a budget of budget bytes holds the rank's
// whole shard when it is the only rank: its files then stay in memory
// from epoch to epoch (proto's KeepBytes) and are never read again, so
// the files handed on take nothing beyond them. Below the shard they
// may: while the training processes still hold files of an epoch, the
// next one reads their chunks again, into other buffers. With several
// ranks the training processes also get other ranks' files, in buffers
// of their own.
func (n *Node) holdsShard(budget int64) bool {
	return n.size == 1 && budget >= n.data.facts.bytes
}

// handBatches is the files each DataLoader worker (reader) has in
// flight: 2 batches of 64 ahead (PyTorch's prefetch_factor); 512 for
// the default 4 readers.
const handBatches = 2 * 64

// HandCap is the bound on this rank's files handed on (handCapAt).
func (n *Node) HandCap() int64 { return n.handCapAt(n.data.m.MemBytes(n.me)) }

// HandBound is HandCap, and whether it bounds anything: not for a single
// rank whose budget holds its shard, without --hand-mem (handCapAt's
// math.MaxInt64: every file that can be is handed on).
func (n *Node) HandBound() (int64, bool) {
	c := n.HandCap()
	return c, c < math.MaxInt64
}

// Handable reports whether a DataLoader worker may hand a file of size
// bytes on to its training process in place: one of 32 KiB or more, or
// of whole pages, has pages of its own in the arena (shm's slabMax);
// smaller ones share theirs, and the training process gets a copy.
func Handable(size int64) bool { return size >= 32<<10 || (size > 0 && size%4096 == 0) }

// placer is a Site.Memory that says what it lends for n bytes.
type placer interface{ Placed(n int64) int64 }

// memFacts are what the footprint needs of the shard, from its file
// sizes: their number and bytes, and the bytes the memory lends them
// (placed) and lends them when received from other ranks (received).
type memFacts struct {
	files                int
	bytes, placed, recvd int64
	// written: the bytes of the places' pages the files write (a slot, or
	// the file's pages at the start of its place)
	written int64
	// handable: the bytes of the files a DataLoader worker can hand on
	// in place (Handable); lent and lentRecvd: the bytes of those
	// received into buffers lent from the memory (recvLentMin), and of
	// those buffers
	handable, lent, lentRecvd int64
}

// newMemFacts sums the shard's file sizes as mem lends them.
func newMemFacts(sizes []int64, mem any) memFacts {
	f := memFacts{files: len(sizes)}
	p, ok := mem.(placer)
	for _, s := range sizes {
		f.bytes += s
		if Handable(s) {
			f.handable += s
		}
		placed := s
		if ok {
			placed = p.Placed(s)
		}
		f.placed += placed
		f.written += min(placed, pageUp(s))
		cl := sizeClass(int(s))
		c := int64(1) << cl // recvPool's buffer
		if lentClass(cl) {
			if ok {
				c = p.Placed(c)
			}
			f.lent += s
			f.lentRecvd += c
		}
		f.recvd += c
	}
	return f
}

// ratio is placed bytes per byte of the shard's files (1 when it has none).
func ratio(placed, bytes int64) float64 {
	if bytes <= 0 {
		return 1
	}
	return float64(placed) / float64(bytes)
}

// footprintAt is the rank's footprint with budget bytes of its own
// files and remote of other ranks'.
func (n *Node) footprintAt(budget, remote int64) Footprint {
	mf := n.data.facts
	f := Footprint{Budget: budget, Shard: mf.bytes, Files: mf.files, OwnRatio: n.arenaRatio(),
		ReadMem: n.readMem(), Reads: n.readsHeld(), MaxChunk: n.data.maxChunk, Process: ProcessBytes}
	held := min(budget, mf.bytes)
	mean := max(float64(mf.bytes)/float64(max(mf.files, 1)), 1)
	records := func(b int64) int64 { return int64(float64(b) / mean * heldFileBytes) }
	f.Own, f.Records, f.Held = n.inArena(held), records(held), int(float64(held)/mean)
	f.Written = int64(float64(held) * ratio(mf.written, mf.bytes))
	if n.size > 1 {
		f.RemoteMem = remote
		f.Remote = int64(float64(remote)*ratio(mf.recvd, mf.bytes)) + records(remote)
		f.MPI = mpiHeld(n.size, n.data.maxSize, n.data.largest)
	}
	if n.cfg.Consume == 0 {
		f.Readers, f.Procs = n.clientCounts()
		f.RingClients = f.Readers + 2*f.Procs
		f.Rings = int64(f.RingClients) * ringCost(n.data.maxSize, n.size)
		// only files the budget does not keep: none when it holds the shard
		f.ReaderBytes = n.readerBytesAt(budget)
		f.Answered = min(int64(f.Readers)*f.ReaderBytes, n.inArena(mf.bytes-held))
		f.Received = int64(f.Readers) * n.ReceivedBytes()
		if mf.handable > 0 && !n.holdsShard(budget) {
			f.Handed = n.inArena(min(n.handCapAt(budget), n.handableBytes()))
		}
	}
	f.Tables = int64(mf.files) * shardFileBytes
	f.DatasetFiles = n.data.files
	f.Dataset = int64(f.DatasetFiles) * datasetFileBytes
	if n.measuresOrder() {
		f.Order = int64(f.DatasetFiles) * orderFileBytes
	}
	if n.site.Order != nil || n.measuring() {
		// every rank records the file at each of its positions
		f.OrderOut = int64((f.DatasetFiles+n.size-1)/n.size) * orderShareBytes
	}
	if n.site.Order != nil && n.me == 0 {
		f.OrderOut += int64(f.DatasetFiles) * orderOutFileBytes
	}
	return f
}

// Footprint is this rank's footprint, on its budget.
func (n *Node) Footprint() Footprint {
	return n.footprintAt(n.data.m.MemBytes(n.me), n.remoteBytes())
}

// readsHeld is what the chunk reads in flight hold at most: as many
// buffers as readMem allows at once (each a chunk rounded up to a MiB;
// at least one, at most one per I/O worker and the one the loop steps),
// of which each holds the pages of the largest chunk read into it (its
// mapping's pages are taken as written).
func (n *Node) readsHeld() int64 {
	bufs := min(max(n.readMem()/mibUp(n.data.maxChunk), 1), int64(n.cfg.IOWorkers)+1)
	return bufs * pageUp(n.data.maxChunk)
}

// pageUp rounds n bytes up to a page.
func pageUp(n int64) int64 { return (n + 4095) &^ 4095 }

// readMem bounds the bytes of the chunk reads in flight (ioPool.flush):
// Config.ReadMemBytes, or IOWorkers buffers of the largest chunk, at most
// DefaultReadMem. A read's buffer is its chunk rounded up to a MiB (see
// chunk's buffer pool).
func (n *Node) readMem() int64 {
	if n.cfg.ReadMemBytes > 0 {
		return n.cfg.ReadMemBytes
	}
	return min(int64(n.cfg.IOWorkers)*mibUp(n.data.maxChunk), DefaultReadMem)
}

// mibUp rounds n bytes up to a MiB.
func mibUp(n int64) int64 { return (n + 1<<20 - 1) >> 20 << 20 }

// remoteAt is --remote-mem with budget bytes of the rank's own: a tenth
// of it by default.
func (n *Node) remoteAt(budget int64) int64 {
	if n.cfg.RemoteMemBytes < 0 {
		return budget / 10
	}
	return n.cfg.RemoteMemBytes
}
