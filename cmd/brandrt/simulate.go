package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	orderfile "github.com/brandrt/brandrt/proto/order"
	"github.com/brandrt/brandrt/proto/sim"
	"github.com/brandrt/brandrt/rt"
)

func simulateCommand() *cli.Command {
	d := sim.DefaultConfig()
	size := fileSize(d.FileSize)
	return &cli.Command{
		Name:  "simulate",
		Usage: "run whole epochs of the protocol for N ranks in one process on a synthetic dataset",
		Description: "Runs the real protocol code (package proto) for every rank in one process,\n" +
			"with logical time, on the traces serve draws from the same --seed. Prints,\n" +
			"per epoch and policy, the storage and network traffic and how random the\n" +
			"delivered order is next to a true shuffle of the same data.\n\n" +
			"Policies: window (the default) reads each chunk once into a pool of the\n" +
			"rank's memory and answers a request with a file drawn from its home's\n" +
			"pool; the epoch is planned ahead (time: the planning time; waits: logical\n" +
			"steps reads had to finish earlier than --lead allows). paper is the Brand\n" +
			"and Redox protocol: each round, every message and chunk read in flight\n" +
			"completes, and each rank's clients keep --inflight requests outstanding.\n" +
			"Its variants (Redox §5.3): full; random-selection (random refill chunk);\n" +
			"no-prefetching; no-optimization (random refill chunk, no prefetch).\n\n" +
			"Example: brandrt simulate --compare --files 1.28M --ranks 3 --chunk-files 64 --mem-fraction 0.25",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Usage: "simulate this packed dataset (brandrt pack --out): its shards, K and file sizes, instead of generated ones"},
			&cli.GenericFlag{Name: "files", Value: fileCount(d.Files), Usage: "files in the dataset (1281167, 40k, 1.28M)"},
			intFlag("chunk-files", int64(d.ChunkFiles), 1, chunk.MaxK, whyK, fmt.Sprintf("K, files per chunk: 1 to %d, and at most the files", chunk.MaxK)),
			intFlag("ranks", int64(d.Ranks), 1, sim.MaxRanks, "sim's most", "ranks (nodes); files are split evenly; with --chunks, its shards are split over them as serve splits them (default: one rank per shard)"),
			floatFlag("mem-fraction", d.MemFraction, 0, 1, true, "each rank's memory as a fraction of its shard, in (0, 1]"),
			floatFlag("remote-fraction", d.RemoteFraction, 0, 1, false, "each rank's prefetch buffer as a fraction of its memory"),
			intFlag("window", int64(d.Window), 0, maxFiles, whyFiles, "P, how far ahead files are prefetched, in positions (paper: those an owner considers; window: how early a file is pushed)"),
			&cli.StringFlag{Name: "policy", Value: "window", Usage: "window or paper"},
			&cli.StringFlag{Name: "variant", Value: proto.Full.String(), Usage: "the paper policy's variant: full, random-selection, no-prefetching or no-optimization"},
			&cli.BoolFlag{Name: "compare", Usage: "run the paper policy's four variants and (unless --policy paper) the window policy on the same traces"},
			intFlag("lead", int64(d.Lead), 0, maxFiles, whyFiles, "window: logical steps a chunk read takes (steps: positions of every rank)"),
			intFlag("ramp", int64(d.Ramp), 0, maxFiles, whyFiles, "window: chunks each rank reads before the first epoch's first answer (later epochs read into the room the previous one's drain frees)"),
			floatFlag("keep", d.Keep, 0, 1, false, "window, memory below the shard: the share of each rank's memory (of what it lacks of the shard, when less) that keeps the chunks an epoch read last for the next, as serve --keep; 0 keeps nothing, and memory that holds the shard keeps it all"),
			intFlag("epochs", int64(d.Epochs), 1, proto.MaxEpochs, whyEpochs, "epochs per variant"),
			seedFlag("seed", d.Seed, "seed of the sizes, traces and refill choices"),
			intFlag("batch", int64(d.Batch), 1, maxFiles, whyFiles, "batch size for distinct chunks per batch"),
			&cli.GenericFlag{Name: "file-size", Value: size, Usage: "mean file size (110KB, 1MiB)"},
			&cli.StringFlag{Name: "size-dist", Value: "lognormal", Usage: "file sizes: lognormal or fixed"},
			floatFlag("sigma", d.Sigma, 0, 4, false, "shape of the lognormal sizes"),
			intFlag("inflight", int64(d.Inflight), 1, maxFiles, whyFiles, "requests each rank keeps outstanding"),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per epoch and variant instead of a table"},
			&cli.StringFlag{Name: "resume", Usage: "with --chunks, window policy: take up where a training job saved its place (a BrandLoader's or BrandSampler's state_dict as JSON: json.dump(loader.state_dict(), f)), as serve does when the training offers that state, on --ranks ranks; --epochs is the last epoch"},
			&cli.StringFlag{Name: "order-out", Usage: "write the delivered order to this file: a line per position, \"epoch rank sn file\" (one policy: not with --compare; " + outputNote + ")"},
			&cli.BoolFlag{Name: "force", Usage: forceNote("--order-out")},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (cpu.pprof) into this directory"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile (mem.pprof) into this directory"},
		},
		Action: runSimulate,
	}
}

