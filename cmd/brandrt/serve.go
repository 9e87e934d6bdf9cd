package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
	orderfile "github.com/brandrt/brandrt/proto/order"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/job"
)

func serveCommand() *cli.Command {
	d := rt.DefaultConfig()
	mem := memBudget{bytes: halfRAM(), positive: true, allowCgroup: true}
	return &cli.Command{
		Name:  "serve",
		Usage: "serve a packed dataset, one rank per node: mpirun -np N brandrt serve --chunks DIR",
		Description: "Each rank serves its shard of the dataset: it keeps up to --mem of its files\n" +
			"in memory, reads chunks whole, answers the other ranks' requests over MPI and\n" +
			"pushes them the files their traces ask for next. Every epoch, each rank's\n" +
			"trace is its part of a permutation of the dataset drawn from --seed and the\n" +
			"epoch; every file is delivered exactly once per epoch across the ranks.\n\n" +
			"Policies: window (the default) plans each epoch before it starts, as brandrt\n" +
			"simulate does: each rank reads each of its chunks once, in a seeded order, as\n" +
			"its memory frees, and answers a position with the file the plan gives it (a\n" +
			"file drawn from the pool of its home rank); --mem must hold a whole chunk.\n" +
			"paper is the Brand/Redox protocol (--variant), which reads chunks ~7 times.\n\n" +
			"With --traces clients, a training process of each rank supplies the rank's\n" +
			"trace instead, before each epoch (a custom sampler's order of file ids; see\n" +
			"brandrt.torch.BrandSampler(order=...)); the epoch starts when every rank has\n" +
			"one, and traces that share a file are refused to every rank's client.\n\n" +
			"Training processes on the rank's node read through shared memory: each\n" +
			"rank prints where they attach ($BRANDRT_ATTACH/local-<local rank>, by default\n" +
			"/dev/shm/brandrt-<uid>/local-0 with one rank per node); see python/ and\n" +
			"examples/pytorch/train.py. --consume W instead starts W in-process readers\n" +
			"per rank that read the whole trace and verify every file (for tests and\n" +
			"benchmarks without Python).\n\n" +
			"Rank 0 prints each epoch's statistics, summed over the ranks; --order-out\n" +
			"writes what was delivered, as brandrt simulate --order-out does (the same bytes\n" +
			"for the window policy, the same dataset, memory, --ramp and seed).\n\n" +
			"A job that died mid-epoch takes up where a checkpoint left it, with the same\n" +
			"command: before its first epoch each rank waits for its training's first word,\n" +
			"a saved state to resume from (BrandLoader.load_state_dict; examples/pytorch/\n" +
			"train.py --checkpoint DIR finds its last checkpoint) or a read, which starts\n" +
			"fresh; the rest of the epoch is what the interrupted job would have read.\n" +
			"--resume insists on a saved state; --fresh starts at once and cannot resume.\n\n" +
			"Example: mpirun -np 4 --map-by ppr:1:node --bind-to none \\\n" +
			"           brandrt serve --chunks /scratch/chunks --mem 12GiB --epochs 90",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "dataset directory ({rank} is replaced by the rank, for node-local copies)"},
			&cli.GenericFlag{Name: "mem", Value: &mem, Usage: "memory for this rank's own files: bytes (12GiB), a percentage of its shard (25%), or a percentage of what its memory cgroup (Slurm's, a container's) leaves beside --remote-mem, --leave and the rest of its footprint (90%cgroup); the default is half this node's RAM. " +
				"The rank takes at most its footprint, which it says at start-up term by term (--footprint says it and stops): --mem in shared memory and a record per file it holds, --remote-mem and MPI's buffers of the files in flight between ranks (16 MiB up to 33 ranks), its chunk reads in flight (--read-mem), the rings of its training processes and of the clients that read (--readers), the files those were answered in place and hold (a ring's worth each, when --mem holds less than the shard) and files handed on to the training processes (--hand-mem), tables that grow with its shard's files (232 B each) and with the dataset's (48 B each; 32 B more on rank 0, which measures the order with --batch, and 24 B with --order-out; each rank 4 B per position of its own to gather the order to rank 0) and 54 MiB for the process; one whose memory cgroup allows less is refused at start-up, with the numbers"},
			&cli.GenericFlag{Name: "remote-mem", Value: &memBudget{bytes: -1}, Usage: "memory for files other ranks push ahead of time, in bytes"},
			&cli.StringFlag{Name: "policy", Value: string(d.Policy), Usage: "window (read each chunk once, every epoch planned ahead, as brandrt simulate does) or paper (the Brand/Redox protocol)"},
			&cli.StringFlag{Name: "variant", Value: d.Variant.String(), Usage: "the paper policy's variant: full, random-selection, no-prefetching or no-optimization"},
			intFlag("ramp", int64(d.Ramp), 0, maxFiles, whyFiles, "window: chunks each rank reads before the first epoch's first answer (as brandrt simulate --ramp: the same value gives the same order)"),
			floatFlag("keep", d.Keep, 0, 1, false, "window, --mem below the shard: the share of --mem (of what it lacks of the shard, when less) that keeps the chunks an epoch read last in memory for the next, which begins with them and reads only the rest from storage (0.95 of a quarter of the shard: 0.76 of it read per epoch). More reads less, but leaves the end of an epoch and the start of the next less mixed; 0 keeps nothing. A --mem that holds the shard keeps it all, whatever --keep"),
			intFlag("batch", serveBatch, 0, maxFiles, whyFiles, "window: a training process's batch size, in which rank 0 measures how random each epoch's order is beside a shuffle of the same files (the \"order\" line; as brandrt simulate --batch), from the order every rank delivered, gathered to rank 0 as the epoch ends; 0 measures nothing"),
			intFlag("window", int64(d.Window), 0, maxFiles, whyFiles, "P, upcoming trace positions a file may be pushed ahead of (window policy: the plan's pushes, granted within --remote-mem; paper: what an owner considers) (0: none)"),
			seedFlag("seed", d.Seed, "seed of the traces and refill choices"),
			&cli.StringFlag{Name: "traces", Value: "seed", Usage: "where each epoch's traces come from: seed (drawn from --seed) or clients (supplied by the training processes)"},
			intFlag("epochs", int64(d.Epochs), 1, proto.MaxEpochs, whyEpochs, "epochs to serve"),
			&cli.StringFlag{Name: "on-damage", Value: d.OnDamage, Usage: "what a rank does with a file damaged on storage (its checksum fails on a read and on a second one, or its chunk file is cut short; checked at start-up): fail (stop the job within seconds, naming the rank, chunk file, slot, input path and byte range) or skip (leave that file out of every epoch, naming it once; the epoch statistics count it). Storage that cannot be reached is never damage: see --storage-wait"},
			&cli.GenericFlag{Name: "max-skipped", Value: &countOrShare{fraction: d.MaxSkippedFraction}, Usage: "with --on-damage skip, the most files the job may leave out as damaged: a count (30) or a percentage of the dataset (0.1%, rounded up); one more ends the job"},
			durationFlag("storage-wait", d.StorageWait, false, "how long a rank keeps trying a file of the dataset it cannot reach (the manifest and indexes at start-up, the chunk files then and during the job; missing, no permission, EIO, ESTALE: a mount gone or not there yet, a file server failing over), saying so, before it ends the job naming the file and the error (0: at once)"),
			durationFlag("peer-warn", d.PeerWarn, true, "a rank waiting on another that sends nothing for this long says so, naming the rank and its node (and again as long as it lasts); a client that leaves the files it was answered unread this long is named too"),
			durationFlag("peer-timeout", 0, false, "a rank waiting on another that sends nothing for this long ends the job, naming the rank and its node (0: wait for ever, warning every --peer-warn)"),
			&cli.StringFlag{Name: "stage", Usage: "node-local directory (/local/scratch): before the first epoch each rank copies its shards there from --chunks, verified, or reuses verified copies of an earlier job, and reads the copies; a chunk later found damaged in a copy is read from --chunks instead (brandrt stage --help)"},
			intFlag("nproc-per-node", 1, 1, maxProcsPerNode, "processes on one node", "training processes to start on each node with a training command (one per GPU); each reads its share of the rank's trace"),
			&cli.BoolFlag{Name: "allow-shared-node", EnvVars: []string{"BRANDRT_ALLOW_SHARED_NODE"}, Usage: "let several ranks run on one node: the design is one rank per node, and a job whose ranks share one is refused (demos and tests on one machine use this)"},
			durationFlag("client-wait", d.ClientWait, false, "how long a rank whose training processes all went away in the middle of an epoch, or stopped reading what they asked for, waits for one to come back before it ends the job (0: for ever); a process with a BrandSampler that dies ends the job within 5 s"),
			durationFlag("training-wait", d.TrainingWait, false, "how long after serving begins the job waits for a training process to attach to every rank (a launch that failed on some nodes) before it ends, naming the ranks and nodes that had none; meanwhile the ranks say which every --peer-warn (0: for ever)"),
			withDefault(&cli.GenericFlag{Name: "hand-mem", Value: &memBudget{bytes: -1}, Usage: "the most memory the files DataLoader workers hand on to their training processes in place (BrandDataset(in_place=True)) may take while those hold them, in bytes; beyond it they get copies (0: always copies, and nothing in the footprint: give it for a training whose workers decode the files with a transform, which hands none on; serve says so after such a job). The default covers the batches in flight of each reader (--readers; 2 batches of 64 ahead, of the shard's mean file) or an eighth of --mem when that is more, at least 8 MiB, at most 1 GiB, and no more than a single rank's shard has of files that can be handed on; a single rank whose --mem holds its whole shard hands every file on (its files stay in memory from epoch to epoch: they take nothing more)"}, "each reader's batches in flight, or --mem/8"),
			intFlag("io-workers", int64(d.IOWorkers), 1, rt.MaxIOWorkers, whyWorkers, "chunk reads in flight at once"),
			withDefault(intFlag("open-files", -1, 0, 1<<16, whyOpenFiles, "chunk files the rank keeps open between reads, so that a chunk read every epoch is opened once (on a NAS an open is round trips that cost a good part of reading a small chunk); a read that fails closes its file, and the next opens it again (0: open each chunk file for each read)"), "half the process's limit of open files less 64, at most 65536"),
			withDefault(intFlag("readers", 0, 1, maxReaders, whyReaders, "the clients that read files from the rank at once: the DataLoader workers of all the node's training processes (or the processes themselves, when they read without workers). The rank's footprint counts, for each, a ring, the files it was answered in place and holds (a ring's worth) and two batches of 64 files handed on; the rank says so when more read at once. With training processes started outside serve, count each of them too"), "4 for each training process, --nproc-per-node"),
			withDefault(&cli.GenericFlag{Name: "leave", Value: &memBudget{bytes: 0}, Usage: "memory the rank leaves of its memory cgroup for the other processes in it, in bytes: training processes and DataLoader workers launched in the same cgroup (a Slurm job step, a container, serve's own training command). The rank's footprint must fit the cgroup's limit less this, and --mem P%cgroup is a share of what that leaves. The start-up line says what the footprint leaves"}, "0: nothing set aside"),
			withDefault(&cli.GenericFlag{Name: "read-mem", Value: &memBudget{bytes: -1, positive: true}, Usage: fmt.Sprintf("the most memory chunk reads in flight take at once, in bytes (a read's buffer is its chunk rounded up to a MiB; one read goes ahead whatever its size); the default is --io-workers buffers of the largest chunk, at most %s: four chunks of 64 files of 110 KB, one of 64 files of 1 MB", humanize.IBytes(rt.DefaultReadMem))}, "--io-workers chunks, at most 64 MiB"),
			intFlag("consume", int64(d.Consume), 0, rt.MaxConsumers, "rt's most", "in-process readers per rank; 0: serve training processes through shared memory"),
			intFlag("depth", int64(d.Depth), 1, rt.MaxDepth, "rt's most", "requests each in-process reader keeps in flight"),
			durationFlag("pause", 0, false, "in-process readers wait this long at the start of each epoch (the rank's idle CPU use is then printed)"),
			&cli.BoolFlag{Name: "footprint", Usage: "say the memory each rank would take, term by term (the start-up line \"the rank needs …\", with the settings given), and what its memory cgroup allows, then stop: size a job's memory (Slurm's --mem) before asking for it"},
			&cli.BoolFlag{Name: "fresh", Usage: "start the first epoch at once, reading ahead while the training starts up, instead of waiting for the training's first word (a saved state, or a read); the job then cannot resume"},
			&cli.BoolFlag{Name: "resume", Usage: "insist that the training processes say which epoch and position the job takes up (a checkpoint's BrandLoader or BrandSampler state; without --resume a read before any starts the job fresh), then serve from there: exactly as the interrupted job would have on its ranks, --mem and --ramp; on others (a node lost; window policy), every file of the epoch not yet trained on, once"},
			&cli.StringFlag{Name: "order-out", Usage: "write the delivered order to this file (rank 0, each epoch as it ends; the file takes its place when the job ends): a line per position, \"epoch rank sn file\", as brandrt simulate --order-out writes it (" + outputNote + ")"},
			&cli.BoolFlag{Name: "force", Usage: forceNote("--order-out")},
			&cli.StringFlag{Name: "stats-json", Usage: "write each epoch's statistics to this file, one JSON object per line (rank 0; " + outputNote + "; a regular file is replaced without --force)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (cpu.pprof) into this directory (every rank: use {rank})"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile (mem.pprof) into this directory (every rank: use {rank})"},
		},
		Action: runServe,
	}
}

