package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pkg/profile"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

func serveCommand() *cli.Command {
	d := rt.DefaultConfig()
	mem := memBudget{bytes: halfRAM(), positive: true}
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
			"A job that died mid-epoch takes up where a checkpoint left it: serve with\n" +
			"--resume (and the same flags), and the training processes say where\n" +
			"(BrandSampler.load_state_dict; examples/pytorch/train.py --checkpoint DIR\n" +
			"--resume); the rest of the epoch is what the interrupted job would have read.\n\n" +
			"Example: mpirun -np 4 --map-by ppr:1:node --bind-to none \\\n" +
			"           brandrt serve --chunks /scratch/chunks --mem 12GiB --epochs 90",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "dataset directory ({rank} is replaced by the rank, for node-local copies)"},
			&cli.GenericFlag{Name: "mem", Value: &mem, Usage: "memory for this rank's own files: bytes (12GiB) or a percentage of its shard (25%); the default is half this node's RAM"},
			&cli.GenericFlag{Name: "remote-mem", Value: &memBudget{bytes: -1}, Usage: "memory for files other ranks push ahead of time, in bytes"},
			&cli.StringFlag{Name: "policy", Value: d.Policy, Usage: "window (read each chunk once, every epoch planned ahead, as brandrt simulate does) or paper (the Brand/Redox protocol)"},
			&cli.StringFlag{Name: "variant", Value: d.Variant.String(), Usage: "the paper policy's variant: full, random-selection, no-prefetching or no-optimization"},
			&cli.IntFlag{Name: "ramp", Value: d.Ramp, Usage: "window: chunks each rank reads before the first epoch's first answer (as brandrt simulate --ramp: the same value gives the same order)"},
			&cli.IntFlag{Name: "window", Value: d.Window, Usage: "P, upcoming trace positions an owner considers for prefetch (0: none)"},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "seed of the traces and refill choices"},
			&cli.StringFlag{Name: "traces", Value: "seed", Usage: "where each epoch's traces come from: seed (drawn from --seed) or clients (supplied by the training processes)"},
			&cli.IntFlag{Name: "epochs", Value: d.Epochs, Usage: "epochs to serve"},
			&cli.StringFlag{Name: "on-damage", Value: d.OnDamage, Usage: "what a rank does with a file damaged on storage (its checksum fails on a read and on a second one, or its chunk file is missing or cut short; checked at start-up): fail (stop the job within seconds, naming the rank, chunk file, slot, input path and byte range) or skip (leave that file out of every epoch, naming it once; the epoch statistics count it)"},
			&cli.DurationFlag{Name: "client-wait", Value: d.ClientWait, Usage: "how long a rank whose training processes all went away in the middle of an epoch waits for one to come back before it ends the job (0: for ever); a process with a BrandSampler that dies ends the job within 5 s"},
			&cli.IntFlag{Name: "io-workers", Value: d.IOWorkers, Usage: "chunk reads in flight at once"},
			&cli.IntFlag{Name: "consume", Value: d.Consume, Usage: "in-process readers per rank; 0: serve training processes through shared memory"},
			&cli.IntFlag{Name: "depth", Value: d.Depth, Usage: "requests each in-process reader keeps in flight"},
			&cli.DurationFlag{Name: "pause", Usage: "in-process readers wait this long at the start of each epoch (the rank's idle CPU use is then printed)"},
			&cli.BoolFlag{Name: "resume", Usage: "wait for the training processes to say which epoch and position the job takes up (a checkpoint's BrandSampler state), then serve from there exactly as the interrupted job would have (--policy window)"},
			&cli.StringFlag{Name: "order-out", Usage: "write the delivered order to this file at the end (rank 0): a line per position, \"epoch rank sn file\", as brandrt simulate --order-out writes it"},
			&cli.BoolFlag{Name: "force", Usage: "overwrite the --order-out file if it exists"},
			&cli.StringFlag{Name: "stats-json", Usage: "write each epoch's statistics to this file, one JSON object per line (rank 0)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (cpu.pprof) into this directory (every rank: use {rank})"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile (mem.pprof) into this directory (every rank: use {rank})"},
		},
		Action: runServe,
	}
}

// memBudget is a flag value: bytes, or a percentage of the rank's shard;
// with positive, 0 bytes is refused.
type memBudget struct {
	bytes    int64
	fraction float64
	positive bool
}

