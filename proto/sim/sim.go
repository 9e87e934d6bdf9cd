// Package sim runs whole epochs of a policy for N ranks in one process,
// over a synthetic dataset or a packed one's sizes and labels, and reports,
// per epoch and policy, the traffic (requests, hits, chunk reads, remote
// requests, prefetch) and how random the delivered order is compared with
// a true shuffle of the same files. Each policy (the papers' protocol in
// its four variants, the window plan) is one type behind Policy, in its
// own file. It is what `brandrt simulate` prints.
package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// Config describes a simulation. Fields map one-to-one onto the flags of
// `brandrt simulate`.
type Config struct {
	// Files is the number of files of the dataset, split evenly over Ranks.
	Files int
	// ChunkFiles is K, the number of files per chunk.
	ChunkFiles int
	// Ranks is the number of ranks (nodes).
	Ranks int
	// MemFraction is each rank's VC budget as a fraction of its shard.
	MemFraction float64
	// RemoteFraction is each rank's buffer limit as a fraction of its VC
	// budget.
	RemoteFraction float64
	// Window is P, the prefetch window in positions.
	Window int
	// Policies are the policies to run (Names), one after the other on
	// the same traces.
	Policies []string
	// Lead and Ramp are the window policy's read time in logical steps and
	// the chunks read before the first epoch's first answer.
	Lead, Ramp int
	// Keep is the share of each budget that the window policy keeps
	// chunks in across epochs (proto.WindowInput.Keep).
	Keep float64
	// Epochs is the number of epochs per policy.
	Epochs int
	// Seed drives the file sizes, the traces and the protocol's choices.
	Seed uint64
	// Batch is the batch size for distinct_chunks_per_batch.
	Batch int
	// FileSize is the mean file size in bytes.
	FileSize int64
	// Lognormal draws sizes from a lognormal distribution with mean
	// FileSize and shape Sigma; otherwise every file has FileSize bytes.
	Lognormal bool
	Sigma     float64
	// Inflight is the number of requests each rank's clients keep
	// outstanding (think DataLoader workers × prefetch factor).
	Inflight int
	// Progress, if set, is called now and then with the requests done
	// and the total of the current epoch and variant.
	Progress func(policy string, epoch int, done, total int64)
	// DatasetSizes, when set, are the sizes of a real dataset's files, one
	// list per rank (a packed dataset's shards), used instead of drawn
	// sizes; Files and Ranks must match them.
	DatasetSizes [][]int64
	// DatasetChunks, when set, are the files of each chunk of a dataset
	// packed by size, one list per rank; ChunkFiles is then the most a
	// chunk holds.
	DatasetChunks [][]int
	// Labels, when set, are the label of every file (by file id; -1 for
	// none), for the label entropy per batch.
	Labels []int32
	// Order, if set, is given each epoch's delivered order: files[r][sn]
	// answered position sn of rank r under the named policy.
	Order func(policy string, epoch int, files [][]proto.FileID)
	// Resume, when set, starts the run in the middle of an epoch, as
	// brandrt serve --resume does (the window policy only); Epochs is
	// then the last epoch run.
	Resume *Resume
}

// Resume is where a resumed run takes up epoch Epoch: on the plan of the
// job that saved its place, each rank r at position Start[r] (the files
// before it shown as proto.NoFile, as serve shows them); or, on another
// plan, after the files marked Delivered, the rest of the epoch planned
// as proto.RestPlan plans it.
type Resume struct {
	Epoch     uint32
	Start     []int32
	Delivered []bool
}

// MaxRanks is the most ranks a simulation runs.
const MaxRanks = 1 << 16