func simConfig(c *cli.Context) (sim.Config, error) {
	cfg := sim.DefaultConfig()
	cfg.Files = int(c.Generic("files").(*count).n)
	cfg.ChunkFiles, cfg.Ranks = c.Int("chunk-files"), c.Int("ranks")
	cfg.MemFraction, cfg.RemoteFraction = c.Float64("mem-fraction"), c.Float64("remote-fraction")
	cfg.Window, cfg.Epochs, cfg.Seed = c.Int("window"), c.Int("epochs"), c.Uint64("seed")
	cfg.Batch, cfg.Inflight, cfg.Sigma = c.Int("batch"), c.Int("inflight"), c.Float64("sigma")
	cfg.FileSize = c.Generic("file-size").(*byteSize).n
	switch c.String("size-dist") {
	case "lognormal":
		cfg.Lognormal = true
	case "fixed":
		cfg.Lognormal = false
	default:
		return cfg, fmt.Errorf("--size-dist %q: want lognormal or fixed", c.String("size-dist"))
	}
	cfg.Lead, cfg.Ramp, cfg.Keep = c.Int("lead"), c.Int("ramp"), c.Float64("keep")
	if dir := c.String("chunks"); dir != "" {
		for _, f := range []string{"files", "chunk-files", "file-size", "size-dist", "sigma"} {
			if c.IsSet(f) {
				return cfg, fmt.Errorf("--%s comes from the dataset with --chunks; drop it", f)
			}
		}
		ranks := 0 // as many as the dataset has shards, unless --ranks
		if c.IsSet("ranks") {
			ranks = cfg.Ranks
		}
		m, sizes, labels, err := chunk.Sizes(chunk.OS, dir, ranks)
		if err != nil {
			return cfg, err
		}
		cfg.Files, cfg.Ranks, cfg.ChunkFiles, cfg.DatasetSizes, cfg.Labels = int(m.Files), len(sizes), m.K, sizes, labels
		if m.Params.ChunkBytes > 0 {
			homes, err := chunk.AssignDir(dir, m, len(sizes))
			if err != nil {
				return cfg, err
			}
			cfg.DatasetChunks = m.RankChunks(homes)
		}
		if name := c.String("resume"); name != "" {
			if cfg.Resume, err = simResume(name, m, sizes, cfg); err != nil {
				return cfg, err
			}
		}
	} else if c.IsSet("resume") {
		return cfg, errors.New("--resume takes up a packed dataset's job: add --chunks")
	}
	v, err := proto.ParseVariant(c.String("variant"))
	if err != nil {
		return cfg, fmt.Errorf("--variant: %w", err)
	}
	cfg.Policies, err = simPolicies(c.String("policy"), v, c.Bool("compare"))
	if err != nil {
		return cfg, err
	}
	return cfg, errors.Join(checkK(cfg), cfg.Validate())
}

// checkK bounds K as pack does (see chunk.CheckK); K < 1 is left to
// Validate.
func checkK(cfg sim.Config) error {
	if cfg.ChunkFiles < 1 {
		return nil
	}
	if err := chunk.CheckK(cfg.ChunkFiles, int64(cfg.Files)); err != nil {
		return fmt.Errorf("--chunk-files: %w", err)
	}
	return nil
}

