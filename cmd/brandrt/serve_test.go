package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/rt"
)

// servePack packs a generated dataset of files files for ranks ranks.
func servePack(t *testing.T, files, ranks int, out string) string {
	t.Helper()
	input, _ := genInput(t, files)
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", out, "--chunk-files", "16", "--ranks", fmt.Sprint(ranks)); status != 0 {
		t.Fatal(errs)
	}
	return out
}

// indexSums adds up the CRC32C and label of every file in every rank's
// index, as the test reads them itself.
func indexSums(t *testing.T, dir string, ranks int) (crc, label int64) {
	t.Helper()
	for r := range ranks {
		ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(dir, chunk.RankDir(r)), r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ix.Len() {
			e := ix.Entry(i)
			crc, label = crc+int64(e.CRC), label+int64(e.Label)
		}
		ix.Close()
	}
	return crc, label
}

func readStats(t *testing.T, name string) []rt.EpochStats {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all []rt.EpochStats
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s rt.EpochStats
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		all = append(all, s)
	}
	return all
}

// TestServeUnderMpirun runs three ranks for two epochs and proves from the
// statistics that every file was delivered exactly once per epoch, with
// the bytes and label its index records: with a quarter of the data in
// memory (the window policy keeping nothing, reading each chunk once and
// the second epoch's first chunks while the first drains; keeping what
// its budget holds into the second epoch, which reads the rest; and the
// paper's, with and without prefetch), and with everything in memory.
func TestServeUnderMpirun(t *testing.T) {
	const files = 3000
	dir := servePack(t, files, 3, filepath.Join(t.TempDir(), "chunks"))
	crc, label := indexSums(t, dir, 3)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"quarter", []string{"--mem", "25%", "--keep", "0"}},
		{"kept", []string{"--mem", "25%"}},
		{"no-prefetch", []string{"--mem", "25%", "--policy", "paper", "--variant", "no-prefetching"}},
		{"paper", []string{"--mem", "25%", "--policy", "paper"}},
		{"in-memory", []string{"--mem", "100%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "stats.json")
			args := append([]string{"serve", "--chunks", dir, "--consume", "2", "--epochs", "2", "--stats-json", js}, tc.args...)
			out := mpirun(t, 3, args...)
			if c := strings.Count(out, "every file delivered exactly once"); c != 2 {
				t.Errorf("%d epochs reported exactly-once delivery:\n%s", c, out)
			}
			stats := readStats(t, js)
			if len(stats) != 2 {
				t.Fatalf("%d epochs in %s", len(stats), js)
			}
			for _, s := range stats {
				bad := s.FilesExpected != files || s.FilesDelivered != files || s.DuplicateDeliveries != 0 ||
					s.FilesMissing != 0 || s.ChecksumErrors != 0 || s.FailedDeliveries != 0 || s.FilesLeft != 0 ||
					s.DeliveredCRCSum != crc || s.IndexCRCSum != crc || s.DeliveredLabelSum != label || s.RemoteFiles == 0
				if bad {
					t.Errorf("epoch %d: %+v; the index sums to crc %d, labels %d", s.Epoch, s, crc, label)
				}
				if prefetch := tc.name != "no-prefetch"; prefetch != (s.Prefetched > 0) {
					t.Errorf("epoch %d: %d pushes", s.Epoch, s.Prefetched)
				}
				// the default policy reads each chunk once: storage bytes are the
				// delivered bytes and the chunk files' own index and padding
				if tc.name == "quarter" && float64(s.StorageBytes) > 1.02*float64(s.BytesDelivered) {
					t.Errorf("epoch %d: %d bytes read from storage for %d delivered", s.Epoch, s.StorageBytes, s.BytesDelivered)
				}
				// the window policy reads the second epoch's first chunks
				// while the first drains
				if window := tc.name == "quarter" || tc.name == "kept" || tc.name == "in-memory"; (window && s.Epoch > 1) != (s.EarlyReads > 0) {
					t.Errorf("epoch %d: %d chunk reads while the previous epoch drained", s.Epoch, s.EarlyReads)
				}
				// kept: the second epoch reads the shard less 95 % of
				// the budget: 76 % of it, and the chunk files' own index
				if tc.name == "kept" && s.Epoch == 2 && (s.StorageBytes > s.BytesDelivered*78/100 || s.StorageBytes < s.BytesDelivered*3/4) {
					t.Errorf("epoch %d: %d bytes read from storage for %d delivered, keeping 95 %% of a quarter", s.Epoch, s.StorageBytes, s.BytesDelivered)
				}
				if tc.name == "in-memory" && s.ReadAmplification > 1.01 {
					t.Errorf("epoch %d: everything fits, yet read amplification %.2f", s.Epoch, s.ReadAmplification)
				}
			}
		})
	}
}

