package collectives

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/launch"
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
	msg := []byte(nil)
	if r == n-1 {
		msg = []byte(strings.Repeat("brandrt", 1000))
	}
	got, err := w.Bcast(msg, int(n-1))
	if err != nil || string(got) != strings.Repeat("brandrt", 1000) {
		return fmt.Errorf("rank %d: bcast gave %d bytes, %v", r, len(got), err)
	}
	w.Barrier()
	fmt.Printf("rank %d of %d ok\n", r, n)
	return nil
}

func TestCollectivesUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatal("mpirun not found: install Open MPI (make deps)")
	}
	for _, np := range []int{1, 3} {
		args := append(append([]string{}, launch.MpirunArgs...), "-np", fmt.Sprint(np), os.Args[0], "-test.run=^$")
		out, err := launch.Run(60*time.Second, []string{childEnv + "=1"}, mpirun, args...)
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", np, err, out)
		}
		if got := strings.Count(string(out), " ok\n"); got != np {
			t.Fatalf("mpirun -np %d: %d ranks reported ok\n%s", np, got, out)
		}
	}
}

func TestLibraryVersion(t *testing.T) {
	if v := LibraryVersion(); !strings.Contains(v, "MPI") {
		t.Fatalf("library version %q", v)
	}
}
