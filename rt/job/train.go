package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

// training is the training processes of one node.
type training struct {
	log   io.Writer
	cmd   []string
	node  string
	rank  int
	procs []*exec.Cmd
	exits chan exit
	// exited marks each process that exited (its group was then killed:
	// a group is not signalled again, its number may be reused).
	exited []atomic.Bool
	// all is closed once every process exited; over once they all exited
	// with 0, or one failed (failed is then set).
	all, over chan struct{}
	failed    *Exit
	// forwarded is set once a signal of the rank's was passed on: stop
	// then gives the processes trainGrace to act on it.
	forwarded atomic.Bool
}

// trainGrace is how long training processes get to end by themselves
// once told to (a signal passed on, or SIGTERM), before SIGKILL.
const trainGrace = 5 * time.Second

// exit is how a training process ended.
type exit struct {
	i    int // its index on the node
	code int // 128 + the signal for one ended by a signal
	how  string
}

// startTraining starts the node's training processes; attach is the
// rank's attach directory, master the address of rank 0's node.
func startTraining(cfg Config, env launch.Env, comm collectives.Comm, attach, master string) (*training, error) {
	procs := max(cfg.ProcsPerNode, 1)
	t := &training{log: cfg.Site.Log, cmd: cfg.Train, node: env.Node, rank: comm.Rank(), exits: make(chan exit, procs),
		exited: make([]atomic.Bool, procs), all: make(chan struct{}), over: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range procs {
		c := exec.Command(cfg.Train[0], cfg.Train[1:]...)
		c.Env = trainEnv(os.Environ(), comm.Rank(), comm.Size(), procs, i, env.LocalRank, attach, master)
		c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
		// SIGKILL should the rank die: it dies only when the job is ending
		// anyway (ended, or killed by its launcher before it could stop its
		// training), and a training process that ignores SIGTERM must not
		// outlive it
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			t.signal(syscall.SIGKILL)
			return nil, fmt.Errorf("the training command %s on node %s: %w", quote(cfg.Train), env.Node, err)
		}
		t.procs = append(t.procs, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Wait()
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // what it left of its group (DataLoader workers)
			t.exited[i].Store(true)
			t.exits <- exitOf(i, c, err)
		}()
	}
	go func() { wg.Wait(); close(t.all) }()
	fmt.Fprintf(cfg.Site.Log, "brandrt: rank %d: started the training command on node %s (%d process%s): %s\n",
		comm.Rank(), env.Node, procs, map[bool]string{true: "", false: "es"}[procs == 1], quote(cfg.Train))
	return t, nil
}

// exitOf describes how process i ended, from its Wait.
func exitOf(i int, c *exec.Cmd, err error) exit {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exit{i: i, how: "status 0"}
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exit{i: i, code: 128 + int(ws.Signal()), how: "signal " + unix(ws.Signal())}
		}
		return exit{i: i, code: ee.ExitCode(), how: "status " + strconv.Itoa(ee.ExitCode())}
	}
	return exit{i: i, code: 1, how: err.Error()}
}

// unix names a signal as C does: SIGKILL.
func unix(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGABRT: "SIGABRT",
		syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE", syscall.SIGTERM: "SIGTERM", syscall.SIGBUS: "SIGBUS"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("%d (%v)", int(s), s)
}

// supervise waits for the training processes: once all exited with 0,
// the rank's training is over; the first that fails stops the rank and
// the node's others.
func (t *training) supervise(n *rt.Node, st *stopper) {
	defer close(t.over)
	for range t.procs {
		x := <-t.exits
		if x.code == 0 {
			continue
		}
		t.failed = &Exit{Code: x.code, Err: fmt.Errorf("the training command %s ended with %s on node %s (rank %d, training process %d of %d); the job ends",
			quote(t.cmd), x.how, t.node, t.rank, x.i, len(t.procs))}
		t.signal(syscall.SIGTERM)
		st.stop(t.failed, x.code)
		return
	}
	n.TrainingOver()
}