func (m *memBudget) Set(s string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v > 100 {
			return fmt.Errorf("%q is not a percentage in (0, 100]", s)
		}
		*m = memBudget{fraction: v / 100, positive: m.positive}
		return nil
	}
	var b byteSize
	if err := b.Set(s); err != nil {
		return err
	}
	if b == 0 && m.positive {
		return errors.New("the rank needs memory for at least one chunk (examples: 12GiB, 25%)")
	}
	*m = memBudget{bytes: int64(b), positive: m.positive}
	return nil
}

func (m *memBudget) String() string {
	if m.bytes < 0 {
		return "a tenth of --mem"
	}
	if m.fraction > 0 {
		return strconv.FormatFloat(m.fraction*100, 'g', -1, 64) + "%"
	}
	b := byteSize(m.bytes)
	return b.String()
}

func halfRAM() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(si.Unit) / 2
}

func serveConfig(c *cli.Context) (rt.Config, error) {
	cfg := rt.DefaultConfig()
	var err error
	cfg.Chunks = c.String("chunks")
	mem := c.Generic("mem").(*memBudget)
	cfg.MemBytes, cfg.MemFraction = mem.bytes, mem.fraction
	if c.IsSet("remote-mem") {
		rm := c.Generic("remote-mem").(*memBudget)
		if rm.fraction > 0 {
			return cfg, errors.New("--remote-mem takes bytes (e.g. 1GiB), not a percentage")
		}
		cfg.RemoteMemBytes = rm.bytes
	}
	cfg.Policy = c.String("policy")
	if cfg.Variant, err = proto.ParseVariant(c.String("variant")); err != nil {
		return cfg, err
	}
	cfg.Window, cfg.Ramp, cfg.Seed, cfg.Epochs = c.Int("window"), c.Int("ramp"), c.Uint64("seed"), c.Int("epochs")
	switch t := c.String("traces"); t {
	case "seed":
	case "clients":
		cfg.ClientTraces = true
	default:
		return cfg, fmt.Errorf("--traces %q: want seed or clients", t)
	}
	cfg.IOWorkers, cfg.Consume, cfg.Depth, cfg.Pause = c.Int("io-workers"), c.Int("consume"), c.Int("depth"), c.Duration("pause")
	cfg.Resume = c.Bool("resume")
	cfg.OnDamage, cfg.ClientWait = c.String("on-damage"), c.Duration("client-wait")
	cfg.Log = c.App.ErrWriter
	return cfg, cfg.Validate()
}

func runServe(c *cli.Context) error { return serving(c, nil) }

// serving is what serve and bench serve share: the flags made a Config,
// the MPI world joined, profiles started, and rank 0's report (printed,
// and written to --stats-json). before, if set, runs on every rank before
// the epochs, with rank 0's output (io.Discard elsewhere), and returns
// what to add to each epoch's report.
func serving(c *cli.Context, before func(comm collectives.Comm, w io.Writer) (func(io.Writer, rt.EpochStats), error)) (err error) {
	if err := noArgs(c, "(use --chunks DIR)"); err != nil {
		return err
	}
	cfg, err := serveConfig(c)
	if err != nil {
		return badUsage(c, err)
	}
	env, err := launch.FromEnv()
	if err != nil {
		return err
	}
	name := c.String("order-out")
	if name != "" && env.Rank == 0 {
		if err := refuseOverwrite(c, name); err != nil { // before the run, not after it
			return err
		}
	}
	if err := env.Lifeline(); err != nil {
		return err
	}
	comm, done, err := joinWorld()
	if err != nil {
		return err
	}
	defer finishJob(c.App.ErrWriter, comm, done, &err)
	defer recoverPanic(&err)
	// A rank that fails from here on ends the job through MPI (finishJob),
	// which leaves nothing behind; one that exits before joining it
	// leaves the others' shared-memory segments in /dev/shm.
	report, closeReport, err := reporter(c, comm.Rank())
	if err != nil {
		return err
	}
	defer startProfiles(c, comm.Rank())()
	defer func() {
		if cerr := closeReport(); err == nil {
			err = cerr
		}
	}()
	var w io.Writer = io.Discard
	if comm.Rank() == 0 {
		w = c.App.Writer
	}
	var more func(io.Writer, rt.EpochStats)
	if before != nil {
		if more, err = before(comm, w); err != nil {
			return err
		}
	}
	cfg.Report = func(s rt.EpochStats) {
		if report != nil {
			report(s)
		}
		if more != nil {
			more(w, s)
		}
	}
	var order *bytes.Buffer
	if name != "" {
		order = new(bytes.Buffer)
		label := cfg.Policy
		if label == "paper" {
			label = policyLabel(cfg.Variant.String())
		}
		fmt.Fprintf(order, "# brandrt delivered order, policy %s, seed %d: epoch rank sn file\n", label, cfg.Seed)
		cfg.Order = func(e uint32, files [][]proto.FileID) {
			if comm.Rank() == 0 {
				writeOrder(order, int(e), files)
			}
		}
	}
	if err := serve(cfg, comm); err != nil {
		return err
	}
	if order != nil && comm.Rank() == 0 {
		return writeOut(c, name, order.Bytes())
	}
	return nil
}

