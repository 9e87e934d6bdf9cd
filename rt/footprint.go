package rt

import (
	"fmt"
	"strings"
)

// The footprint (what a rank costs in memory, as the kernel counts it),
// how it is said, and the measured constants of its terms; budget.go
// computes it for a rank.

// Footprint is the most memory a rank takes, term by term, in bytes:
// what its memory cgroup must allow. Each term is bounded by the flag
// it names; the constants beside them (ProcessBytes, shardFileBytes,
// heldFileBytes) were measured (README, "Memory is what the kernel
// counts").
type Footprint struct {
	// Budget is --mem, Shard the bytes of the rank's shard.
	Budget, Shard int64
	// Own is the rank's own files in memory: as much of its shard as the
	// budget holds, in the pages the arena lends them (OwnRatio: the
	// shard's files rounded up to their slots and size classes, against
	// their bytes, and the arena's slack), and Records the runtime's
	// record of each (Held of them).
	Own, Records int64
	OwnRatio     float64
	Held         int
	// Written is the part of Own its files write (a slot each, or their
	// pages at the start of their places): what the kernel counts of it
	// while no place is lent twice, as where the budget holds the shard.
	// Not a term of the total.
	Written int64
	// Remote is files of other ranks held ahead of their requests:
	// --remote-mem (RemoteMem) in the buffers they are received into,
	// and a record of each. None with one rank.
	Remote, RemoteMem int64
	// MPI is what MPI holds of the files in flight between ranks (none
	// with one rank): copies of what this rank sent and a peer has not
	// yet taken, and what its peers sent it before its receives (each
	// bounded by the rank's sends in flight: mpiHeld).
	MPI int64
	// Reads is the chunk reads in flight: --read-mem (ReadMem), or the
	// largest chunk (MaxChunk), which may go alone.
	Reads, ReadMem, MaxChunk int64
	// Rings is the shared-memory rings of RingClients clients (Readers
	// readers, two for each of Procs training processes), what each holds
	// at once (ringCost); Answered the files the readers were answered in
	// place and have not released yet, ReaderBytes each (a ring's worth:
	// inFlight); Handed the files their workers handed on to training
	// processes (HandCap; with one rank, no more than its shard has of
	// files that can be, and none when the budget holds the shard);
	// Received the files of other ranks the readers were answered in
	// place, in the buffers they were received into, which leave
	// --remote-mem once answered (a ring's worth each, or one file alone
	// when larger: Node.ReceivedBytes). None with in-process readers
	// (--consume).
	Rings, Answered, Received, Handed, ReaderBytes int64
	RingClients, Readers, Procs                    int
	// Tables is what grows with the files of the shard (its index, the
	// plan, per-file tables: shardFileBytes each), Files their number;
	// Dataset what grows with every file of the dataset, DatasetFiles
	// (datasetFileBytes each: their sizes, the epoch's traces, the count
	// of each file's deliveries); Order what rank 0 holds to measure the
	// order (orderFileBytes per file of the dataset; only on rank 0 of
	// the window policy with --batch); OrderOut what the rank holds to
	// gather each epoch's order to rank 0, for it to be handed over
	// (Site.Order: serve --order-out) or measured: every rank the file
	// at each of its positions (orderShareBytes each), and rank 0, when
	// it is handed over, the whole order (orderOutFileBytes per file of
	// the dataset); Process the rest of the process (ProcessBytes).
	Tables, Dataset, Order, OrderOut, Process int64
	Files, DatasetFiles                       int
}

// Total is the whole footprint, in whole pages (as a cgroup's limit).
func (f Footprint) Total() int64 {
	return pageUp(f.Own + f.Records + f.Remote + f.MPI + f.Reads + f.Rings + f.Answered + f.Received + f.Handed + f.Tables + f.Dataset + f.Order + f.OrderOut + f.Process)
}

// GoLimit is what the rank's Go runtime may hold (its memory limit:
// runtime/debug.SetMemoryLimit): the footprint less the terms held
// outside Go's heap, the memory the rank shares with its clients (its
// own files, the rings, the files answered in place and handed on),
// MPI's buffers, the chunk reads in flight (anonymous mappings, or the
// shared memory they read into) and the part of the process that is not
// Go's. Go's collector keeps its heap within it; without a limit the
// heap grows to twice what it holds live between collections, whatever
// the footprint. (Remote stays in it whole, though receive buffers of
// 64 KiB and more are lent from the shared memory: a looser limit.)
func (f Footprint) GoLimit() int64 {
	return f.Total() - f.Own - f.Rings - f.Answered - f.Received - f.Handed - f.MPI - f.Reads - (f.Process - goProcessBytes)
}

