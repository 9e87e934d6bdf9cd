package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt"
)

// memCgroup makes a memory cgroup of limit bytes beside this process's
// (v1 or v2, at the root of the hierarchy) and returns its directory. The
// test is skipped where no memory cgroup can be made (no controller, not
// root, a v2 hierarchy that does not delegate memory); at its end every
// process left in the cgroup is killed and the cgroup removed.
func memCgroup(t *testing.T, limit int64) string {
	t.Helper()
	cg, err := launch.ReadMemCgroup("/")
	if err != nil || cg.Version == 0 {
		t.Skipf("no memory cgroup to make one beside (%v)", err)
	}
	top := cg.Dir
	for p := filepath.Dir(top); ; p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err != nil || p == "/" {
			break
		}
		top = p
	}
	dir := filepath.Join(top, fmt.Sprintf("brandrt-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	file := map[int]string{1: "memory.limit_in_bytes", 2: "memory.max"}[cg.Version]
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup (cgroup v%d): %v", cg.Version, err)
	}
	t.Cleanup(func() {
		for try := 0; try < 50; try++ {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("memory cgroup %s left", dir)
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Skipf("cannot limit a memory cgroup (cgroup v%d): %v", cg.Version, err)
	}
	return dir
}

// readsInFlight is what workers chunk reads of the one-shard dataset dir
// take at most (rt.Node.Footprint): each a buffer of its largest chunk,
// rounded up to a MiB.
func readsInFlight(t *testing.T, dir string, workers int) int64 {
	t.Helper()
	ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(dir, chunk.RankDir(0)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	largest := int64(0)
	for i := range ix.Len() {
		e := ix.Entry(i)
		largest = max(largest, e.Offset+int64(e.Size))
	}
	return int64(workers) * ((largest + 1<<20 - 1) >> 20 << 20)
}

// oomKills returns the OOM kills in the cgroup dir.
func oomKills(t *testing.T, dir string) int64 {
	t.Helper()
	v := 1
	if _, err := os.Stat(filepath.Join(dir, "memory.events")); err == nil {
		v = 2
	}
	n, err := launch.MemCgroup{Version: v, Dir: dir}.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// inCgroup returns the arguments of sh that runs mpirun with args from
// inside the cgroup dir (sh moves itself there first).
func inCgroup(dir string, args ...string) []string {
	return append(append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec mpirun "$@"`, dir}, testkit.MpirunArgs...), args...)
}

// memTestMiB is --mem in the tests of the memory cgroup: with 3,000
// files of up to 100 KB (150 MiB), a third of the dataset.
const memTestMiB = 50

// TestServeMemInCgroup: serve --mem X in a memory cgroup of X, its chunk
// reads in flight (4 I/O workers' buffers) and the allowance
// (rt.MemAllowance) serves 3 epochs with no OOM kill, with
// in-process readers and with DataLoader clients (outside the cgroup:
// what counts is the rank, with the shared memory it lends them); in a
// cgroup of X/2 it is refused at start-up, with the numbers.
func TestServeMemInCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("memory cgroups and 3,000 files: not in -short")
	}
	cleanVader(t)
	const files = 3000
	input, dir := packPaths(t, files, 5, 16, 1)
	mem := fmt.Sprintf("%dMiB", memTestMiB)
	limit := int64(memTestMiB<<20) + readsInFlight(t, dir, 4) + rt.MemAllowance(memTestMiB<<20)
	t.Run("consume", func(t *testing.T) {
		cg := memCgroup(t, limit)
		out, err := testkit.Run(2*time.Minute, nil, "sh", inCgroup(cg, "-np", "1", binary(t), "serve", "--chunks", dir, "--mem", mem, "--consume", "4", "--epochs", "3")...)
		if err != nil || strings.Count(string(out), "every file delivered exactly once") != 3 {
			t.Errorf("serve --mem %s --consume 4 in a cgroup of %s: %v\n%s", mem, ibytes(limit), err, out)
		}
		if n := oomKills(t, cg); n != 0 {
			t.Errorf("%d OOM kills in the cgroup", n)
		}
	})
	t.Run("dataloader", func(t *testing.T) {
		needTorch(t)
		cg := memCgroup(t, limit)
		env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
		cmd := exec.Command("sh", inCgroup(cg, "-np", "1", binary(t), "serve", "--chunks", dir, "--mem", mem, "--epochs", "3")...)
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out := new(strings.Builder)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		res := filepath.Join(t.TempDir(), "0.json")
		trainers(t, env, [][]string{{"loader.py", "--local-rank", "0", "--input", input, "--out", res, "--workers", "4", "--epochs", "3"}})
		if err := exitWithin(t, cmd, time.Minute); err != nil {
			t.Fatalf("serve: %v\n%s", err, out)
		}
		all := deliveries(t, res, "process 0")
		for e := range 3 {
			onceEach(t, all, e, files)
		}
		if n := oomKills(t, cg); n != 0 {
			t.Errorf("%d OOM kills in the cgroup:\n%s", n, out)
		}
	})
	// X/2 is refused at start-up, with the numbers; --mem 100%cgroup
	// takes what the cgroup leaves, and serves; a rank the OOM killer
	// kills is named so.
	t.Run("refused", func(t *testing.T) {
		limit := int64(memTestMiB << 19)
		cg := memCgroup(t, limit)
		out, err := testkit.Run(time.Minute, nil, "sh", inCgroup(cg, "-np", "1", binary(t), "serve", "--chunks", dir, "--mem", mem, "--consume", "2")...)
		want := fmt.Sprintf("its memory cgroup allows %s (%s/memory.", ibytes(limit), cg)
		if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "--mem 50 MiB") ||
			!strings.Contains(string(out), ibytes(rt.MemAllowance(memTestMiB<<20))+" beside them") || strings.Contains(string(out), "epoch 1") {
			t.Errorf("want a refusal naming the cgroup's limit (%s), --mem and the allowance: %v\n%s", want, err, out)
		}
	})
	t.Run("share", func(t *testing.T) {
		cg := memCgroup(t, limit)
		out, err := testkit.Run(time.Minute, nil, "sh", inCgroup(cg, "-np", "1", binary(t), "serve", "--chunks", dir, "--mem", "100%cgroup", "--consume", "2", "--epochs", "2")...)
		if err != nil || strings.Count(string(out), "every file delivered exactly once") != 2 {
			t.Errorf("serve --mem 100%%cgroup: %v\n%s", err, out)
		}
		if testing.Verbose() {
			t.Logf("%s", out)
		}
	})
	t.Run("oom", func(t *testing.T) {
		cg := memCgroup(t, limit)
		out, err := testkit.Run(time.Minute, []string{"BRANDRT_TEST_HOG=0"}, "sh", inCgroup(cg, "-np", "1", "-x", "BRANDRT_TEST_HOG", binary(t), "serve", "--chunks", dir, "--mem", mem, "--consume", "2")...)
		if err == nil || !strings.Contains(string(out), "rank 0 (pid ") || !strings.Contains(string(out), "ended without a word while its memory cgroup "+cg+" counted an OOM kill: most likely the kernel's OOM killer killed it") {
			t.Errorf("want the OOM kill named: %v\n%s", err, out)
		}
	})
}