func serveConfig(c *cli.Context) (rt.Config, error) {
	cfg := rt.DefaultConfig()
	var err error
	cfg.Chunks = c.String("chunks")
	mem := c.Generic("mem").(*memBudget)
	cfg.Mem = mem.budget()
	if err := bytesOnly(c, "remote-mem", "1GiB", &cfg.RemoteMemBytes); err != nil {
		return cfg, err
	}
	cfg.Policy = rt.Policy(c.String("policy")) // Validate says what is wrong with it, beside the rest
	if cfg.Variant, err = proto.ParseVariant(c.String("variant")); err != nil {
		return cfg, err
	}
	cfg.Window, cfg.Ramp, cfg.Seed, cfg.Epochs = c.Int("window"), c.Int("ramp"), c.Uint64("seed"), c.Int("epochs")
	cfg.MixBatch, cfg.Keep = c.Int("batch"), c.Float64("keep")
	switch t := c.String("traces"); t {
	case "seed":
	case "clients":
		cfg.ClientTraces = true
	default:
		return cfg, fmt.Errorf("--traces %q: want seed or clients", t)
	}
	cfg.IOWorkers, cfg.Consume, cfg.Depth, cfg.Pause = c.Int("io-workers"), c.Int("consume"), c.Int("depth"), c.Duration("pause")
	cfg.OpenFiles = c.Int("open-files")
	if err := bytesOnly(c, "hand-mem", "256MiB", &cfg.HandMemBytes); err != nil {
		return cfg, err
	}
	if err := bytesOnly(c, "read-mem", "64MiB", &cfg.ReadMemBytes); err != nil {
		return cfg, err
	}
	if err := bytesOnly(c, "leave", "4GiB", &cfg.MemLeaveBytes); err != nil {
		return cfg, err
	}
	cfg.Procs, cfg.Readers = c.Int("nproc-per-node"), c.Int("readers")
	cfg.Resume, cfg.Fresh, cfg.FootprintOnly = c.Bool("resume"), c.Bool("fresh"), c.Bool("footprint")
	cfg.OnDamage, cfg.ClientWait, cfg.TrainingWait = c.String("on-damage"), c.Duration("client-wait"), c.Duration("training-wait")
	ms := c.Generic("max-skipped").(*countOrShare)
	cfg.MaxSkipped, cfg.MaxSkippedFraction = ms.n, ms.fraction
	cfg.StorageWait, cfg.PeerWarn, cfg.PeerTimeout = c.Duration("storage-wait"), c.Duration("peer-warn"), c.Duration("peer-timeout")
	return cfg, cfg.Validate()
}

