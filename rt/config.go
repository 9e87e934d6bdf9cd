package rt

import (
	"errors"
	"fmt"
	"time"

	"github.com/brandrt/brandrt/proto"
)

// Config is what the user chose for one rank of the runtime: flags of
// `brandrt serve` map onto its fields one to one. What the rank finds
// where it runs (its node, its cgroup, staged copies) and the services
// it is given (a log, a file system, shared memory, callbacks) are its
// Site, beside it.
type Config struct {
	// Chunks is the packed dataset's directory; "{rank}" in it is replaced
	// by the rank, for node-local copies (each holding the shard of its
	// rank: the job then has as many ranks as the dataset has shards).
	// The job's ranks split the dataset's shards between them
	// (chunk.Assign).
	Chunks string
	// Mem is the rank's budget for its own files in memory (its local
	// VCs): bytes, or a share of its shard or of its memory cgroup.
	Mem Budget
	// RemoteMemBytes bounds the bytes of files other ranks push ahead of
	// time into this rank's memory (its buffer VCs); −1 means a tenth of
	// the rank's budget.
	RemoteMemBytes int64
	// MemLeaveBytes is what the rank leaves of its memory cgroup for the
	// other processes in it (--leave): training processes launched in the
	// same cgroup (a Slurm job step, a container). Open checks the
	// footprint, and takes --mem P%cgroup, against the limit less this.
	MemLeaveBytes int64
	// Policy is PolicyWindow or PolicyPaper (in its Variant). Window is
	// how many positions ahead files of other ranks are prefetched, for
	// either.
	Policy  Policy
	Variant proto.Variant
	Window  int
	// Ramp is, for the window policy, the chunks each rank reads before
	// the first epoch's first answer (proto.WindowInput.Ramp): simulate's
	// --ramp, which changes the order delivered.
	Ramp int
	// Keep is, for the window policy, the share of a rank's budget that
	// keeps chunks in memory across epochs when the budget holds part of
	// its shard, in [0, 1] (proto.WindowInput.Keep): simulate's --keep.
	Keep float64
	// Seed drives the traces (with the epoch) and the refill choices.
	Seed uint64
	// ClientTraces makes every epoch wait for its trace from the clients
	// (Node.Traces) instead of generating it from Seed.
	ClientTraces bool
	// MixBatch is the batch size in which rank 0 measures how random each
	// epoch's order is beside a shuffle (EpochStats.Order): the window
	// policy with the seed's traces. 0 measures nothing.
	MixBatch int
	// Epochs is the number of epochs to serve.
	Epochs int
	// Resume makes the rank insist, before its first epoch, on a client
	// saying at which epoch and position the job resumes (Node.Starts): the
	// window policy plans the epochs before it again and serves the rest
	// of the epoch exactly as the interrupted job would have. Without it a
	// rank that can resume (MayResume) waits for its clients' first word
	// instead: a start offer resumes there, a read from a client that
	// offers none starts the job fresh.
	Resume bool
	// Fresh starts epoch 1 at once, reading ahead while the training
	// starts, instead of waiting for the clients' first word: the job
	// cannot resume (start offers are refused).
	Fresh bool
	// FootprintOnly opens the dataset, says the rank's footprint (the
	// memory it would take: Node.Footprint) and what its memory cgroup
	// allows, and serves nothing.
	FootprintOnly bool
	// Readers is the clients that read files from the rank at once: the
	// DataLoader workers of its training processes, or the processes
	// themselves when they have none; Procs is the training processes.
	// The footprint counts a ring for each reader and two for each
	// process (its sampler's and its session's), a ring's worth of files
	// answered in place for each reader, and two batches of 64 files in
	// flight for each reader handed on (Node.Footprint). 0 means 1
	// process, and 4 readers for each (a DataLoader of 4 workers).
	Readers, Procs int
	// HandMemBytes bounds the files DataLoader workers hand on to their
	// training processes in place (−1: Node.HandCap's default; 0: none,
	// copies).
	HandMemBytes int64
	// IOWorkers bounds the chunk reads in flight, ReadMemBytes the bytes
	// they read into (0: IOWorkers of the largest chunk, at most
	// DefaultReadMem; one read goes ahead whatever its size).
	IOWorkers    int
	ReadMemBytes int64
	// OpenFiles bounds the chunk files a rank keeps open between reads,
	// so that a chunk read each epoch is not opened each epoch (−1:
	// chunk.OpenHome's default; 0: none).
	OpenFiles int
	// Consume is the number of in-process consumers per rank, each reading
	// its share of the rank's trace and verifying every file; Depth is
	// the requests each keeps in flight. With none, other clients (shared
	// memory) send their asks to Node.ClientEvents.
	Consume, Depth int
	// Pause makes the in-process consumers wait this long at the start of
	// each epoch, as a training script busy elsewhere would; the rank is
	// idle meanwhile, and the CPU it uses then is reported.
	Pause time.Duration
	// OnDamage says what a rank does with a file whose bytes are damaged
	// on storage (its checksum fails on a read and again on a second
	// read, or its chunk file is missing or short): "fail" stops the job
	// with an error naming the file; "skip" leaves that file out of the
	// epoch, naming it once, and answers its position with that news
	// (Delivery.Damaged).
	OnDamage string
	// MaxSkipped bounds the files a job leaves out as damaged (OnDamage
	// "skip"): more than MaxSkipped files, or when it is 0 more than
	// MaxSkippedFraction of the dataset's (rounded up), end the job. A
	// rank ends it as soon as its own count passes the bound, every rank
	// at the end of an epoch whose skipped files, summed, do.
	MaxSkipped         int64
	MaxSkippedFraction float64
	// StorageWait is how long a rank tries again to read a file of the
	// dataset it cannot reach (missing, no permission, EIO, ESTALE:
	// storage's fault, never damage): the manifest and the indexes when it
	// opens the dataset, the chunk files then and while it serves. Past it
	// the rank ends the job naming the file and the error; 0 ends it at
	// the first failure. See storageWatch.
	StorageWait time.Duration
	// PeerWarn is how long a rank waits on a peer that sends nothing
	// before it says so, naming the peer (and again each PeerWarn after);
	// PeerTimeout, when positive, how long before it ends the job (shorter
	// than PeerWarn too: the job then ends without a warning).
	PeerWarn, PeerTimeout time.Duration
	// ClientWait is how long a rank whose clients all went away in the
	// middle of an epoch (some of its positions asked for, others not)
	// waits for one to come back before it ends the job; 0 waits for
	// ever. Clients are those Node.WatchClients counts. (Training
	// processes with a BrandSampler are watched more closely: see
	// sessions.)
	ClientWait time.Duration
	// TrainingWait is how long after serving began the job waits for
	// every rank to have had a client (a training process) attached
	// before it ends, naming those that had none; 0 waits for ever.
	// Meanwhile every PeerWarn the ranks say which have none.
	TrainingWait time.Duration
}