// TestServeNodeLocal serves node-local copies ({rank}) packed under mpirun.
func TestServeNodeLocal(t *testing.T) {
	input, _ := genInput(t, 400)
	local := filepath.Join(t.TempDir(), "local-{rank}")
	mpirun(t, 2, "pack", "--input", input, "--out", local, "--chunk-files", "8")
	out := mpirun(t, 2, "serve", "--chunks", local, "--mem", "40%", "--consume", "3")
	if !strings.Contains(out, "epoch 1/1: 400 files") || !strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("node-local serve:\n%s", out)
	}
}

// TestServeStartErrors: a dataset packed for another rank count, a missing
// dataset (once --storage-wait, 1 s here, has passed), and ranks that see
// different datasets fail on every rank with a message saying what is
// wrong.
func TestServeStartErrors(t *testing.T) {
	cleanVader(t)
	tmp := t.TempDir()
	two := servePack(t, 200, 2, filepath.Join(tmp, "two"))
	other := servePack(t, 300, 2, filepath.Join(tmp, "other"))
	// rank-0 and rank-1 directories that hold different datasets
	for r, src := range []string{two, other} {
		if err := os.Symlink(src, filepath.Join(tmp, fmt.Sprintf("mixed-%d", r))); err != nil {
			t.Fatal(err)
		}
	}
	// only rank 0 finds its dataset
	if err := os.Symlink(two, filepath.Join(tmp, "partial-0")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		np   int
		dir  string
		want []string
	}{
		{3, two, []string{"3 ranks for 2 shards: each rank serves at least one shard; run at most 2 ranks, or pack again with --shards 3 or more"}},
		{2, filepath.Join(tmp, "none"), []string{"rank 0: chunk: " + tmp + "/none is not a complete dataset", "rank 1: chunk: " + tmp + "/none is not a complete dataset",
			"manifest.json: no such file or directory (ENOENT), still after waiting 1s"}},
		{2, filepath.Join(tmp, "partial-{rank}"), []string{"rank 1: chunk: " + tmp + "/partial-1 is not a complete dataset", "rank 0: ranks [1] could not start"}},
		{2, filepath.Join(tmp, "mixed-{rank}"), []string{"rank 0: the ranks do not all see the same dataset", "rank 1: the ranks do not all see the same dataset"}},
	} {
		all := append(append([]string{}, testkit.MpirunArgs...), "-np", fmt.Sprint(tc.np), binary(t), "serve", "--chunks", tc.dir, "--mem", "50%", "--storage-wait", "1s")
		out, err := testkit.Run(time.Minute, nil, "mpirun", all...)
		if err == nil {
			t.Errorf("serve %s on %d ranks succeeded:\n%s", tc.dir, tc.np, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("serve %s on %d ranks: no %q in:\n%s", tc.dir, tc.np, w, out)
			}
		}
	}
}

// startServe starts mpirun … serve in its own process group; the group is
// killed when the test ends.
func startServe(t *testing.T, np int, args ...string) (*exec.Cmd, *testkit.Log) {
	t.Helper()
	return startServeEnv(t, nil, np, args...)
}

// waitFor polls until name holds at least one line, or fails the test.
func waitFor(t *testing.T, name string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(name); bytes.Contains(b, []byte("\n")) {
			return
		}
	}
	t.Fatalf("%s: nothing after %v", name, d)
}

