package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

// Config configures one rank of a job.
type Config struct {
	// Runtime is what the user chose for the rank; Site what it is given
	// (its Log, say): the job fills in the rest of the site (the node's
	// and the cgroup's memory, the nodes' names, staged copies, the
	// memory shared with the training processes).
	Runtime rt.Config
	Site    rt.Site
	// Train, when set, is the training command, started on every node
	// once the node's rank serves, with the environment Train describes.
	Train []string
	// ProcsPerNode is how many training processes each node starts (one
	// per GPU, say); each reads its share of the rank's trace. 0 means 1.
	ProcsPerNode int
	// AllowSharedNode lets ranks share a node; by default a job whose
	// ranks share one is refused (launch.OneRankPerNode).
	AllowSharedNode bool
	// Stage, when set, is a node-local directory: before the first epoch
	// each rank copies its shards there from Runtime.Chunks, verified, or
	// reuses verified copies of an earlier job (chunk/stage), and reads
	// the copies; a chunk it finds damaged in a copy it reads from
	// Runtime.Chunks (rt.Site.Source).
	Stage string
	// Prepare, when set, runs on every rank once the ranks have joined the
	// job, before the dataset is opened, with the runtime's configuration
	// and the site to complete (its Report and Order, say). The function it returns,
	// when not nil, runs once the rank is done. An error of either ends
	// the job.
	Prepare func(comm collectives.Comm, cfg rt.Config, site *rt.Site) (after func() error, err error)
}

// Exit is an error that ends the process with a status of its own: the
// training command's.
type Exit struct {
	Err  error
	Code int
}

func (e *Exit) Error() string { return e.Err.Error() }
func (e *Exit) Unwrap() error { return e.Err }

// printed marks an error Run has written to the log already.
type printed struct{ error }

func (p printed) Unwrap() error { return p.error }

// Printed reports whether Run wrote err to the log already.
func Printed(err error) bool { return errors.As(err, new(printed)) }

// together marks an error that every rank returned at the same point
// (its verdict came from values every rank holds), so each can stop
// normally without ending the job for the others.
type together struct{ error }

func (t together) Unwrap() error { return t.error }

// Run runs this process's rank of the job until its epochs are done, or
// until the training command ends on every node. A rank that fails alone
// (an error, a signal, a panic, its training command failing) ends every
// rank of the job (MPI_Abort) with a message naming it and the cause,
// and does not return; errors that every rank meets together (a dataset
// that does not open, flags that do not fit the job) are returned on
// every rank, printed. Call it on the main thread (MPI's).
func Run(cfg Config) (err error) {
	if cfg.Site.Log == nil {
		cfg.Site.Log = io.Discard
	}
	log := cfg.Site.Log
	env, err := launch.FromEnv()
	if err != nil {
		return err
	}
	if err := env.Lifeline(); err != nil {
		return err
	}
	comm, done, err := joinWorld(env)
	if err != nil {
		return err
	}
	defer finishJob(log, comm, done, &err)
	defer recoverPanic(&err)
	// A rank that fails from here on ends the job through MPI (finishJob),
	// which leaves nothing behind; one that exits before joining it
	// leaves the others' shared-memory segments in /dev/shm.
	nodes, err := gatherStrings(comm, env.Node)
	if err != nil {
		return err
	}
	if !cfg.AllowSharedNode {
		if err := launch.OneRankPerNode(nodes); err != nil {
			return together{err}
		}
	}
	if cfg.Prepare != nil {
		// perr, not err: the deferred after must set Run's own error
		// (a --order-out that cannot be written was lost, exit status 0)
		after, perr := cfg.Prepare(comm, cfg.Runtime, &cfg.Site)
		if perr != nil {
			return perr
		}
		if after != nil {
			defer func() {
				if aerr := after(); err == nil {
					err = aerr
				}
			}()
		}
	}
	return serve(cfg, env, comm, nodes)
}

// finishJob ends a rank. Without an error, or with one that every rank
// returned together, MPI is finalized as usual, the error printed first
// (printed after MPI_Finalize it could be lost: once one rank has exited
// with an error, mpirun ends the others). Any other error of one rank
// ends the whole job (MPI_Abort), with a message naming the rank and the
// cause: the other ranks would wait for it forever.
func finishJob(w io.Writer, comm collectives.Comm, done func(), err *error) {
	if *err == nil || comm.Size() == 1 || rt.EveryRank(*err) || errors.As(*err, new(together)) {
		if *err != nil {
			if comm.Rank() == 0 || !errors.As(*err, new(together)) { // said alike by every rank: rank 0 says it
				fmt.Fprintln(w, "brandrt:", *err)
			}
			*err = printed{*err}
		}
		done()
		return
	}
	fmt.Fprintf(w, "brandrt: rank %d: %v\nbrandrt: rank %d: ending the job\n", comm.Rank(), *err, comm.Rank())
	if errors.As(*err, new(interrupted)) {
		time.Sleep(interruptLinger) // the other ranks, signalled too, say so
	}
	*err = printed{*err}
	abortJob(comm, ExitCode(*err))
}

