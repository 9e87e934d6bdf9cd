package job

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt"
)

// WatcherArg is the first argument of the process that watches a rank
// for the kernel's OOM killer (Watch): the program the rank runs, run
// again with it, runs Watch (see init).
const WatcherArg = "__brandrt-oom-watch"

// init makes any program that links this package, a test binary as
// much as brandrt, the watcher when it is run with WatcherArg: it runs
// Watch and nothing else (a test binary run so must not run its tests).
func init() {
	if len(os.Args) > 1 && os.Args[1] == WatcherArg {
		os.Exit(Watch(os.Args[2:]))
	}
}

// oomWatch is what a rank tells its watcher: who it is and what its
// memory cgroup had seen when it started.
type oomWatch struct {
	rank, pid      int
	cg             launch.MemCgroup
	kills          int64 // the cgroup's OOM kills before
	mem, footprint int64
}

func (w oomWatch) args() []string {
	return []string{WatcherArg, strconv.Itoa(w.rank), strconv.Itoa(w.pid), strconv.Itoa(w.cg.Version), w.cg.Dir,
		strconv.FormatInt(w.cg.Limit, 10), w.cg.LimitDir, strconv.FormatInt(w.kills, 10),
		strconv.FormatInt(w.mem, 10), strconv.FormatInt(w.footprint, 10)}
}

// watchOOM starts a process that outlives the rank: should the rank die
// without saying goodbye (the function returned, called when it ends
// normally or with an error it reports itself), and the OOM kills of its
// memory cgroup have risen meanwhile, it says that the kernel killed the
// rank for memory, where mpirun alone would only say "killed". It
// watches the rank through a pipe, whose end the rank holds (closed by
// the kernel when the rank dies), from its own session, so that a
// launcher ending the rank's process group leaves it to speak.
func watchOOM(w oomWatch) (goodbye func(), err error) {
	if w.cg.Version == 0 {
		return func() {}, nil
	}
	if w.kills, err = w.cg.OOMKills(); err != nil { // nothing to watch with: say so, and serve
		fmt.Fprintf(os.Stderr, "brandrt: rank %d: the memory cgroup's OOM kills cannot be read (%v): an OOM kill of the rank will not be named\n", w.rank, err)
		return func() {}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe, w.args()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, nil, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		wr.Close()
		return nil, fmt.Errorf("start the OOM watcher: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return func() {
		_, _ = wr.Write([]byte("bye"))
		wr.Close()
	}, nil
}

// Watch is the watcher watchOOM starts, with its arguments after
// WatcherArg; it returns the status to exit with.
func Watch(args []string) int {
	w, err := parseWatch(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "brandrt: OOM watcher:", err)
		return 2
	}
	b, _ := io.ReadAll(os.Stdin) // until the rank closes its end, or dies
	if string(b) == "bye" {
		return 0
	}
	// The kernel counts the kill before it frees the process's memory
	// (and so before the pipe's end closes); look once more all the same.
	for range 2 {
		if n, err := w.cg.OOMKills(); err == nil && n > w.kills {
			fmt.Fprintln(os.Stderr, w.killed())
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0
}

// killed is what the watcher says of a rank that died while its cgroup
// counted an OOM kill: the rank itself, most likely, but the kernel may
// have killed another process of the cgroup.
func (w oomWatch) killed() string {
	limit := "sets no limit (the node's memory ran out)"
	switch {
	case w.cg.Limit > 0 && w.cg.LimitDir == w.cg.Dir:
		limit = fmt.Sprintf("allows %s", humanize.IBytes(uint64(w.cg.Limit)))
	case w.cg.Limit > 0:
		limit = fmt.Sprintf("allows %s (the limit of %s)", humanize.IBytes(uint64(w.cg.Limit)), w.cg.LimitDir)
	}
	return fmt.Sprintf("brandrt: rank %d (pid %d) ended without a word while its memory cgroup %s counted an OOM kill: most likely the kernel's OOM killer killed it "+
		"(or another process of the cgroup, and mpirun the rank after); the cgroup %s; "+
		"the rank was to take at most %s (--mem %s and the rest: see brandrt serve --help on memory), "+
		"and everything else in the cgroup (training processes, other programs) counts too",
		w.rank, w.pid, w.cg.Dir, limit, humanize.IBytes(uint64(w.footprint)), humanize.IBytes(uint64(w.mem)))
}

func parseWatch(args []string) (oomWatch, error) {
	if len(args) != 9 {
		return oomWatch{}, fmt.Errorf("%d arguments, want 9", len(args))
	}
	var w oomWatch
	var n [7]int64
	for i, j := range []int{0, 1, 2, 4, 6, 7, 8} {
		v, err := strconv.ParseInt(args[j], 10, 64)
		if err != nil {
			return w, fmt.Errorf("argument %d: %w", j+1, err)
		}
		n[i] = v
	}
	w.rank, w.pid, w.cg.Version, w.cg.Limit, w.kills, w.mem, w.footprint = int(n[0]), int(n[1]), int(n[2]), n[3], n[4], n[5], n[6]
	w.cg.Dir, w.cg.LimitDir = args[3], args[5]
	return w, nil
}

// memCgroup reads the rank's memory cgroup's limit into site: Open checks
// the rank's memory against it, and takes --mem P%cgroup from it. A
// cgroup that cannot be read is said and not checked.
func memCgroup(site *rt.Site) (launch.MemCgroup, error) {
	cg, err := launch.ReadMemCgroup("/")
	if err != nil {
		fmt.Fprintf(site.Log, "brandrt: the memory cgroup: %v (the rank's memory is not checked against it)\n", err)
		cg = launch.MemCgroup{}
	}
	if cg.Limit > 0 {
		site.MemLimitBytes, site.MemLimitFrom = cg.Limit, cg.LimitFile()
	}
	return cg, nil
}

// startWatch starts the rank's OOM watcher (watchOOM). The function
// returned says goodbye to it.
func startWatch(n *rt.Node, cg launch.MemCgroup, rank int) (func(), error) {
	return watchOOM(oomWatch{rank: rank, pid: os.Getpid(), cg: cg, mem: n.Mapping().MemBytes(rank), footprint: n.Footprint().Total()})
}
