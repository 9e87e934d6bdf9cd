package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Slurm is a one-node Slurm cluster on localhost that belongs to one test:
// its own munged (own key, own socket), slurmctld and slurmd, each run in
// the foreground as a child of the test process, on ports picked free at
// start. Nothing is shared with another Slurm on the machine: the clients
// find this one through SLURM_CONF (Env), and a second StartSlurm, at the
// same time or after, makes a second cluster.
type Slurm struct {
	// Dir holds everything the cluster writes: slurm.conf, the munge key
	// and socket, slurmctld's state, slurmd's spool, the daemons' logs and
	// pid files, the jobs' temporary directory (TmpFS, where srun --mpi=pmix
	// puts its spmix_appdir_* directories) and job-<id>.out.
	Dir string
	// Conf is Dir/slurm.conf.
	Conf string
	// Timeout bounds each Sbatch, from submission to the job's end; a job
	// still running then is cancelled and the test fails. StartSlurm sets
	// it to 5 minutes.
	Timeout time.Duration

	bin     map[string]string // command name → path
	daemons []*daemon         // in start order
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and is reaped
}

// partition is the cluster's one partition.
const partition = "brandrt"

// slurmCommands are the programs a cluster needs; Debian's slurm-wlm and
// munge install them.
var slurmCommands = []string{"munged", "munge", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel"}

// StartSlurm starts a one-node Slurm cluster in a new temporary directory
// and waits until its node is idle. Its node has 4 CPUs whatever the
// machine has (SlurmdParameters=config_overrides), so a job of up to 4
// tasks fits on a machine of 1 or 2 cores. MpiDefault is none: a script
// asks srun for --mpi=pmix. The test's cleanup cancels the jobs still
// there, stops the three daemons it started, by PID, waits for them to
// exit, and removes Dir.
//
// The test is skipped where Slurm is missing and cannot be installed (no
// apt-get or not root), and where the test does not run as root (slurmd
// must); it fails where .ci/deps could install Slurm but has not.
func StartSlurm(t *testing.T) *Slurm {
	t.Helper()
	s := &Slurm{Timeout: 5 * time.Minute, bin: findSlurm(t)}
	dir, err := os.MkdirTemp("", "brandrt-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	s.Dir, s.Conf = dir, filepath.Join(dir, "slurm.conf")
	t.Cleanup(func() { s.stop(t) })
	s.writeFiles(t)
	sock := filepath.Join(dir, "munge", "socket")
	s.start(t, "munged", "--foreground", "--socket", sock, "--key-file", filepath.Join(dir, "munge", "key"),
		"--pid-file", filepath.Join(dir, "munged.pid"), "--seed-file", filepath.Join(dir, "munge", "seed"))
	s.await(t, "munged to answer", func() bool { return s.check("munge", "--socket", sock, "--no-input") == nil })
	s.start(t, "slurmctld", "-D", "-f", s.Conf)
	s.await(t, "slurmctld to answer", func() bool { return s.check("scontrol", "ping") == nil })
	s.start(t, "slurmd", "-D", "-f", s.Conf, "-N", "localhost")
	s.await(t, "the node to be idle", func() bool {
		out, err := s.output(10*time.Second, "sinfo", "--noheader", "--format", "%T")
		return err == nil && strings.TrimSpace(out) == "idle"
	})
	return s
}

// findSlurm returns where each of slurmCommands is, or ends the test.
func findSlurm(t *testing.T) map[string]string {
	t.Helper()
	bin := map[string]string{}
	for _, name := range slurmCommands {
		p, err := exec.LookPath(name)
		if err != nil {
			p, err = exec.LookPath("/usr/sbin/" + name) // not on every PATH
		}
		if err != nil {
			if _, apt := exec.LookPath("apt-get"); apt == nil && os.Geteuid() == 0 {
				t.Fatalf("testkit: %s not found; bash .ci/deps installs slurm-wlm and munge (make test runs it)", name)
			}
			t.Skipf("testkit: Slurm is not installed (%s not found) and cannot be installed here (needs apt-get and root): skipping", name)
		}
		bin[name] = p
	}
	if os.Geteuid() != 0 {
		t.Skip("testkit: a one-node Slurm needs root (slurmd runs the jobs as their user): skipping")
	}
	return bin
}

// writeFiles makes Dir's directories, the munge key and slurm.conf.
func (s *Slurm) writeFiles(t *testing.T) {
	t.Helper()
	// munged wants every directory above its socket searchable by all.
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"munge", "state", "spool", "tmp"} {
		if err := os.Mkdir(filepath.Join(s.Dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(s.Dir, "munge", "key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Conf, []byte(s.conf(FreePort(t), FreePort(t), randomJobID())), 0o644); err != nil {
		t.Fatal(err)
	}
}

// conf is slurm.conf: root runs everything, no cgroups, no accounting,
// no systemd; processes are tracked through /proc. Three settings make
// short jobs quick: batch_sched_delay=0 lets the scheduler start a batch
// job at its next pass (here about once a second, the first about 3 s
// after slurmctld starts, with this setting or without), MinJobAge=4
// keeps sbatch --wait polling every 2 s (it lengthens its poll while the
// poll is under half of MinJobAge), and KillWait=5 lets a cancelled job
// die quickly.
func (s *Slurm) conf(ctldPort, slurmdPort, firstJob int) string {
	d := s.Dir
	return fmt.Sprintf(`# A one-node cluster for a brandrt test (internal/testkit).
ClusterName=brandrt-test
SlurmctldHost=localhost
SlurmctldPort=%d
SlurmdPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%s/munge/socket
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/slurmd.pid
SlurmctldLogFile=%s/slurmctld.log
SlurmdLogFile=%s/slurmd.log
TmpFS=%s/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId=%d
MinJobAge=4
KillWait=5
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 RealMemory=1024 State=UNKNOWN
PartitionName=%s Nodes=localhost Default=YES MaxTime=INFINITE State=UP
`, ctldPort, slurmdPort, d, d, d, d, d, d, d, d, firstJob, partition)
}

// FreePort returns a TCP port nothing listens on now: one the kernel
// gave a listener, which is then closed.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// randomJobID is where job IDs start, random so that two clusters on one
// machine name their jobs (and the jobs' files) differently.
func randomJobID() int {
	n, _ := rand.Int(rand.Reader, big.NewInt(50_000_000))
	return 1_000_000 + int(n.Int64())
}

// Env returns the environment for Slurm's commands against this cluster:
// the test's own, less every SLURM_, SBATCH_, SALLOC_ and SRUN_ variable
// (an enclosing Slurm job's), plus SLURM_CONF naming Conf.
func (s *Slurm) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "SLURM_"), strings.HasPrefix(name, "SBATCH_"),
			strings.HasPrefix(name, "SALLOC_"), strings.HasPrefix(name, "SRUN_"):
		default:
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+s.Conf)
}

// output runs one of slurmCommands against the cluster, with a deadline.
func (s *Slurm) output(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin[name], args...)
	cmd.Env = s.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), err
}