// DefaultConfig is an ImageNet-1k-sized run: 1,281,167 files of 110 KB on
// average (lognormal), 3 ranks, K=64, a quarter of each shard in memory,
// a tenth of that for the buffer, a window of 64, the full protocol.
func DefaultConfig() Config {
	return Config{
		Files: 1281167, ChunkFiles: 64, Ranks: 3, MemFraction: 0.25, RemoteFraction: 0.1,
		Window: 64, Policies: []string{"window"}, Lead: proto.DefaultLead, Ramp: proto.DefaultRamp, Keep: proto.KeepShare, Epochs: 1, Seed: 1, Batch: 256,
		FileSize: 110_000, Lognormal: true, Sigma: 0.6, Inflight: 8,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("sim: "+format, args...))
		}
	}
	check(c.Files < 1 || c.Files > proto.MaxFiles, "files = %d, want 1 to %d", c.Files, proto.MaxFiles)
	check(c.ChunkFiles < 1, "chunk files = %d, want ≥ 1", c.ChunkFiles)
	check(c.Ranks < 1 || c.Ranks > MaxRanks, "ranks = %d, want 1 to %d", c.Ranks, MaxRanks)
	check(c.Ranks > c.Files, "%d ranks for %d files: every rank needs a file", c.Ranks, c.Files)
	check(!(c.MemFraction > 0 && c.MemFraction <= 1), "memory fraction = %g, want in (0, 1]", c.MemFraction)
	check(!(c.RemoteFraction >= 0), "remote fraction = %g, want ≥ 0", c.RemoteFraction)
	check(c.Window < 0, "window = %d, want ≥ 0", c.Window)
	check(len(c.Policies) == 0, "no policy to run")
	for _, name := range c.Policies {
		if _, err := lookup(name); err != nil {
			errs = append(errs, err)
		}
	}
	check(c.Labels != nil && len(c.Labels) != c.Files, "labels for %d files, config %d", len(c.Labels), c.Files)
	check(c.Lead < 0 || c.Ramp < 0, "lead %d and ramp %d, want ≥ 0", c.Lead, c.Ramp)
	check(c.Keep < 0 || c.Keep > 1, "keep %g of the budget, want 0 to 1", c.Keep)
	check(c.Epochs < 1 || c.Epochs > proto.MaxEpochs, "epochs = %d, want 1 to %d", c.Epochs, proto.MaxEpochs)
	if r := c.Resume; r != nil {
		check(r.Epoch < 1 || int(r.Epoch) > c.Epochs, "resuming epoch %d, want 1 to %d (epochs)", r.Epoch, c.Epochs)
		check(!slices.Equal(c.Policies, []string{"window"}), "resuming runs the window policy alone, not %v", c.Policies)
		check(r.Start != nil && len(r.Start) != c.Ranks, "resuming %d ranks at %d positions", c.Ranks, len(r.Start))
		check(r.Delivered != nil && len(r.Delivered) != c.Files, "resuming after %d files marked for a dataset of %d", len(r.Delivered), c.Files)
	}
	check(c.Batch < 1, "batch = %d, want ≥ 1", c.Batch)
	check(c.FileSize < 1, "file size = %d bytes, want ≥ 1", c.FileSize)
	check(c.Lognormal && !(c.Sigma >= 0 && c.Sigma <= 4), "sigma = %g, want 0 to 4", c.Sigma)
	check(c.Inflight < 1, "inflight = %d, want ≥ 1", c.Inflight)
	if c.DatasetSizes != nil {
		n := 0
		for _, s := range c.DatasetSizes {
			n += len(s)
		}
		check(len(c.DatasetSizes) != c.Ranks || n != c.Files, "dataset sizes for %d ranks and %d files, config %d and %d",
			len(c.DatasetSizes), n, c.Ranks, c.Files)
	}
	return errors.Join(errs...)
}

// Result is one line of the report: one epoch of one policy.
type Result struct {
	// Variant is the policy's name (Names), Policy its family.
	Policy      string  `json:"policy"`
	Variant     string  `json:"variant"`
	Epoch       int     `json:"epoch"`
	Ranks       int     `json:"ranks"`
	Files       int     `json:"files"`
	ChunkFiles  int     `json:"chunk_files"`
	MemFraction float64 `json:"mem_fraction"`
	Window      int     `json:"window"`
	Inflight    int     `json:"inflight"`
	// Bytes is the dataset's size; MemBytes and RemoteMemBytes the
	// per-rank budgets.
	Bytes          int64 `json:"bytes"`
	MemBytes       int64 `json:"mem_bytes"`
	RemoteMemBytes int64 `json:"remote_mem_bytes"`

	Requests   int64 `json:"requests"`
	Delivered  int64 `json:"delivered"`
	LocalHits  int64 `json:"local_hits"`
	Misses     int64 `json:"misses"`
	ChunkReads int64 `json:"chunk_reads"`
	ChunkBytes int64 `json:"chunk_bytes"`
	// ResidentReads counts, for the window policy, the reads of kept
	// chunks answered from memory: not in ChunkReads or ChunkBytes, which
	// count what storage gives.
	ResidentReads     int64   `json:"resident_reads"`
	BytesDelivered    int64   `json:"bytes_delivered"`
	ReadAmplification float64 `json:"read_amplification"`
	FillRate          float64 `json:"fill_rate"`
	RemoteRequests    int64   `json:"remote_requests"`
	Redirects         int64   `json:"redirects"`
	Prefetched        int64   `json:"prefetched"`
	PrefetchHits      int64   `json:"prefetch_hits"`
	PeakMemBytes      int64   `json:"peak_mem_bytes"`
	// WaitSteps is, for the window policy, the logical steps by which
	// reads had to be done earlier than their lead allowed (an empty
	// pool; proto.WindowPlan.WaitSteps).
	WaitSteps int64 `json:"wait_steps"`
	// ReadsAhead counts, for the window policy, the chunk reads done
	// before the epoch started, in the room the previous one's drain
	// freed; PlanBytes is the memory its planner allocated.
	ReadsAhead int64 `json:"reads_ahead"`
	PlanBytes  int64 `json:"plan_bytes"`
	// HomeSeconds and HomeBytes are, for the window policy, what rank
	// 0's share of the plan took: its pool (proto.PlanHome), then its
	// positions and pushes from the answers of every home
	// (proto.PlanShare, RankShare.AheadBy). The answers themselves come
	// from the other ranks' pools, planned in parallel on them.
	HomeSeconds float64 `json:"home_plan_seconds"`
	HomeBytes   int64   `json:"home_plan_bytes"`

	proto.Mix

	// Seconds is the wall time the simulation of this epoch took.
	Seconds float64 `json:"seconds"`
}

