package collectives

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
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

// child runs the checks in every rank and prints "rank R of N ok" once
// all of this rank's pass. A failing rank aborts the job, so mpirun exits
// non-zero and no rank is left waiting for it.
func child() error {
	w, err := Init()
	if err != nil {
		return err
	}
	for _, check := range []func(*World) error{checkReduce, checkBcast, checkAllgatherv, checkGatherv, checkPointToPoint} {
		if err := check(w); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", w.Rank(), err)
			w.Abort(1)
		}
	}
	w.Barrier()
	fmt.Printf("rank %d of %d ok\n", w.Rank(), w.Size())
	w.Finalize()
	return nil
}

func checkReduce(w *World) error {
	n, r := int64(w.Size()), int64(w.Rank())
	sum, err := w.AllreduceSum([]int64{r + 1, 1})
	if err != nil {
		return err
	}
	if want := n * (n + 1) / 2; sum[0] != want || sum[1] != n {
		return fmt.Errorf("allreduce sum gave %v, want [%d %d]", sum, want, n)
	}
	mx, err := w.AllreduceMax([]int64{r, -r, 7})
	if err != nil || !slices.Equal(mx, []int64{n - 1, 0, 7}) {
		return fmt.Errorf("allreduce max gave %v, %v; want [%d 0 7]", mx, err, n-1)
	}
	return nil
}

func checkBcast(w *World) error {
	want := strings.Repeat("brandrt", 1000)
	msg, root := []byte(nil), w.Size()-1
	if w.Rank() == root {
		msg = []byte(want)
	}
	got, err := w.Bcast(msg, root)
	if err != nil || string(got) != want {
		return fmt.Errorf("bcast gave %d bytes, %v", len(got), err)
	}
	return nil
}

// gatherPart is what rank r contributes to the Allgatherv check: ranks
// 1, 4, 7, … send nothing, the others 3+4r distinct values.
func gatherPart(r int) []int32 {
	if r%3 == 1 {
		return nil
	}
	part := make([]int32, 3+4*r)
	for i := range part {
		part[i] = int32(1000*r + i)
	}
	return part
}

// gathered is every rank's gatherPart of size ranks, in rank order, and
// each one's count.
func gathered(size int) (all []int32, counts []int) {
	for r := range size {
		all = append(all, gatherPart(r)...)
		counts = append(counts, len(gatherPart(r)))
	}
	return all, counts
}

// checkAllgatherv gathers gatherPart in one round, then with
// allgatherLimit lowered so it takes several, then with nothing to send.
func checkAllgatherv(w *World) error {
	defer func(l int) { allgatherLimit = l }(allgatherLimit)
	want, counts := gathered(w.Size())
	for _, limit := range []int{allgatherLimit, 7, 2} {
		allgatherLimit = limit
		all, c, err := w.Allgatherv(gatherPart(w.Rank()))
		if err != nil || !slices.Equal(all, want) || !slices.Equal(c, counts) {
			return fmt.Errorf("allgatherv (limit %d) gave %v %v, %v; want %v %v", limit, all, c, err, want, counts)
		}
	}
	all, c, err := w.Allgatherv(nil)
	if err != nil || len(all) != 0 || slices.ContainsFunc(c, func(n int) bool { return n != 0 }) || len(c) != w.Size() {
		return fmt.Errorf("empty allgatherv gave %v %v, %v", all, c, err)
	}
	return nil
}

// checkGatherv gathers gatherPart on the last rank and on rank 0, in one
// round and in several, then nothing: the root gets every rank's part in
// rank order, the others none; every rank gets the counts.
func checkGatherv(w *World) error {
	defer func(l int) { allgatherLimit = l }(allgatherLimit)
	want, counts := gathered(w.Size())
	for _, root := range []int{w.Size() - 1, 0} {
		for _, limit := range []int{allgatherLimit, 7, 2} {
			allgatherLimit = limit
			all, c, err := w.Gatherv(gatherPart(w.Rank()), root)
			if w.Rank() != root && all != nil || w.Rank() == root && !slices.Equal(all, want) || !slices.Equal(c, counts) || err != nil {
				return fmt.Errorf("gatherv to rank %d (limit %d) gave %v %v, %v; want %v %v on the root, none elsewhere", root, limit, all, c, err, want, counts)
			}
		}
	}
	all, c, err := w.Gatherv(nil, 0)
	if err != nil || len(all) != 0 || len(c) != w.Size() {
		return fmt.Errorf("empty gatherv gave %v %v, %v", all, c, err)
	}
	if _, _, err := w.Gatherv(nil, w.Size()); err == nil {
		return fmt.Errorf("gatherv to rank %d of %d: no error", w.Size(), w.Size())
	}
	return nil
}

func TestCollectivesUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatal("mpirun not found: install Open MPI (make deps)")
	}
	for _, np := range []int{1, 3} {
		args := append(append([]string{}, testkit.MpirunArgs...), "-np", fmt.Sprint(np), os.Args[0], "-test.run=^$")
		out, err := testkit.Run(60*time.Second, []string{childEnv + "=1"}, mpirun, args...)
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