// wait waits, once the epochs are served, for the training to end, and
// returns its failure.
func (t *training) wait(ctx context.Context) error {
	select {
	case <-t.over:
	default:
		fmt.Fprintf(t.log, "brandrt: rank %d: every epoch served; waiting for the training command to end\n", t.rank)
		select {
		case <-t.over:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if t.failed != nil {
		return t.failed
	}
	return nil
}

// signal sends sig to the group of every training process still running.
func (t *training) signal(sig os.Signal) {
	for i, c := range t.procs {
		if !t.exited[i].Load() {
			_ = syscall.Kill(-c.Process.Pid, sig.(syscall.Signal))
		}
	}
}

// forward passes a signal the rank got on to the training processes.
func (t *training) forward(sig os.Signal) {
	t.forwarded.Store(true)
	t.signal(sig)
}

// stop ends the training processes still running: unless a signal was
// passed on to them already, SIGTERM; SIGKILL trainGrace later. It returns
// once every one has exited.
func (t *training) stop() {
	select {
	case <-t.all:
		return
	default:
	}
	if !t.forwarded.Load() {
		t.signal(syscall.SIGTERM)
	}
	select {
	case <-t.all:
	case <-time.After(trainGrace):
		t.signal(syscall.SIGKILL)
		<-t.all
	}
}

// trainEnv is the environment of training process i of procs on the node
// of rank (of ranks), as the package doc says: base without the MPI
// launcher's variables and those set here, then those.
func trainEnv(base []string, rank, ranks, procs, i, localRank int, attach, master string) []string {
	host, port, _ := net.SplitHostPort(master) // masterAddr's, host:port
	ours := []string{"RANK=" + strconv.Itoa(rank*procs+i), "WORLD_SIZE=" + strconv.Itoa(ranks*procs),
		"LOCAL_RANK=" + strconv.Itoa(i), "LOCAL_WORLD_SIZE=" + strconv.Itoa(procs), "GROUP_RANK=" + strconv.Itoa(rank),
		"MASTER_ADDR=" + host, "MASTER_PORT=" + port,
		shm.EnvAttach + "=" + filepath.Dir(attach), shm.EnvLocalRank + "=" + strconv.Itoa(localRank)}
	set := map[string]bool{}
	for _, kv := range ours {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	var out []string
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !set[name] && !launcherVar(name) {
			out = append(out, kv)
		}
	}
	return append(out, ours...)
}

// launcherVar reports whether name is one of the MPI launchers'
// variables, which the training command must not inherit: an MPI
// program in it would take itself for a rank of brandrt's job.
func launcherVar(name string) bool {
	for _, p := range []string{"OMPI_", "PMIX_", "PMI_", "MPI_LOCAL", "HYDRA_", "OPAL_", "PRTE_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// masterAddr returns where torch.distributed's processes meet, as rank 0
// decides: the MASTER_ADDR and MASTER_PORT of its environment when both
// are set, else its node and a port free there. Every rank calls it.
func masterAddr(comm collectives.Comm, nodes []string) (string, error) {
	mine := ""
	if comm.Rank() == 0 {
		if a, p := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); a != "" && p != "" {
			mine = net.JoinHostPort(a, p)
		} else if ln, err := net.Listen("tcp", ":0"); err == nil {
			mine = net.JoinHostPort(nodes[0], strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
			ln.Close()
		}
	}
	all, err := gatherStrings(comm, mine) // every rank gathers, whatever rank 0 found
	if err != nil {
		return "", err
	}
	if all[0] == "" {
		return "", fmt.Errorf("rank 0 found no free port for MASTER_PORT; set MASTER_ADDR and MASTER_PORT")
	}
	return all[0], nil
}

// quote writes a command as a shell would take it back.
func quote(cmd []string) string {
	q := make([]string, len(cmd))
	for i, a := range cmd {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
