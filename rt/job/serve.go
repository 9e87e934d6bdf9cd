package job

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

// serving is one rank of a job as serve builds it up, phase by phase:
// each phase sets what it makes here for the phases after it.
type serving struct {
	cfg   Config
	rc    rt.Config // cfg.Runtime (Chunks: the staged copy, with --stage)
	site  rt.Site   // cfg.Site, completed by the phases
	env   launch.Env
	comm  collectives.Comm
	nodes []string

	ctx    context.Context
	cancel context.CancelCauseFunc
	st     *stopper
	cg     launch.MemCgroup
	arena  *shm.Arena
	n      *rt.Node
	srv    *shm.Server // nil with in-process consumers
	tr     *training   // nil without a training command
	// done says that the job ends after the phase that set it
	// (--footprint: Open printed it)
	done bool
}

// A phase is one step of serving a rank. It returns what undoes it
// (nil: nothing), which serve calls when it returns, the last phase's
// first; an error ends the rank.
type phase func() (undo func(), err error)

// serve runs the node until its epochs are done, its training ended on
// every node, or a signal or a failure stops it: its phases in order
// (stop on a signal, stage the shard, find the memory, make the arena,
// open the shard, watch for the OOM killer, open the attach point, start
// the training), then the epochs, then the report.
func serve(cfg Config, env launch.Env, comm collectives.Comm, nodes []string) error {
	s := &serving{cfg: cfg, rc: cfg.Runtime, site: cfg.Site, env: env, comm: comm, nodes: nodes}
	s.site.Nodes = nodes
	for _, p := range []phase{s.signals, s.stage, s.memory, s.makeArena, s.open, s.watch, s.attach, s.train} {
		undo, err := p()
		if undo != nil {
			defer undo()
		}
		if err != nil || s.done {
			return err
		}
	}
	if err := s.run(); err != nil {
		return err
	}
	s.report()
	return nil
}

// signals makes the rank stop on a signal, from the start: staging,
// opening and starting the training may take a while.
func (s *serving) signals() (func(), error) {
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	served := make(chan struct{})
	s.st = &stopper{log: s.site.Log, comm: s.comm, cancel: s.cancel, served: served, grace: interruptGrace}
	if len(s.cfg.Train) > 0 {
		s.st.grace += trainGrace // the training's own, first
	}
	go s.st.onSignal()
	return func() { close(served); s.cancel(nil) }, nil
}

// stage copies the rank's shard to node-local disk (--stage), where it
// then reads it; a chunk damaged in a copy is read from the dataset.
func (s *serving) stage() (func(), error) {
	if s.cfg.Stage == "" {
		return nil, nil
	}
	dirs, err := stageHome(s.rc.Chunks, s.comm.Rank(), s.comm.Size(), s.cfg.Stage, s.site.Log, s.ctx.Done())
	if err != nil {
		return nil, err
	}
	s.site.Source, s.rc.Chunks, s.site.ShardDirs = s.rc.Chunks, dirs[0], dirs
	return nil, nil
}

// memory finds the node's memory and the rank's memory cgroup, which
// --mem may be given against.
func (s *serving) memory() (func(), error) {
	node, err := nodeMemory()
	if err != nil {
		return nil, err
	}
	s.site.NodeMemBytes = node
	s.cg, err = memCgroup(&s.site)
	return nil, err
}

// makeArena makes the memory the rank shares with its training
// processes. The files the rank keeps live in it, each in a buffer of
// its own, with in-process readers too: chunk reads put each file there
// (straight from storage where the file system allows), each file's
// memory goes back as soon as the file goes, and the rank's memory
// stays within its footprint (rt.Footprint). It is as large as the node's
// memory: it costs only the pages used.
func (s *serving) makeArena() (func(), error) {
	arena, err := shm.NewArena(uint64(s.site.NodeMemBytes))
	if err != nil {
		return nil, err
	}
	s.arena, s.site.Memory = arena, arena
	return func() { arena.Close() }, nil
}

// open opens the rank's shard (rt.Open, with every rank).
func (s *serving) open() (func(), error) {
	n, err := rt.Open(s.rc, s.site, s.comm)
	if err != nil {
		return nil, err
	}
	s.n, s.done = n, s.rc.FootprintOnly // Open printed the footprint
	unlimit := limitGo(n.Footprint())
	return func() { n.Close(); unlimit() }, nil
}

// limitGo gives Go's runtime the memory limit the rank's footprint
// leaves it (rt.Footprint.GoLimit), unless GOMEMLIMIT sets one: its
// collector then keeps the heap within what the footprint counts for it,
// where it would otherwise let the heap grow to twice what it holds live.
// A rank is a process of its own, so the limit is the rank's; the
// function it returns puts back the limit before, for a process that
// goes on after serving (tests that run serve in theirs).
func limitGo(f rt.Footprint) func() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	before := debug.SetMemoryLimit(f.GoLimit())
	return func() { debug.SetMemoryLimit(before) }
}

// watch starts the watcher that names the OOM killer if it kills the
// rank.
func (s *serving) watch() (func(), error) {
	goodbye, err := startWatch(s.n, s.cg, s.comm.Rank())
	if err != nil {
		return nil, err
	}
	hogForTests(s.comm.Rank())
	return goodbye, nil
}