// Command runs one of Slurm's commands (scontrol, squeue, …) against
// the cluster, within 10 s, and returns its output.
func (s *Slurm) Command(name string, args ...string) (string, error) {
	return s.output(10*time.Second, name, args...)
}

func (s *Slurm) check(name string, args ...string) error {
	_, err := s.output(10*time.Second, name, args...)
	return err
}

// start starts a daemon in the foreground, its output in Dir/<name>.out.
// It gets SIGTERM if the test process dies first.
func (s *Slurm) start(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(s.Dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the daemon has its own descriptor
	cmd := exec.Command(s.bin[name], args...)
	cmd.Env = s.Env()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start %s: %v", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	s.daemons = append(s.daemons, d)
}

// await polls ready every 50 ms for up to 30 s; a daemon that exits
// meanwhile ends the test at once, with the logs.
func (s *Slurm) await(t *testing.T, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(50 * time.Millisecond) {
		for _, d := range s.daemons {
			select {
			case <-d.done:
				t.Fatalf("testkit: %s exited (%v) while waiting for %s\n%s", d.name, d.cmd.ProcessState, what, s.logs())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testkit: waited 30s for %s\n%s", what, s.logs())
		}
	}
}

// logs returns the end of each daemon's log, for a failure: its log file,
// or what it wrote to its stderr where it has none (munged, or a daemon
// that failed before it opened its log).
func (s *Slurm) logs() string {
	var b strings.Builder
	for _, names := range [][]string{{"munged.out"}, {"slurmctld.log", "slurmctld.out"}, {"slurmd.log", "slurmd.out"}} {
		for _, name := range names {
			data, err := os.ReadFile(filepath.Join(s.Dir, name))
			if err != nil || len(data) == 0 {
				continue
			}
			if len(data) > 4000 {
				data = data[len(data)-4000:]
			}
			fmt.Fprintf(&b, "--- %s\n%s\n", name, data)
			break
		}
	}
	return b.String()
}

// stop is StartSlurm's cleanup.
func (s *Slurm) stop(t *testing.T) {
	if s.running("slurmctld") {
		s.cancelJobs(t, "--partition", partition)
	}
	if t.Failed() {
		t.Logf("testkit: the end of the Slurm cluster's logs\n%s", s.logs())
	}
	s.stopDaemons(t, "slurmd", "slurmctld") // munged last: both use it to the end
	s.stopDaemons(t, "munged")
	if err := os.RemoveAll(s.Dir); err != nil {
		t.Error(err)
	}
}

func (s *Slurm) running(name string) bool {
	for _, d := range s.daemons {
		if d.name == name {
			select {
			case <-d.done:
				return false
			default:
				return true
			}
		}
	}
	return false
}

// stopDaemons sends SIGTERM to the named daemons at once, then waits up to
// 15 s for each to exit before it sends SIGKILL.
func (s *Slurm) stopDaemons(t *testing.T, names ...string) {
	var stopping []*daemon
	for _, d := range s.daemons {
		for _, name := range names {
			if d.name == name && d.cmd.Process.Signal(syscall.SIGTERM) == nil {
				stopping = append(stopping, d)
			}
		}
	}
	for _, d := range stopping {
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Errorf("testkit: %s (pid %d) still ran 15s after SIGTERM; killed", d.name, d.cmd.Process.Pid)
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	}
}
