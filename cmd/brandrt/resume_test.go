package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orderFile reads an --order-out file: per epoch and rank, the file at
// each position.
func orderFile(t *testing.T, name string) map[[2]int][]int {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[[2]int][]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		var e, r, sn, file int
		if _, err := fmt.Sscan(sc.Text(), &e, &r, &sn, &file); err != nil || sn != len(got[[2]int{e, r}]) {
			t.Fatalf("%s: line %q", name, sc.Text())
		}
		got[[2]int{e, r}] = append(got[[2]int{e, r}], file)
	}
	return got
}

// trainLog reads what train.py --log-files wrote: the files trained on
// in epoch, in order, up to step upTo (all when −1); and the step of the
// last checkpoint saved.
func trainLog(t *testing.T, name string, epoch, upTo int) ([]int, int) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	var files []int
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "checkpoint" {
			last, _ = strconv.Atoi(f[2])
		}
		if len(f) < 2 || f[0] != strconv.Itoa(epoch) {
			continue
		}
		if step, _ := strconv.Atoi(f[1]); upTo >= 0 && step > upTo {
			continue
		}
		for _, id := range f[2:] {
			n, err := strconv.Atoi(id)
			if err != nil {
				t.Fatalf("%s: line %q", name, line)
			}
			files = append(files, n)
		}
	}
	return files, last
}