// startProfiles starts the profiles --cpuprofile and --memprofile ask
// for, in directories named for the rank; call the result to stop them.
func startProfiles(c *cli.Context, rank int) func() {
	var stops []func()
	for _, kind := range []struct {
		flag string
		mode func(*profile.Profile)
	}{{"cpuprofile", profile.CPUProfile}, {"memprofile", profile.MemProfile}} {
		if dir := c.String(kind.flag); dir != "" {
			p := profile.Start(kind.mode, profile.ProfilePath(chunk.ForRank(dir, rank)), profile.Quiet, profile.NoShutdownHook)
			stops = append(stops, p.Stop)
		}
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// serve runs the node until its epochs are done or a signal stops it.
func serve(cfg rt.Config, comm collectives.Comm) error {
	var srv *shm.Server
	var arena *shm.Arena
	if cfg.Consume == 0 {
		cfg.OnEpoch = func(e uint32, positions int) { srv.StartEpoch(e, positions) }
		var err error
		if arena, err = newArena(); err != nil {
			return err
		}
		defer arena.Close()
		cfg.Memory = arena
	}
	n, err := rt.Open(cfg, comm)
	if err != nil {
		return err
	}
	defer n.Close()
	if cfg.Consume == 0 {
		if srv, err = listen(n, comm.Rank(), arena, cfg.Log); err != nil {
			return err
		}
		defer srv.Close()
		n.WatchClients(srv.Attached)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	served := make(chan struct{})
	defer close(served)
	// On a signal the attach point goes at once: the rank may be killed
	// (mpirun ending the job) before its deferred clean-ups run.
	unlink := func() {}
	if srv != nil {
		unlink = srv.Unlink
	}
	go onSignal(cfg.Log, comm, cancel, served, unlink)
	// The loop runs off the main thread, which stays locked for MPI's
	// Init and Finalize: on a locked thread every wait and yield of the
	// loop would cost a handoff between OS threads (futex calls), which
	// doubled the rank's CPU per file. MPI_THREAD_MULTIPLE allows its calls
	// from any thread, and the loop still makes them all.
	errc := make(chan error, 1)
	go func() {
		var err error
		defer func() { errc <- err }()
		defer recoverPanic(&err)
		panicForTests(comm.Rank())
		_, err = n.Serve(ctx)
	}()
	if err := <-errc; err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return err
	}
	if srv != nil {
		srv.Close() // every delivery written, so that the counts are whole
		fmt.Fprintf(cfg.Log, "brandrt: rank %d: training processes read %s files in place in shared memory and %s as copies\n",
			comm.Rank(), comma(srv.Shared.Load()), comma(srv.Copied.Load()))
		fmt.Fprintf(cfg.Log, "brandrt: rank %d: memory shared with them peaked at %s (--mem %s, and up to %s of freed pages kept for reuse)\n",
			comm.Rank(), ibytes(int64(arena.PeakResident())), ibytes(n.Mapping().MemBytes(comm.Rank())), ibytes(int64(arena.Slack)))
	}
	return nil
}

// onSignal waits for SIGINT or SIGTERM (from the user, mpirun, a batch
// system, or the lifeline when mpirun died) and stops the rank: the loop
// sees ctx cancelled and returns, its deferred clean-ups run (the attach
// point goes), and finishJob ends the job. A rank blocked in a collective
// never sees ctx; should it still run interruptGrace later, the job ends
// from here. It returns once served is closed.
func onSignal(log io.Writer, comm collectives.Comm, cancel context.CancelCauseFunc, served <-chan struct{}, unlink func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var sig os.Signal
	select {
	case sig = <-sigs:
	case <-served:
		return
	}
	unlink()
	cancel(fmt.Errorf("interrupted by %s; stopped", signalName(sig)))
	select {
	case <-served:
	case <-time.After(interruptGrace):
		fmt.Fprintf(log, "brandrt: rank %d: interrupted by %s, and still busy %v later; ending the job\n", comm.Rank(), signalName(sig), interruptGrace)
		abortJob(comm)
	}
}

// interruptGrace is how long a signalled rank may take to stop by itself.
const interruptGrace = 3 * time.Second

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// finishJob ends a serve. Without an error, or with one that every rank
// returned together (rt.EveryRank), MPI is finalized as usual. Any other
// error of one rank ends the whole job (MPI_Abort), with a message naming
// the rank and the cause: the other ranks would wait for it forever.
func finishJob(w io.Writer, comm collectives.Comm, done func(), err *error) {
	if *err == nil || comm.Size() == 1 || rt.EveryRank(*err) {
		finish(w, done, err)
		return
	}
	fmt.Fprintf(w, "brandrt: rank %d: %v\nbrandrt: rank %d: ending the job\n", comm.Rank(), *err, comm.Rank())
	*err = reported{*err}
	abortJob(comm)
}

// abortJob ends every rank of the job. Should MPI_Abort not end this
// process (its launcher is gone), it exits anyway.
func abortJob(comm collectives.Comm) {
	time.AfterFunc(5*time.Second, func() { os.Exit(1) })
	if comm.Size() == 1 {
		os.Exit(1)
	}
	comm.Abort(1)
}

// recoverPanic turns a panic of the goroutine deferring it into *err,
// with the stack, so that the job ends naming the rank (finishJob)
// rather than with a bare crash.
func recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
	}
}