// ExitCode is the status a process whose Run returned err exits with:
// the training command's (Exit), else 1.
func ExitCode(err error) int {
	var ex *Exit
	if errors.As(err, &ex) && ex.Code != 0 {
		return ex.Code
	}
	return 1
}

// abortJob ends every rank of the job with code. Should MPI_Abort not end
// this process (its launcher is gone), it exits anyway.
func abortJob(comm collectives.Comm, code int) {
	time.AfterFunc(5*time.Second, func() { os.Exit(code) })
	if comm.Size() == 1 {
		os.Exit(code)
	}
	comm.Abort(code)
}

// recoverPanic turns a panic of the goroutine deferring it into *err,
// with the stack, so that the job ends naming the rank (finishJob)
// rather than with a bare crash.
func recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
	}
}

// listen opens the rank's attach point for training processes (see
// rt.RingBytes for their rings). Files read into the arena reach them
// without a copy.
func listen(n *rt.Node, env launch.Env, rank int, arena *shm.Arena, log io.Writer) (*shm.Server, error) {
	own, received := n.ReaderBytes(), n.ReceivedBytes()
	o := shm.Options{Slots: 64, Data: uint64(rt.RingBytes(n.MaxFileSize())), Events: n.ClientEvents(), Arena: arena,
		Ranks: n.Mapping().Ranks(), Seed: n.Config().Seed, Epochs: uint32(n.Config().Epochs), MaxTrace: n.Mapping().Files(),
		StallWarn: n.Config().PeerWarn, Readers: n.Readers(), ReaderBytes: uint64(own + received)}
	// A file answered and held that the budget does not keep takes memory
	// of its own: one of the shard's beyond the budget
	// (rt.Footprint.Answered), or one of another rank's, whose receive
	// buffer left --remote-mem once answered (rt.Footprint.Received). A
	// read counts as the largest file that may answer it until it is. A
	// single rank whose budget holds its shard keeps each of its files.
	switch {
	case received > 0:
		o.Largest = uint64(n.LargestFile())
	case own > 0:
		o.Largest = uint64(n.MaxFileSize())
	}
	// What DataLoader workers have handed to their training processes and
	// those still hold (a few batches, unless they keep files) may take
	// rt.HandCap beyond the budget: a term of the rank's footprint
	// (rt.Footprint.Handed). Beyond it, the processes get copies.
	o.HandCap = uint64(n.HandCap())
	job, err := json.Marshal(n.JobPlace())
	if err != nil {
		return nil, err
	}
	o.Job = job
	if n.Config().ClientTraces {
		o.Traces = n.Traces()
	}
	if n.Config().MayResume() {
		o.Starts, o.FirstWord = n.Starts(), !n.Config().Resume
	}
	srv, err := shm.Listen(shm.DefaultDir(env.LocalRank), rank, o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "brandrt: rank %d: training processes attach at %s\n", rank, srv.Dir())
	return srv, nil
}

// nodeMemory returns the node's memory in bytes.
func nodeMemory() (int64, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("the node's memory: %w", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}

// joinWorld returns the MPI world when a launcher started several
// processes, else a world of one without MPI.
func joinWorld(env launch.Env) (collectives.Comm, func(), error) {
	if env.Alone() {
		return collectives.NewLocal(1)[0], func() {}, nil
	}
	w, err := initWorld()
	if err != nil {
		return nil, nil, err
	}
	return w, w.Finalize, nil
}

// gatherStrings returns every rank's s, in rank order.
func gatherStrings(comm collectives.Comm, s string) ([]string, error) {
	send := make([]int32, len(s))
	for i := range len(s) {
		send[i] = int32(s[i])
	}
	all, counts, err := comm.Allgatherv(send)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(counts))
	at := 0
	for r, c := range counts {
		b := make([]byte, c)
		for i := range b {
			b[i] = byte(all[at+i])
		}
		out[r], at = string(b), at+c
	}
	return out, nil
}