func runServe(c *cli.Context) error { return serving(c, nil) }

// serving is what serve and bench serve share: the flags made a job's
// Config, with rank 0's report (printed, and written to --stats-json),
// profiles and --order-out prepared once the ranks have joined. before,
// if set, runs on every rank before the epochs, with rank 0's output
// (io.Discard elsewhere), and returns what to add to each epoch's report.
func serving(c *cli.Context, before func(comm collectives.Comm, w io.Writer) (func(io.Writer, rt.EpochStats), error)) error {
	train, err := trainingCommand(c)
	if err != nil {
		return err
	}
	cfg, err := serveConfig(c)
	if err != nil {
		return badUsage(c, err)
	}
	jc := job.Config{Runtime: cfg, Site: rt.Site{Log: c.App.ErrWriter}, Train: train, ProcsPerNode: c.Int("nproc-per-node"), AllowSharedNode: c.Bool("allow-shared-node"), Stage: c.String("stage")}
	if len(train) > 0 && !c.IsSet("epochs") {
		jc.Runtime.Epochs = untilTrainingEnds
	}
	name := c.String("order-out")
	if name != "" && firstRank() {
		if _, err := checkOut(c, "--order-out", name); err != nil { // before the run, not after it
			return err
		}
	}
	jc.Prepare = prepareRank(c, name, before)
	return job.Run(jc)
}