// simPolicies names the policies to run: the one of --policy (for paper,
// its --variant); with --compare, every policy, or with --policy paper
// the paper's four variants.
func simPolicies(policy string, v proto.Variant, compare bool) ([]string, error) {
	if !slices.Contains(sim.Families(), policy) {
		return nil, fmt.Errorf("--policy %q: want one of %s", policy, strings.Join(sim.Families(), ", "))
	}
	var names []string
	for _, name := range sim.Names() {
		switch {
		case compare && (policy != "paper" || sim.Family(name) == "paper"),
			!compare && name == policy,
			!compare && policy == "paper" && name == v.String():
			names = append(names, name)
		}
	}
	return names, nil
}

func runSimulate(c *cli.Context) (err error) {
	if err := noArgs(c, ""); err != nil {
		return err
	}
	cfg, err := simConfig(c)
	if err != nil {
		return err
	}
	stopProfiles, err := startProfiles(c, c.String("cpuprofile"), c.String("memprofile"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfiles()) }()
	out := c.App.Writer
	var bar *progress
	cfg.Progress = func(policy string, e int, done, total int64) {
		if label := fmt.Sprintf("%s epoch %d:", policy, e); bar == nil || bar.label != label {
			bar = newProgress(c.App.ErrWriter, label)
		}
		bar.update(done, total, comma, "requests", "")
	}
	var order *spool // written as each epoch ends, put in place when the run is done
	if name := c.String("order-out"); name != "" {
		if c.Bool("compare") {
			return fmt.Errorf("--order-out writes one policy's order; drop --compare")
		}
		if order, err = openOrderOut(c, name, orderfile.Header{Policy: policyLabel(cfg.Policies[0]), Seed: cfg.Seed}); err != nil { // before the run, not after it
			return err
		}
		cfg.Order = func(_ string, e int, files [][]proto.FileID) {
			orderfile.Epoch{Epoch: e, Files: files}.WriteTo(order)
		}
	}
	start := time.Now()
	var results []sim.Result
	emit := func(r sim.Result) {
		results = append(results, r)
		if c.Bool("json") {
			writeJSON(out, r)
		}
	}
	if err := sim.Run(cfg, emit); err != nil {
		if order != nil {
			order.abandon()
		}
		return err
	}
	if !c.Bool("json") {
		writeTable(out, cfg, results, time.Since(start))
	}
	if order != nil {
		return order.commit()
	}
	return nil
}

func writeJSON(w io.Writer, r sim.Result) {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // Result holds only numbers and strings
	}
	fmt.Fprintf(w, "%s\n", b)
}