// Run simulates cfg and calls emit with each epoch's result, policy by
// policy. Every policy sees the same file sizes and the same traces.
func Run(cfg Config, emit func(Result)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	sizes := Sizes(cfg)
	m, err := inproc.Mapping(inproc.Options{K: cfg.ChunkFiles, Sizes: sizes, Chunks: cfg.DatasetChunks, MemFraction: cfg.MemFraction})
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	for _, name := range cfg.Policies {
		if err := runPolicy(cfg, sizes, m, name, emit); err != nil {
			return fmt.Errorf("sim: %s: %w", name, err)
		}
	}
	return nil
}

func runPolicy(cfg Config, sizes [][]int64, m *proto.Mapping, name string, emit func(Result)) error {
	def, _ := lookup(name) // Validate checked the name
	pol, err := def.build(cfg, sizes, m)
	if err != nil {
		return err
	}
	var prev proto.Orders
	first := 1
	if cfg.Resume != nil {
		first = int(cfg.Resume.Epoch)
	}
	for e := first; e <= cfg.Epochs; e++ {
		start := time.Now()
		traces := proto.Traces(m.Files(), m.Ranks(), cfg.Seed, uint32(e))
		var progress func(done, total int64)
		if cfg.Progress != nil {
			progress = func(done, total int64) { cfg.Progress(name, e, done, total) }
		}
		var files [][]proto.FileID
		var res Result
		var err error
		if r := cfg.Resume; r != nil && e == first {
			files, traces, res, err = pol.(resumer).Resume(*r)
		} else {
			files, res, err = pol.Epoch(e, traces, progress)
		}
		if err != nil {
			return fmt.Errorf("epoch %d: %w", e, err)
		}
		if cfg.Order != nil {
			cfg.Order(name, e, files)
		}
		res.Seconds = time.Since(start).Seconds()
		describe(&res, cfg, m, def, e)
		cur := proto.Orders{Files: served(files), Traces: served(traces)}
		mix(&res, m, cfg, cur, prev)
		prev = cur
		emit(res)
	}
	return nil
}

// describe fills in what every policy's result says of the run.
func describe(res *Result, cfg Config, m *proto.Mapping, def policyDef, e int) {
	res.Policy, res.Variant, res.Epoch = def.family, def.name, e
	res.Ranks, res.Files, res.ChunkFiles, res.MemFraction = cfg.Ranks, cfg.Files, cfg.ChunkFiles, cfg.MemFraction
	res.Window, res.Inflight, res.MemBytes, res.RemoteMemBytes = cfg.Window, cfg.Inflight, m.MemBytes(0), remoteBytes(cfg, m)
	for r := range m.Ranks() {
		res.Bytes += m.ShardBytes(r)
	}
	res.ReadAmplification = ratio(res.ChunkBytes, res.BytesDelivered)
}

// Sizes returns the file sizes of cfg's dataset, one list per rank: its
// DatasetSizes, or drawn, Files/Ranks files (±1) per rank.
func Sizes(cfg Config) [][]int64 {
	if cfg.DatasetSizes != nil {
		return cfg.DatasetSizes
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x51235))
	mu := math.Log(float64(cfg.FileSize)) - cfg.Sigma*cfg.Sigma/2
	sizes := make([][]int64, cfg.Ranks)
	for r := range sizes {
		n := (r+1)*cfg.Files/cfg.Ranks - r*cfg.Files/cfg.Ranks
		sizes[r] = make([]int64, n)
		for i := range sizes[r] {
			sizes[r][i] = cfg.FileSize
			if cfg.Lognormal {
				sizes[r][i] = max(1, int64(math.Exp(mu+cfg.Sigma*rng.NormFloat64())))
			}
		}
	}
	return sizes
}

// remoteBytes is each rank's buffer limit for files pushed ahead under
// the papers' policy: a fraction of the first rank's memory budget (the
// window policy's is each rank's own, as serve's).
func remoteBytes(cfg Config, m *proto.Mapping) int64 {
	return int64(cfg.RemoteFraction * float64(m.MemBytes(0)))
}

// served leaves out of each rank's order the positions delivered before
// a restart (proto.NoFile).
func served(files [][]proto.FileID) [][]proto.FileID {
	out := make([][]proto.FileID, len(files))
	for r, fs := range files {
		i := 0
		for i < len(fs) && fs[i] == proto.NoFile {
			i++
		}
		out[r] = fs[i:]
	}
	return out
}