// prepareRank is serve's job.Config.Prepare: once the ranks have joined,
// it starts rank 0's report and each rank's profiles, runs before, and
// records the order for --order-out (name) on rank 0; what it returns
// stops the profiles, closes the report and writes the order.
func prepareRank(c *cli.Context, name string, before func(comm collectives.Comm, w io.Writer) (func(io.Writer, rt.EpochStats), error)) func(collectives.Comm, rt.Config, *rt.Site) (func() error, error) {
	return func(comm collectives.Comm, rc rt.Config, site *rt.Site) (func() error, error) {
		report, closeReport, err := reporter(c, comm.Rank(), rc.Epochs)
		if err != nil {
			return nil, err
		}
		stopProfiles, err := startProfiles(c, rankDir(c.String("cpuprofile"), comm.Rank()), rankDir(c.String("memprofile"), comm.Rank()))
		if err != nil {
			return nil, err
		}
		var order *spool
		after := func() error {
			err := errors.Join(stopProfiles(), closeReport())
			if order != nil {
				err = errors.Join(order.commit(), err)
			}
			return err
		}
		var w io.Writer = io.Discard
		if comm.Rank() == 0 {
			w = c.App.Writer
		}
		var more func(io.Writer, rt.EpochStats)
		if before != nil {
			if more, err = before(comm, w); err != nil {
				return after, err
			}
		}
		site.Report = func(s rt.EpochStats) {
			if report != nil {
				report(s)
			}
			if more != nil {
				more(w, s)
			}
		}
		switch {
		case name != "" && rc.FootprintOnly: // serves nothing, writes no order, but counts gathering it
			site.Order = func(uint32, [][]proto.FileID) {}
		case name != "":
			if order, err = recordOrder(c, name, rc, site, comm.Rank()); err != nil {
				return after, err
			}
		}
		return after, nil
	}
}