// panicForTests panics when $BRANDRT_TEST_PANIC names this rank: how the
// tests check that a panic ends the job.
func panicForTests(rank int) {
	if os.Getenv("BRANDRT_TEST_PANIC") == strconv.Itoa(rank) {
		panic(fmt.Sprintf("rank %d: a test asked for a panic ($BRANDRT_TEST_PANIC)", rank))
	}
}

// listen opens the rank's attach point for training processes; its ring
// holds at least 64 MiB and twice the rank's largest file. Files read into
// arena reach them without a copy.
func listen(n *rt.Node, rank int, arena *shm.Arena, log io.Writer) (*shm.Server, error) {
	env, err := launch.FromEnv()
	if err != nil {
		return nil, err
	}
	o := shm.Options{Slots: 64, Data: max(uint64(64<<20), (2*uint64(n.MaxFileSize())+128+4095)&^4095), Requests: n.Requests(), Arena: arena,
		Ranks: n.Mapping().Ranks(), Seed: n.Config().Seed, MaxTrace: n.Mapping().Files()}
	if n.Config().ClientTraces {
		o.Traces = n.Traces()
	}
	if n.Config().Resume {
		o.Starts = n.Starts()
	}
	srv, err := shm.Listen(shm.DefaultDir(env.LocalRank), rank, o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "brandrt: rank %d: training processes attach at %s\n", rank, srv.Dir())
	return srv, nil
}

// newArena makes the memory the rank shares with its training processes:
// as large as the node's memory, which costs only the pages used.
func newArena() (*shm.Arena, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return nil, fmt.Errorf("the node's memory: %w", err)
	}
	return shm.NewArena(uint64(si.Totalram) * uint64(si.Unit))
}

// joinWorld returns the MPI world when a launcher started several
// processes, else a world of one without MPI.
func joinWorld() (collectives.Comm, func(), error) {
	env, err := launch.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	if env.Alone() {
		return collectives.NewLocal(1)[0], func() {}, nil
	}
	w, err := collectives.Init()
	if err != nil {
		return nil, nil, err
	}
	// Every rank has joined before any may abort: an abort while another
	// is still inside MPI_Init leaves its shared-memory segment in
	// /dev/shm (seen in one run of three).
	if err := w.Barrier(); err != nil {
		return nil, nil, err
	}
	return w, w.Finalize, nil
}

// reporter returns what prints each epoch's statistics: on rank 0, to
// stdout and, with --stats-json, to a file; elsewhere nothing. The close
// function returns the file's first write error.
func reporter(c *cli.Context, rank int) (func(rt.EpochStats), func() error, error) {
	if rank != 0 {
		return nil, func() error { return nil }, nil
	}
	var js *json.Encoder
	var werr error
	closeFn := func() error { return nil }
	if name := c.String("stats-json"); name != "" {
		f, err := os.Create(name)
		if err != nil {
			return nil, nil, fmt.Errorf("--stats-json: %w", err)
		}
		js = json.NewEncoder(f)
		closeFn = func() error {
			if err := f.Close(); werr == nil && err != nil {
				werr = fmt.Errorf("--stats-json: %w", err)
			}
			return werr
		}
	}
	w, epochs := c.App.Writer, c.Int("epochs")
	return func(s rt.EpochStats) {
		printEpoch(w, s, epochs)
		if js != nil && werr == nil {
			if err := js.Encode(s); err != nil {
				werr = fmt.Errorf("--stats-json: %w", err)
			}
		}
	}, closeFn, nil
}