// ranks returns the PIDs of the processes running bin serve.
func ranks(t *testing.T, bin string) []int {
	t.Helper()
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if args := strings.Split(string(b), "\x00"); err == nil && len(args) > 1 && args[0] == bin && args[1] == "serve" {
			var pid int
			fmt.Sscanf(p, "/proc/%d/cmdline", &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// servingRanks waits until the job writing the statistics js reported
// an epoch, and returns the PIDs of its np ranks.
func servingRanks(t *testing.T, js string, np int) []int {
	t.Helper()
	waitFor(t, js, 30*time.Second)
	pids := ranks(t, binary(t))
	if len(pids) != np {
		t.Fatalf("found %d ranks: %v", len(pids), pids)
	}
	return pids
}

// exitWithin waits for cmd for at most d.
func exitWithin(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // so that the Wait above returns
		<-done
		t.Fatalf("mpirun still running %v later", d)
		return nil
	}
}

// TestServeRankKilled kills one rank in the middle of serving: the job
// ends within seconds, saying which rank died and how.
func TestServeRankKilled(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 2000, 3, filepath.Join(t.TempDir(), "chunks"))
	js := filepath.Join(t.TempDir(), "stats.json")
	cmd, out := startServe(t, 3, "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "100000", "--stats-json", js)
	pids := servingRanks(t, js, 3)
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := exitWithin(t, cmd, 15*time.Second)
	t.Logf("mpirun ended %v after the kill: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(out.String(), "exited on signal 9 (Killed)") {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	if left := ranks(t, binary(t)); len(left) != 0 {
		t.Fatalf("ranks still running: %v", left)
	}
}

// TestServeInterrupted sends SIGTERM to every rank (as a batch system
// does): each says it received it, one says it stopped, and the job ends.
// Not every rank can say "stopped": one blocked in a collective with the
// peer that stopped first is ended by that peer's MPI_Abort.
func TestServeInterrupted(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 2000, 2, filepath.Join(t.TempDir(), "chunks"))
	js := filepath.Join(t.TempDir(), "stats.json")
	cmd, out := startServe(t, 2, "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "100000", "--stats-json", js)
	for _, pid := range servingRanks(t, js, 2) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	if err := exitWithin(t, cmd, 15*time.Second); err == nil {
		t.Fatalf("an interrupted job exited 0:\n%s", out)
	}
	for r := range 2 {
		if want := fmt.Sprintf("rank %d: received SIGTERM; stopping", r); !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if want := "interrupted by SIGTERM; stopped"; !strings.Contains(out.String(), want) {
		t.Errorf("no %q in:\n%s", want, out)
	}
}

// cleanVader removes, when the test ends, the shared-memory segments of
// Open MPI's vader transport, and those of PyTorch's DataLoader workers
// (torch_<pid>_…), that appeared during the test and that no live
// process maps: a job whose ranks were killed or aborted leaves the
// first in /dev/shm, a training killed between a segment's creation and
// its unlink the second.
func cleanVader(t *testing.T) {
	segments := func() []string {
		vader, _ := filepath.Glob("/dev/shm/vader_segment.*")
		torch, _ := filepath.Glob("/dev/shm/torch_*")
		return append(vader, torch...)
	}
	before := map[string]bool{}
	for _, p := range segments() {
		before[p] = true
	}
	t.Cleanup(func() {
		for _, p := range segments() {
			if !before[p] && !mapped(p) {
				os.Remove(p)
			}
		}
	})
}

// mapped reports whether a live process maps the file at path.
func mapped(path string) bool {
	maps, _ := filepath.Glob("/proc/[0-9]*/maps")
	for _, m := range maps {
		if b, err := os.ReadFile(m); err == nil && bytes.Contains(b, []byte(path)) {
			return true
		}
	}
	return false
}

// TestServeSkew stops one rank of two (SIGSTOP) for 3 s while the job
// runs, as a node that stalls would, readers and all: the other rank
// waits for it and both go on. Nothing deadlocks, every epoch delivers
// every file exactly once, and no rank holds more than its budgets at any
// time.
func TestServeSkew(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 4000, 2, filepath.Join(t.TempDir(), "chunks"))
	js := filepath.Join(t.TempDir(), "stats.json")
	const epochs, mem, remote = 150, 2 << 20, 256 << 10
	cmd, out := startServe(t, 2, "--chunks", dir, "--mem", "2MiB", "--remote-mem", "256KiB", "--consume", "2",
		"--epochs", fmt.Sprint(epochs), "--stats-json", js)
	pids := servingRanks(t, js, 2)
	// An epoch takes 20–50 ms on a fast machine and the ranks spend a
	// few ms between epochs: a stop that falls between two is tried again.
	for try := 0; try < 4 && !stalledEpoch(t, js); try++ {
		if err := syscall.Kill(pids[1], syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if err := syscall.Kill(pids[1], syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the stalled epoch ends and is written
	}
	if err := exitWithin(t, cmd, 2*time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	stats := readStats(t, js)
	if len(stats) != epochs {
		t.Fatalf("%d epochs of %d:\n%s", len(stats), epochs, out)
	}
	stalled := false
	for _, s := range stats {
		if !s.OK() || s.PeakMemBytes > mem+remote {
			t.Errorf("epoch %d: ok %v, at most %d bytes held by a rank (budgets %d + %d)", s.Epoch, s.OK(), s.PeakMemBytes, mem, remote)
		}
		stalled = stalled || s.Seconds >= 2.5
	}
	if !stalled {
		t.Errorf("no epoch took the 3 s the rank was stopped for: each stop fell between epochs\n%s", out)
	}
}

// stalledEpoch reports whether an epoch written to the stats file js so
// far took 2.5 s or more.
func stalledEpoch(t *testing.T, js string) bool {
	t.Helper()
	b, err := os.ReadFile(js)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		var s struct {
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal([]byte(line), &s) == nil && s.Seconds >= 2.5 {
			return true
		}
	}
	return false
}