// attach opens the attach point for training processes, unless the rank
// runs in-process consumers. On a signal it goes at once: the rank may
// be killed (mpirun ending the job) before its clean-ups run.
func (s *serving) attach() (func(), error) {
	var undo func()
	if s.rc.Consume == 0 {
		srv, err := listen(s.n, s.env, s.comm.Rank(), s.arena, s.site.Log)
		if err != nil {
			return nil, err
		}
		s.srv, undo = srv, func() { srv.Close() }
		s.n.WatchClients(srv.Clients)
		s.n.TellClients(srv.Awaiting)
		s.n.Announce(srv.StartEpoch, srv.Resumed)
		s.st.setUnlink(srv.Unlink)
	}
	return undo, context.Cause(s.ctx) // a signal while the shard opened
}

// train starts the training command beside the rank (cfg.Train), and its
// supervision. It runs on the main thread, which lives as long as the
// process: the training processes' parent-death signal follows the
// thread that started them.
func (s *serving) train() (func(), error) {
	if len(s.cfg.Train) == 0 {
		return nil, nil
	}
	master, err := masterAddr(s.comm, s.nodes)
	if err != nil {
		return nil, err
	}
	if s.tr, err = startTraining(s.cfg, s.env, s.comm, s.srv.Dir(), master); err != nil {
		return nil, err
	}
	s.n.SuperviseTraining()
	s.st.setTraining(s.tr)
	go s.tr.supervise(s.n, s.st)
	return s.tr.stop, nil
}

// run serves the epochs, then waits for the training to end.
//
// The loop runs off the main thread, which stays locked for MPI's Init
// and Finalize: on a locked thread every wait and yield of the loop would
// cost a handoff between OS threads (futex calls), which doubled the
// rank's CPU per file. MPI_THREAD_MULTIPLE allows its calls from any
// thread, and the loop still makes them all.
func (s *serving) run() error {
	errc := make(chan error, 1)
	go func() {
		var err error
		defer func() { errc <- err }()
		defer recoverPanic(&err)
		panicForTests(s.comm.Rank())
		_, err = s.n.Serve(s.ctx)
	}()
	if err := <-errc; err != nil {
		if cause := context.Cause(s.ctx); cause != nil {
			return cause
		}
		return err
	}
	if s.tr != nil {
		return s.tr.wait(s.ctx) // the epochs are done; the training may not be
	}
	return nil
}

// report says how the training processes read their files: in place or
// as copies, handed on or kept, and the memory shared with them.
func (s *serving) report() {
	srv, me, log := s.srv, s.comm.Rank(), s.site.Log
	if srv == nil {
		return
	}
	srv.Close() // every delivery written, so that the counts are whole
	handed := ""
	if h := srv.Handed.Load(); h > 0 {
		handed = fmt.Sprintf(" (%s of them handed on by DataLoader workers)", humanize.Comma(h))
	}
	fmt.Fprintf(log, "brandrt: rank %d: training processes read %s files in place in shared memory%s and %s as copies\n",
		me, humanize.Comma(srv.Shared.Load()), handed, humanize.Comma(srv.Copied.Load()))
	if n := srv.HandFull.Load(); n > 0 {
		fmt.Fprintf(log, "brandrt: rank %d: %s files that DataLoader workers could have handed on went through their pipes as bytes, "+
			"since the files their training processes held took the bound (--hand-mem %s): a larger --hand-mem hands them on, "+
			"and adds as much to the rank's footprint (a copy costs the worker and the training process CPU: with 1 MB files "+
			"on one node, a fifth of them as bytes took 9 times the CPU per file; BENCHMARKS.md)\n", me, humanize.Comma(n), humanize.IBytes(uint64(s.n.HandCap())))
	}
	if r := srv.Readers.Load(); r > 0 {
		fmt.Fprintf(log, "brandrt: rank %d: of the %s clients that read, %s handed their files on in place to their training process "+
			"and %s kept them (a transform in the DataLoader worker, in_place=False, a plain DataLoader or a forkserver)\n",
			me, humanize.Comma(r), humanize.Comma(srv.HandingOn.Load()), humanize.Comma(r-srv.HandingOn.Load()))
		if h := s.n.Footprint().Handed; srv.HandingOn.Load() == 0 && h > 0 {
			fmt.Fprintf(log, "brandrt: rank %d: none handed files on, so the %s its footprint counts for them went unused: "+
				"with such a training, serve --hand-mem 0 leaves them out\n", me, humanize.IBytes(uint64(h)))
		}
	}
	over := ""
	if n := s.arena.Overflows.Load(); n > 0 {
		over = fmt.Sprintf("; %s buffers it had no room for were lent from the rank's own memory", humanize.Comma(n))
	}
	if srv.Handed.Load() > 0 {
		bound := "no bound: the budget holds the shard"
		if c, bounded := s.n.HandBound(); bounded {
			bound = "their bound, --hand-mem, is " + humanize.IBytes(uint64(c))
		}
		over += fmt.Sprintf("; the files handed on to training processes held at most %s of it at once (%s)", humanize.IBytes(srv.HandedPeak()), bound)
	}
	fmt.Fprintf(log, "brandrt: rank %d: memory shared with them peaked at %s, for at most %s lent at once (--mem %s)%s\n",
		me, humanize.IBytes(s.arena.Resident()), humanize.IBytes(s.arena.PeakLent()), humanize.IBytes(uint64(s.n.Mapping().MemBytes(me))), over)
}
