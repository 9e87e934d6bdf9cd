package collectives

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() { runtime.LockOSThread() }

const childEnv = "BRANDRT_COLLECTIVES_CHILD"

// TestMain doubles as an MPI program: under mpirun, with childEnv set, it
// runs the collective checks instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child checks rank, size, Allreduce and Barrier in every rank.
func child() error {
	w, err := Init()
	if err != nil {
		return err
	}
	defer w.Finalize()
	n, r := int64(w.Size()), int64(w.Rank())
	sum, err := w.AllreduceSum([]int64{r + 1, 1})
	if err != nil {
		return err
	}
	if want := n * (n + 1) / 2; sum[0] != want || sum[1] != n {
		return fmt.Errorf("rank %d: allreduce gave %v, want [%d %d]", r, sum, want, n)
	}
	w.Barrier()
	fmt.Printf("rank %d of %d ok\n", r, n)
	return nil
}

// MpirunArgs are the mpirun options this machine needs: root, more ranks
// than cores, and no binding (a bound rank gets one core).
var mpirunArgs = []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}

func TestCollectivesUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatal("mpirun not found: install Open MPI (make deps)")
	}
	for _, np := range []int{1, 3} {
		args := append(append([]string{}, mpirunArgs...), "-np", fmt.Sprint(np), os.Args[0], "-test.run=^$")
		out, err := runGroup(60*time.Second, mpirun, args, childEnv+"=1")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", np, err, out)
		}
		if got := strings.Count(string(out), " ok\n"); got != np {
			t.Fatalf("mpirun -np %d: %d ranks reported ok\n%s", np, got, out)
		}
	}
}

// runGroup runs a command in its own process group with a deadline; on
// timeout the whole group (mpirun and its ranks) gets SIGTERM, then
// SIGKILL, so that nothing outlives the test.
func runGroup(timeout time.Duration, name string, args []string, env ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers, if any
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	return out, err
}

func TestLibraryVersion(t *testing.T) {
	if v := LibraryVersion(); !strings.Contains(v, "MPI") {
		t.Fatalf("library version %q", v)
	}
}