func printEpoch(w io.Writer, s rt.EpochStats, epochs int) {
	fmt.Fprintf(w, "epoch %d/%d: %s files, %s delivered by %d ranks in %.2fs: %s files/s, %s/s\n",
		s.Epoch, epochs, comma(s.FilesDelivered), ibytes(s.BytesDelivered), s.Ranks, s.Seconds,
		comma(int64(s.FilesPerSecond)), ibytes(int64(s.BytesPerSecond)))
	early := ""
	if s.EarlyReads > 0 {
		early = fmt.Sprintf(", %s of them while the previous epoch drained", comma(s.EarlyReads))
	}
	fmt.Fprintf(w, "  chunks   %s read from storage, %s (%.2f× what was delivered)%s; %s loaded whole into memory (%s)\n",
		comma(s.StorageReads), ibytes(s.BytesRead), s.ReadAmplification, early, comma(s.ChunkReads), ibytes(s.BytesLoaded))
	if s.FilesSkipped > 0 {
		fmt.Fprintf(w, "  damaged  %s left out: damaged on storage (--on-damage skip; each named in the log when first found)\n", plural(s.FilesSkipped, "file"))
	}
	fmt.Fprintf(w, "  memory   %s local hits, %s requests waited for their chunk's read; at most %s held by one rank\n",
		comma(s.LocalHits), comma(s.Waits), ibytes(s.PeakMemBytes))
	fmt.Fprintf(w, "  first    the epoch's first request waited %s for its file (the slowest rank)\n", seconds(s.FirstWaitSeconds))
	fmt.Fprintf(w, "  network  %s remote requests, %s files pushed ahead, %s prefetch hits; %s files (%s) from other ranks, %s sent\n",
		comma(s.RemoteRequests), comma(s.PrefetchPushes), comma(s.PrefetchHits), comma(s.RemoteFiles), ibytes(s.RemoteBytes), ibytes(s.NetworkBytes))
	if s.Verified {
		fmt.Fprintf(w, "  clients  waited %.2fs in all\n", s.StallSeconds)
	}
	if s.IdleSeconds >= 0.1 {
		fmt.Fprintf(w, "  idle     %.2fs before the first request, using at most %.1f%% of a core on any rank\n",
			s.IdleSeconds, 100*s.IdleCPUSeconds/s.IdleSeconds)
	}
	switch {
	case s.OK() && s.FilesBefore > 0:
		fmt.Fprintf(w, "  check    resumed: every position from the restart on answered, no file twice (%s delivered before the restart)\n",
			comma(s.FilesBefore))
		return
	case s.OK() && s.FilesExpected != s.DatasetFiles:
		fmt.Fprintf(w, "  check    every position of the clients' traces answered, no file twice (they cover %s of %s files; %s loaded and never asked for)\n",
			comma(s.FilesExpected), comma(s.DatasetFiles), comma(s.FilesLeft))
		return
	case s.OK() && s.FilesSkipped > 0:
		fmt.Fprintf(w, "  check    every file delivered exactly once but the %s left out as damaged\n", comma(s.FilesSkipped))
		return
	case s.OK() && s.Verified:
		fmt.Fprintf(w, "  check    every file delivered exactly once; bytes and labels match the index\n")
		return
	case s.OK():
		fmt.Fprintf(w, "  check    every file delivered exactly once (the clients check the bytes)\n")
		return
	}
	if s.EndedEarly {
		fmt.Fprintf(w, "  ended    early, by a client: %s of %s files delivered; %s loaded and never asked for\n",
			comma(s.FilesDelivered), comma(s.FilesExpected), comma(s.FilesLeft))
		return
	}
	fmt.Fprintf(w, "  CHECK FAILED: %s expected, %s delivered, %s duplicates, %s missing, %s failed, %s checksum errors, %s left in memory\n",
		comma(s.FilesExpected), comma(s.FilesDelivered), comma(s.DuplicateDeliveries), comma(s.FilesMissing),
		comma(s.FailedDeliveries), comma(s.ChecksumErrors), comma(s.FilesLeft))
}