// Most consumers, requests in flight per consumer and I/O workers a rank
// runs (each worker holds a buffer of a chunk).
const (
	MaxConsumers = 1024
	MaxDepth     = 1024
	MaxIOWorkers = 1024
	// DefaultReadMem bounds the bytes of the chunk reads in flight,
	// unless Config.ReadMemBytes says otherwise: four chunks of 64 files
	// of 110 KB fit; of 1 MB files, one.
	DefaultReadMem = 64 << 20
)

// DefaultConfig returns the defaults; the caller sets Chunks and the
// memory.
func DefaultConfig() Config {
	return Config{Policy: PolicyWindow, Variant: proto.Full, Window: 64, Ramp: proto.DefaultRamp, Keep: proto.KeepShare, RemoteMemBytes: -1, HandMemBytes: -1, Seed: 1, Epochs: 1, IOWorkers: 4, OpenFiles: -1, Consume: 0, Depth: 4,
		ClientWait: time.Minute, TrainingWait: 10 * time.Minute, OnDamage: "fail", MaxSkippedFraction: 0.001, StorageWait: 2 * time.Minute, PeerWarn: 30 * time.Second}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	add := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("rt: "+format, args...))
		}
	}
	add(c.Chunks != "", "no chunk directory (--chunks)")
	add(c.Readers >= 0 && c.Procs >= 0, "%d readers and %d training processes, want 0 or more (0: the defaults)", c.Readers, c.Procs)
	add(c.MemLeaveBytes >= 0, "memory left for the other processes in the cgroup: %d bytes, want 0 or more", c.MemLeaveBytes)
	if err := c.Mem.check(); err != nil {
		errs = append(errs, err)
	}
	add(c.RemoteMemBytes >= -1, "remote memory %d bytes, want ≥ 0 (or −1 for a tenth of the budget)", c.RemoteMemBytes)
	add(c.Policy == PolicyWindow || c.Policy == PolicyPaper, "policy %q, want window or paper", c.Policy)
	add(int(c.Variant) < len(proto.Variants), "unknown variant %d", c.Variant)
	add(c.Window >= 0, "window %d, want ≥ 0", c.Window)
	add(c.Ramp >= 0, "ramp %d chunks, want ≥ 0", c.Ramp)
	add(c.Keep >= 0 && c.Keep <= 1, "keep %g of the budget, want 0 to 1", c.Keep)
	add(c.MixBatch >= 0, "batch %d, want ≥ 0 (0 measures no order)", c.MixBatch)
	add(c.Epochs >= 1 && c.Epochs <= proto.MaxEpochs, "%d epochs, want 1 to %d", c.Epochs, proto.MaxEpochs)
	add(c.IOWorkers >= 1 && c.IOWorkers <= MaxIOWorkers, "%d I/O workers, want 1 to %d", c.IOWorkers, MaxIOWorkers)
	add(c.OpenFiles >= -1, "%d open files, want -1 (the default) or more", c.OpenFiles)
	add(c.ReadMemBytes >= 0, "read memory %d bytes, want ≥ 0 (0: the default)", c.ReadMemBytes)
	add(c.HandMemBytes >= -1, "hand memory %d bytes, want ≥ 0 (or −1 for the default)", c.HandMemBytes)
	add(c.Consume >= 0 && c.Consume <= MaxConsumers, "%d consumers, want 0 to %d", c.Consume, MaxConsumers)
	add(c.Depth >= 1 && c.Depth <= MaxDepth, "depth %d, want 1 to %d", c.Depth, MaxDepth)
	add(!c.ClientTraces || c.Consume == 0, "in-process consumers read generated traces: client traces need 0 consumers, not %d", c.Consume)
	add(!c.Resume || c.Policy == PolicyWindow, "resuming mid-epoch needs --policy window: the paper policy chooses files as requests come, so an interrupted epoch cannot be taken up where it stopped")
	add(!c.Resume || !c.Fresh, "resuming and starting fresh at once: --resume or --fresh, not both")
	add(!c.Resume || !c.ClientTraces, "resuming needs the traces of the epochs before it: use traces from --seed, not from the clients")
	add(c.OnDamage == "fail" || c.OnDamage == "skip", "on damage %q, want fail or skip", c.OnDamage)
	add(c.MaxSkipped >= 0 && c.MaxSkippedFraction >= 0 && c.MaxSkippedFraction <= 1, "at most %d files or a fraction %g of the dataset skipped, want ≥ 0 (and the fraction ≤ 1)", c.MaxSkipped, c.MaxSkippedFraction)
	add(c.StorageWait >= 0, "storage wait %v, want ≥ 0", c.StorageWait)
	add(c.PeerWarn > 0 && c.PeerTimeout >= 0, "peer warning after %v and timeout %v, want the warning > 0 and the timeout ≥ 0", c.PeerWarn, c.PeerTimeout)
	add(c.Pause >= 0, "pause %v, want ≥ 0", c.Pause)
	add(c.ClientWait >= 0, "client wait %v, want ≥ 0", c.ClientWait)
	add(c.TrainingWait >= 0, "training wait %v, want ≥ 0", c.TrainingWait)
	return errors.Join(errs...)
}