func writeTable(w io.Writer, cfg sim.Config, rs []sim.Result, took time.Duration) {
	r0 := rs[0]
	dist := "fixed"
	switch {
	case cfg.DatasetSizes != nil:
		dist = "the packed dataset's sizes"
	case cfg.Lognormal:
		dist = fmt.Sprintf("lognormal σ=%.2g", cfg.Sigma)
	}
	fmt.Fprintf(w, "dataset  %s files, %s (mean %s, %s), %d ranks, K=%d\n",
		comma(int64(r0.Files)), ibytes(r0.Bytes), ibytes(r0.Bytes/int64(r0.Files)), dist, r0.Ranks, r0.ChunkFiles)
	fmt.Fprintf(w, "memory   %s per rank (%.0f%% of a shard)\n", ibytes(r0.MemBytes), 100*r0.MemFraction)
	for _, r := range rs {
		if r.Policy == "paper" {
			fmt.Fprintf(w, "paper    prefetch buffer %s, window %d, %d requests in flight per rank\n",
				ibytes(r.RemoteMemBytes), r.Window, r.Inflight)
			break
		}
	}
	if slices.Contains(cfg.Policies, "window") {
		fmt.Fprintf(w, "window   a chunk read takes %d steps, %d chunks read before the first answer; files pushed up to %d positions ahead within %s\n",
			cfg.Lead, cfg.Ramp, cfg.Window, ibytes(int64(cfg.RemoteFraction*float64(r0.MemBytes))))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tepoch\tlocal hits\tmisses\tchunk reads\tfill\tread amp\tremote req\tprefetched\tpf hits\twaits\tpeak mem\tchunks/batch\t(shuffle)\tspan\t(shuffle)\ttime\t")
	for _, r := range rs {
		name, waits := policyLabel(r.Variant), "-"
		if r.Policy == "window" {
			waits = comma(r.WaitSteps)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.0f%%\t%.2f×\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.3f\t%.3f\t%.1fs\t\n",
			name, r.Epoch, comma(r.LocalHits), comma(r.Misses), comma(r.ChunkReads), 100*r.FillRate,
			r.ReadAmplification, comma(r.RemoteRequests), comma(r.Prefetched), comma(r.PrefetchHits), waits,
			ibytes(r.PeakMemBytes), r.DistinctChunksPerBatch, r.DistinctChunksPerBatchShuffle,
			r.ChunkSpan, r.ChunkSpanShuffle, r.Seconds)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nrandomness at the edges of an epoch (distinct chunks per batch over its first and last 1 %%)\n"+
		"and across epochs (pairs of files in one batch that share a batch again in the next epoch)\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	labels := ""
	if r0.LabelEntropy != nil {
		labels = "label entropy\t(shuffle)\t"
	}
	fmt.Fprintln(tw, "policy\tepoch\tfirst 1%\t(shuffle)\tlast 1%\t(shuffle)\tpairs again\t(shuffle)\t"+labels)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t", policyLabel(r.Variant), r.Epoch, r.DistinctFirst,
			r.DistinctFirstShuffle, r.DistinctLast, r.DistinctLastShuffle, percent(r.PairsAgain), percent(r.PairsAgainShuffle))
		if r.LabelEntropy != nil {
			fmt.Fprintf(tw, "%.2f bits\t%.2f bits\t", *r.LabelEntropy, *r.LabelEntropyShuffle)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	writePlanning(w, rs)
	fmt.Fprintf(w, "\n%s requests per epoch, every file delivered exactly once; simulated in %s\n",
		comma(r0.Requests), took.Round(100*time.Millisecond))
}

// policyLabel names a policy with its family: "window", "paper full".
func policyLabel(name string) string {
	if f := sim.Family(name); f != name {
		return f + " " + name
	}
	return name
}

// writePlanning prints, for the window policy, what planning each epoch
// took and what it read before the epoch started.
func writePlanning(w io.Writer, rs []sim.Result) {
	for _, r := range rs {
		if r.Policy == "window" {
			// the epoch's time less the pool planned alone beside it
			took := time.Duration((r.Seconds - r.HomeSeconds) * float64(time.Second)).Round(time.Millisecond)
			fmt.Fprintf(w, "\nwindow epoch %d: planned in %s, allocating %s; %s of %s chunk reads done before the epoch, in the room the previous one's drain freed",
				r.Epoch, took, ibytes(r.PlanBytes), comma(r.ReadsAhead), comma(r.ChunkReads))
			home := time.Duration(r.HomeSeconds * float64(time.Second)).Round(time.Millisecond)
			fmt.Fprintf(w, "\n  rank 0's share (its pool, then its positions and pushes from the other pools' answers, as serve plans it): planned in %s, allocating %s",
				home, ibytes(r.HomeBytes))
		}
	}
	fmt.Fprintln(w)
}

// simResume reads the saved state in file name and returns where a job
// of cfg on dataset m (its files' sizes per rank) takes up, as serve
// does when the training offers that state.
func simResume(name string, m *chunk.Manifest, sizes [][]int64, cfg sim.Config) (*sim.Resume, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--resume: %w", err)
	}
	p, err := rt.ParsePlace(b)
	if err != nil {
		return nil, fmt.Errorf("--resume %s: %w (a checkpoint of train.py holds it: json.dump(torch.load(ckpt)[\"loader\"], f))", name, err)
	}
	// the place this simulated job would save: serve's, of the window
	// policy with traces from the seed and cfg's ranks, budget and plan
	rc := rt.DefaultConfig()
	rc.Policy, rc.Seed, rc.Ramp, rc.Keep = rt.PolicyWindow, cfg.Seed, cfg.Ramp, cfg.Keep
	job := rt.PlaceOf(rc, rt.Budget{Shard: cfg.MemFraction}, cfg.Ranks, m)
	how, err := rt.Resume(p, job, cfg.Epochs)
	if err != nil {
		return nil, fmt.Errorf("--resume %s: %w", name, err)
	}
	if how == rt.OnItsPlan {
		start := make([]int32, cfg.Ranks)
		for r := range start {
			start[r] = p.Position
		}
		return &sim.Resume{Epoch: p.Epoch, Start: start}, nil
	}
	var all []int64
	for _, s := range sizes {
		all = append(all, s...)
	}
	d, err := rt.Delivered(m, all, p)
	if err != nil {
		return nil, fmt.Errorf("--resume %s: %w", name, err)
	}
	return &sim.Resume{Epoch: p.Epoch, Delivered: d}, nil
}