// String says the footprint term by term: "the rank needs 208 MiB of
// memory: …".
func (f Footprint) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the rank needs %s (%d bytes) of memory: %s for its own files in shared memory (--mem %s", mib(f.Total()), f.Total(), mib(f.Own), mib(f.Budget))
	if f.Shard < f.Budget {
		fmt.Fprintf(&b, ", its shard has %s", mib(f.Shard))
	}
	fmt.Fprintf(&b, "; %.2f× their bytes), %s for the records of the %s files that holds", f.OwnRatio, mib(f.Records), count(f.Held))
	if f.RemoteMem > 0 {
		fmt.Fprintf(&b, ", %s of other ranks' (--remote-mem %s)", mib(f.Remote), mib(f.RemoteMem))
	}
	if f.MPI > 0 {
		fmt.Fprintf(&b, ", %s for MPI's buffers of the files in flight between ranks", mib(f.MPI))
	}
	fmt.Fprintf(&b, ", %s for its chunk reads in flight (--read-mem %s; chunks up to %s)", mib(f.Reads), mib(f.ReadMem), mib(f.MaxChunk))
	if f.RingClients > 0 {
		fmt.Fprintf(&b, ", %s for the rings of %d readers (DataLoader workers, or training processes without; --readers) and of %s (two each): %d rings of %s",
			mib(f.Rings), f.Readers, plural(f.Procs, "training process", "training processes"), f.RingClients, mib(f.Rings/int64(f.RingClients)))
		if f.Answered > 0 {
			fmt.Fprintf(&b, ", %s for the files the readers were answered in place and hold (at most a ring's worth each, %s)",
				mib(f.Answered), mib(f.ReaderBytes))
		}
		if f.Received > 0 {
			fmt.Fprintf(&b, ", %s for the files of other ranks they were answered in place and hold (at most a ring's worth each, or one file)", mib(f.Received))
		}
	}
	if f.Handed > 0 {
		fmt.Fprintf(&b, ", %s for files DataLoader workers handed on to training processes", mib(f.Handed))
	}
	fmt.Fprintf(&b, ", %s for the tables of its %s files, %s for what every rank keeps of each of the dataset's %s files (sizes, traces, deliveries)", mib(f.Tables), count(f.Files), mib(f.Dataset), count(f.DatasetFiles))
	if f.Order > 0 {
		fmt.Fprintf(&b, ", %s for measuring each epoch's order (rank 0; --batch 0 leaves it out)", mib(f.Order))
	}
	if f.OrderOut > 0 {
		fmt.Fprintf(&b, ", %s for gathering each epoch's order to rank 0 (--order-out, or --batch)", mib(f.OrderOut))
	}
	fmt.Fprintf(&b, " and %s for the process (the runtime, MPI and mpirun)", mib(f.Process))
	return b.String()
}

// count writes n with thousands separators.
func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The measured constants of the footprint (one rank, cgroup v1, page
// cache dropped; README, "Memory is what the kernel counts"):
// ProcessBytes is a rank's process with a shard of a few files (52–53 MiB
// under mpirun: its libraries and mpirun's are page cache charged to the
// cgroup, which the kernel may drop if it must), goProcessBytes the part
// of it that is Go's runtime and heap (its memory limit counts it);
// shardFileBytes and datasetFileBytes what each file of the shard and of
// the dataset adds (one rank: 300 B per file with 200,000 files,
// together; on 2 and 4 ranks of a dataset of 1.6 M files, Go's heap held
// 20–24 B per file of the dataset live, twice that between collections:
// its sizes, the epoch's traces and the count of its deliveries),
// orderFileBytes what rank 0's measure of the order adds per file of the
// dataset (counted: the order gathered and its copy, the epoch before's
// order and traces, 4 B each, and one half of the measure's tables, 12 B:
// 28 B live at once; proto's BenchmarkMeasureMix allocates 24.5 B per file
// for both halves), orderOutFileBytes what rank 0 adds to hand the order
// over (the gathered order and its copy, 4 B each, twice that between
// collections; 15–27 B measured at 1.6 M files), orderShareBytes what
// every rank holds to gather it (the file at each of its positions),
// heldFileBytes what each file
// held in memory adds beside its bytes (its record, and Go's heap around
// it: 530 B); arenaSlack the arena's pages touched beyond those it lends
// at once (its free places between files: 3 % with 100 KB files, 5 %
// with 1 MB).
const (
	ProcessBytes      = 54 << 20
	goProcessBytes    = 16 << 20
	shardFileBytes    = 232
	datasetFileBytes  = 48
	orderFileBytes    = 32
	orderOutFileBytes = 24
	orderShareBytes   = 4
	heldFileBytes     = 560
	arenaSlack        = 0.06
)

// plural writes n and the noun in its number: "1 training process".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