// MayResume reports whether the rank waits, before its first epoch, for
// its clients to say where the job takes up: always with Resume, and
// else wherever a job can resume (the window policy with the seed's
// traces, served to clients). A rank that may not starts epoch 1 at once.
func (c Config) MayResume() bool {
	return c.Resume || !c.Fresh && c.Policy == PolicyWindow && !c.ClientTraces && c.Consume == 0 && !c.FootprintOnly
}

// Policy names how the ranks choose what to read and what answers a
// position.
type Policy string

const (
	// PolicyWindow plans each epoch before it starts: each chunk is read
	// once, as memory frees (proto.WindowRank).
	PolicyWindow Policy = "window"
	// PolicyPaper is the Brand/Redox protocol (proto.Rank), which chooses
	// files as requests come, in Config.Variant.
	PolicyPaper Policy = "paper"
)

// Budget is the memory a rank keeps its own files in (--mem): Bytes, or
// a share in (0, 1] of its shard (Shard), or of what its memory cgroup
// leaves beside the rest of the rank's footprint and Config.MemLeaveBytes
// (Cgroup; Node.cgroupBudget); exactly one is set. A rank resolves it
// once, when it opens (Node.Budget): to bytes or a share of the shard.
type Budget struct {
	Bytes         int64
	Shard, Cgroup float64
}

// check reports a budget that is not exactly one positive amount.
func (b Budget) check() error {
	set := 0
	for _, on := range []bool{b.Bytes != 0, b.Shard != 0, b.Cgroup != 0} {
		if on {
			set++
		}
	}
	if set != 1 || b.Bytes < 0 || b.Shard < 0 || b.Shard > 1 || b.Cgroup < 0 || b.Cgroup > 1 {
		return fmt.Errorf("rt: memory budget: %d bytes, %g of the shard, %g of the memory cgroup: want exactly one of them positive (a share ≤ 1)", b.Bytes, b.Shard, b.Cgroup)
	}
	return nil
}