// startTrainers starts examples/pytorch/train.py beside each of np ranks
// (one model, DDP), with rank r's extra flags; the test's end kills any
// left.
func startTrainers(t *testing.T, env []string, np int, extra func(r int) []string) []*exec.Cmd {
	t.Helper()
	port := 20000 + rand.IntN(20000)
	var cmds []*exec.Cmd
	for r := range np {
		args := append([]string{"-W", "ignore", "../../examples/pytorch/train.py", "--num-classes", "4", "--local-rank", fmt.Sprint(r),
			"--world-size", fmt.Sprint(np), "--rank", fmt.Sprint(r), "--master", fmt.Sprintf("127.0.0.1:%d", port)}, extra(r)...)
		cmd := exec.Command(python, args...)
		// a killed process leaves its multiprocessing directory (pymp-*)
		// in TMPDIR: the test's, removed when it ends
		cmd.Env = append(append(os.Environ(), env...), "TMPDIR="+t.TempDir())
		out := new(strings.Builder)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	return cmds
}

// waitTrainers waits for the training processes; a failed one fails the
// test.
func waitTrainers(t *testing.T, cmds []*exec.Cmd) {
	t.Helper()
	for r, cmd := range cmds {
		if err := exitWithin(t, cmd, 2*time.Minute); err != nil {
			t.Fatalf("training process %d: %v\n%s", r, err, cmd.Stdout)
		}
	}
}

// killJob kills the training processes, mpirun and its ranks, as a
// node failure or a batch system's kill would.
func killJob(t *testing.T, serve *exec.Cmd, cmds []*exec.Cmd) {
	t.Helper()
	for _, c := range cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	_ = syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
	_ = serve.Wait()
	for _, pid := range ranks(t, binary(t)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestResumeUnderMpirun: a training run of two ranks (train.py, DDP,
// checkpoints every 4 steps) is killed, serve and all, at ~40 % of epoch
// 2, and resumed from its checkpoint with another number of DataLoader
// workers. Across both runs every file of epoch 2 is trained on exactly
// once, and the order is the uninterrupted one (simulate's, which
// TestServeOrderIsSimulates shows serve delivers): before the
// checkpoint in the first run, after it in the second. Resuming with
// another number of ranks is refused, saying why.
func TestResumeUnderMpirun(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files, perRank, batch = 640, 320, 8
	tmp := t.TempDir()
	jpegs := filepath.Join(tmp, "jpegs")
	if out, err := exec.Command(python, "../../examples/pytorch/make_jpegs.py", "--out", jpegs, "--classes", "4",
		"--images", fmt.Sprint(files), "--size", "32").CombinedOutput(); err != nil {
		t.Fatalf("make_jpegs: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", dir, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	want := filepath.Join(tmp, "want.txt")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "2", "--mem-fraction", "0.25", "--ramp", "2", "--order-out", want); status != 0 {
		t.Fatal(errs)
	}
	uninterrupted := orderFile(t, want)
	ckpt, logs := filepath.Join(tmp, "ckpt"), []string{filepath.Join(tmp, "run1-0.log"), filepath.Join(tmp, "run1-1.log")}
	// a ramp of 2 chunks, below the 5 the budget holds: epoch 2's order
	// depends on epoch 1's drain, which the resumed job plans again
	serveArgs := []string{"--chunks", dir, "--mem", "25%", "--consume", "0", "--epochs", "2", "--ramp", "2"}
	trainArgs := func(log string, more ...string) []string {
		return append([]string{"--epochs", "2", "--batch-size", fmt.Sprint(batch), "--checkpoint", ckpt, "--checkpoint-every", "4", "--log-files", log}, more...)
	}

	// Run 1, killed once rank 0 trained on 40 % of epoch 2.
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	serve, out := startServeEnv(t, env, 2, serveArgs...)
	cmds := startTrainers(t, env, 2, func(r int) []string { return trainArgs(logs[r], "--workers", "2") })
	killAt := perRank/batch + perRank*4/10/batch // steps: epoch 1, then 40 % of epoch 2
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(logs[0])
		if strings.Contains(string(b), fmt.Sprintf("\n2 %d ", killAt)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 never reached step %d of epoch 2:\n%s\n%s", killAt, b, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	killJob(t, serve, cmds)
	for r := range 2 {
		_, last := trainLog(t, logs[r], 2, -1)
		t.Logf("rank %d: killed after step %d; the last checkpoint it logged is of step %d", r, killAt, last)
	}

	// Run 2, resumed, with 3 DataLoader workers instead of 2.
	env = []string{"BRANDRT_ATTACH=" + t.TempDir()}
	resumed := filepath.Join(tmp, "resumed.txt")
	serve, out = startServeEnv(t, env, 2, append(serveArgs, "--resume", "--order-out", resumed)...)
	logs2 := []string{filepath.Join(tmp, "run2-0.log"), filepath.Join(tmp, "run2-1.log")}
	cmds = startTrainers(t, env, 2, func(r int) []string { return trainArgs(logs2[r], "--workers", "3", "--resume") })
	waitTrainers(t, cmds)
	if err := exitWithin(t, serve, time.Minute); err != nil {
		t.Fatalf("resumed serve: %v\n%s", err, out)
	}
	// The processes take up at the last step they all saved (each keeps
	// its last two checkpoints; one killed while the others saved has the
	// one before, and one killed after saving but before logging it has
	// one more than its log says): what they say they resumed from.
	var before [2][]int
	for r := range 2 {
		var pos, step int
		said := cmds[r].Stdout.(*strings.Builder).String()
		i := strings.Index(said, "resuming epoch 2 at position ")
		if i < 0 {
			t.Fatalf("training process %d did not resume epoch 2:\n%s", r, said)
		}
		fmt.Sscanf(said[i:], "resuming epoch 2 at position %d (step %d)", &pos, &step)
		if before[r], _ = trainLog(t, logs[r], 2, step); len(before[r]) != pos {
			t.Fatalf("rank %d resumed at position %d (step %d), but trained on %d files of epoch 2 up to that step", r, pos, step, len(before[r]))
		}
		t.Logf("rank %d resumed at step %d, position %d", r, step, pos)
	}
	if !strings.Contains(out.String(), "check    resumed: every position from the restart on answered") {
		t.Errorf("resumed serve did not check the epoch:\n%s", out)
	}
	seen := map[int]int{}
	got := orderFile(t, resumed)
	for r := range 2 {
		after, _ := trainLog(t, logs2[r], 2, -1)
		whole := uninterrupted[[2]int{2, r}]
		if len(whole) != perRank || !slices.Equal(before[r], whole[:len(before[r])]) || !slices.Equal(after, whole[len(before[r]):]) {
			t.Errorf("rank %d: trained on %d files of epoch 2 before the checkpoint and %d after; not the uninterrupted order", r, len(before[r]), len(after))
		}
		for sn, f := range got[[2]int{2, r}] {
			if w := whole[sn]; sn < len(before[r]) && f != -1 || sn >= len(before[r]) && f != w {
				t.Errorf("rank %d, position %d: the resumed serve delivered %d, the uninterrupted order has %d", r, sn, f, w)
				break
			}
		}
		for _, f := range append(before[r], after...) {
			seen[f]++
		}
	}
	if len(seen) != files {
		t.Errorf("epoch 2 trained on %d distinct files of %d", len(seen), files)
	}
	for f, n := range seen {
		if n != 1 {
			t.Errorf("epoch 2 trained on file %d %d times", f, n)
		}
	}

	// The checkpoint of a 2-rank job does not resume a 1-rank one.
	one := filepath.Join(tmp, "one")
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", one, "--chunk-files", "16", "--ranks", "1"); status != 0 {
		t.Fatal(errs)
	}
	env = []string{"BRANDRT_ATTACH=" + t.TempDir()}
	// (the last checkpoint is of epoch 2's end: a third epoch takes up)
	serve, out = startServeEnv(t, env, 1, "--chunks", one, "--mem", "25%", "--consume", "0", "--epochs", "3", "--resume")
	cmd := exec.Command(python, "-W", "ignore", "../../examples/pytorch/train.py", "--num-classes", "4", "--epochs", "3",
		"--checkpoint", ckpt, "--resume")
	cmd.Env = append(os.Environ(), env...)
	msg, err := cmd.CombinedOutput()
	killJob(t, serve, nil)
	if err == nil || !strings.Contains(string(msg), "saved in a job of 2 brandrt ranks and this job has 1") {
		t.Fatalf("resuming a 2-rank checkpoint with 1 rank: %v\n%s\nserve:\n%s", err, msg, out)
	}
}