// recordOrder makes the site write each epoch's order, as --order-out
// files hold it (rc's policy and seed in its header), as the epoch ends:
// on rank 0 into the spool it returns, which puts it at name once the
// job ends. Every rank takes part in gathering it (Site.Order).
func recordOrder(c *cli.Context, name string, rc rt.Config, site *rt.Site, rank int) (*spool, error) {
	if rank != 0 {
		site.Order = func(uint32, [][]proto.FileID) {}
		return nil, nil
	}
	label := string(rc.Policy)
	if rc.Policy == rt.PolicyPaper {
		label = policyLabel(rc.Variant.String())
	}
	order, err := openOrderOut(c, name, orderfile.Header{Policy: label, Seed: rc.Seed})
	if err != nil {
		return nil, err
	}
	site.Order = func(e uint32, files [][]proto.FileID) {
		orderfile.Epoch{Epoch: int(e), Files: files}.WriteTo(order)
	}
	return order, nil
}

// openOrderOut opens the spool of --order-out at name (serve's and
// simulate's) and writes its header, h; each epoch follows as it ends
// (orderfile.Epoch.WriteTo).
func openOrderOut(c *cli.Context, name string, h orderfile.Header) (*spool, error) {
	order, err := openSpool(c, "--order-out", name)
	if err == nil {
		order.Write(h.Append(nil)) // an error is commit's
	}
	return order, err
}

// trainingCommand returns the training command given after --, if any:
// serve takes no other arguments.
func trainingCommand(c *cli.Context) ([]string, error) {
	args := c.Args().Slice()
	if len(args) == 0 {
		if c.IsSet("nproc-per-node") {
			return nil, badUsage(c, errors.New("--nproc-per-node starts training processes: give the training command after --"))
		}
		return nil, nil
	}
	if i := slices.Index(rawArgs, "--"); i < 0 || !slices.Equal(rawArgs[i+1:], args) {
		return nil, badUsage(c, fmt.Errorf("%s takes the training command after --, got %q (use --chunks DIR for the dataset)", c.Command.Name, args))
	}
	if c.Int("consume") > 0 {
		return nil, badUsage(c, fmt.Errorf("a training command (after --) reads through shared memory: it needs --consume 0, not %d", c.Int("consume")))
	}
	if c.Int("nproc-per-node") < 1 {
		return nil, badUsage(c, fmt.Errorf("--nproc-per-node %d: want at least 1", c.Int("nproc-per-node")))
	}
	return args, nil
}

// rankDir is a directory flag's value for rank: {rank} replaced.
func rankDir(dir string, rank int) string {
	if dir == "" {
		return ""
	}
	return chunk.ForRank(dir, rank)
}

// untilTrainingEnds is the epochs a job with a training command and no
// --epochs serves: as many as the training reads.
const untilTrainingEnds = math.MaxInt32

// serveBatch is serve's --batch by default (plan's too, for rank 0's
// footprint): the batch in which rank 0 measures the order.
const serveBatch = 256

// reporter returns what prints each epoch's statistics, of epochs: on
// rank 0, to stdout and, with --stats-json, to a file; elsewhere nothing.
// The close function returns the file's first write error.
func reporter(c *cli.Context, rank, epochs int) (func(rt.EpochStats), func() error, error) {
	if rank != 0 {
		return nil, func() error { return nil }, nil
	}
	var js *json.Encoder
	var werr error
	closeFn := func() error { return nil }
	if name := c.String("stats-json"); name != "" {
		f, err := createOut(c, "--stats-json", name)
		if err != nil {
			return nil, nil, err
		}
		js = json.NewEncoder(f)
		closeFn = func() error {
			if err := f.Close(); werr == nil && err != nil {
				werr = fmt.Errorf("--stats-json: %w", err)
			}
			return werr
		}
	}
	w := c.App.Writer
	return func(s rt.EpochStats) {
		of := epochs
		if of == untilTrainingEnds {
			of = 0
		}
		s.Report(w, of)
		if js != nil && werr == nil {
			if err := js.Encode(s); err != nil {
				werr = fmt.Errorf("--stats-json: %w", err)
			}
		}
	}, closeFn, nil
}
