package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
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

// trainRuns splits a train.py log that runs appended to (each begins
// with a "start" line) into a file per run, and returns their names.
func trainRuns(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for i, part := range strings.Split(string(b), "start ")[1:] {
		p := fmt.Sprintf("%s.run%d", name, i+1)
		if err := os.WriteFile(p, []byte("start "+part), 0o644); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, p)
	}
	return runs
}

// startTrainers starts examples/pytorch/train.py beside each of np ranks
// (one model, DDP), with rank r's extra flags; the test's end kills any
// left.
func startTrainers(t *testing.T, env []string, np int, extra func(r int) []string) []*exec.Cmd {
	t.Helper()
	port := testkit.FreePort(t) // a random port may be another's: an ephemeral one, or a test's beside
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

// serveResumed runs a job restarted from checkpoints: serve with
// serveArgs and --resume on ranks ranks (its order written to order),
// beside one training process per rank started with args(r); it returns
// serve's output and what the training processes printed.
func serveResumed(t *testing.T, ranks int, serveArgs []string, order string, args func(r int) []string) (*testkit.Log, string) {
	t.Helper()
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	serve, out := startServeEnv(t, env, ranks, append(slices.Clip(serveArgs), "--resume", "--order-out", order)...)
	cmds := startTrainers(t, env, ranks, args)
	waitTrainers(t, cmds)
	if err := exitWithin(t, serve, time.Minute); err != nil {
		t.Fatalf("resumed serve: %v\n%s", err, out)
	}
	var said strings.Builder
	for _, cmd := range cmds {
		said.WriteString(cmd.Stdout.(*strings.Builder).String())
	}
	return out, said.String()
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
// checkpoint in the first run, after it in the second. Resuming on
// another dataset is refused, saying why.
func TestResumeUnderMpirun(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files, perRank, batch = 640, 320, 8
	tmp := t.TempDir()
	jpegs := makeJPEGs(t, tmp, files)
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
	awaitStep(t, logs[0], 2, killAt, out)
	killJob(t, serve, cmds)
	for r := range 2 {
		_, last := trainLog(t, logs[r], 2, -1)
		t.Logf("rank %d: killed after step %d; the last checkpoint it logged is of step %d", r, killAt, last)
	}

	// Run 2, resumed, with 3 DataLoader workers instead of 2.
	resumed := filepath.Join(tmp, "resumed.txt")
	logs2 := []string{filepath.Join(tmp, "run2-0.log"), filepath.Join(tmp, "run2-1.log")}
	out, said := serveResumed(t, 2, serveArgs, resumed, func(r int) []string { return trainArgs(logs2[r], "--workers", "3", "--resume") })
	checkResumed(t, resumedJob{files: files, epoch: 2, epochs: 2, uninterrupted: uninterrupted, before: logs, after: logs2, said: said})
	if !strings.Contains(out.String(), "check    resumed: every position from the restart on answered") {
		t.Errorf("resumed serve did not check the epoch:\n%s", out)
	}
	got := orderFile(t, resumed)
	for r := range 2 {
		pos, _ := resumedAt(t, said, r, 2)
		for sn, f := range got[[2]int{2, r}] {
			if w := uninterrupted[[2]int{2, r}][sn]; sn < pos && f != -1 || sn >= pos && f != w {
				t.Errorf("rank %d, position %d: the resumed serve delivered %d, the uninterrupted order has %d", r, sn, f, w)
				break
			}
		}
	}

	// The checkpoint does not resume a job on another dataset.
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
	if err == nil || !strings.Contains(string(msg), "saved in a job serving another dataset") {
		t.Fatalf("resuming a checkpoint of another dataset: %v\n%s\nserve:\n%s", err, msg, out)
	}
}

// resumedJob is a training run (train.py --log-files, one log per rank)
// killed in epoch and resumed from its checkpoint.
type resumedJob struct {
	files, epoch, epochs int
	// uninterrupted is simulate's order of the job (orderFile).
	uninterrupted map[[2]int][]int
	// before and after are the ranks' logs of the two runs; said is what
	// the resumed run's training processes printed.
	before, after []string
	said          string
}

// resumedAt returns the position at which rank's training process says
// it resumed epoch, and the step of its checkpoint.
func resumedAt(t *testing.T, said string, rank, epoch int) (pos, step int) {
	t.Helper()
	what := fmt.Sprintf("rank %d: resuming epoch %d at position ", rank, epoch)
	i := strings.Index(said, what)
	if i < 0 {
		t.Fatalf("training process %d did not resume epoch %d:\n%s", rank, epoch, said)
	}
	if _, err := fmt.Sscanf(said[i+len(what):], "%d (step %d)", &pos, &step); err != nil {
		t.Fatalf("training process %d: %v in %q", rank, err, said[i:])
	}
	return pos, step
}

// checkResumed checks a resumed job against its uninterrupted order.
// The processes take up at the last step they all saved (each keeps its
// last two checkpoints; one killed while the others saved has the one
// before, and one killed after saving but before logging it has one
// more than its log says): what they say they resumed from. Each rank
// trained on its share of the resumed epoch in the uninterrupted order,
// before the checkpoint in the first run and after it in the second,
// and on its share of every later epoch in that order too; across the
// ranks, each epoch from the resumed one on trained on every file
// exactly once.
func checkResumed(t *testing.T, j resumedJob) {
	t.Helper()
	for e := j.epoch; e <= j.epochs; e++ {
		seen := map[int]int{}
		for r := range j.before {
			whole := j.uninterrupted[[2]int{e, r}]
			var before []int
			if e == j.epoch {
				pos, step := resumedAt(t, j.said, r, e)
				if before, _ = trainLog(t, j.before[r], e, step); len(before) != pos {
					t.Fatalf("rank %d resumed at position %d (step %d), but trained on %d files of epoch %d up to that step", r, pos, step, len(before), e)
				}
				t.Logf("rank %d resumed epoch %d at step %d, position %d", r, e, step, pos)
			}
			after, _ := trainLog(t, j.after[r], e, -1)
			if !slices.Equal(append(slices.Clone(before), after...), whole) {
				t.Errorf("epoch %d, rank %d: trained on %d files before the restart and %d after; not the uninterrupted order of %d",
					e, r, len(before), len(after), len(whole))
			}
			for _, f := range append(before, after...) {
				seen[f]++
			}
		}
		if len(seen) != j.files {
			t.Errorf("epoch %d trained on %d distinct files of %d", e, len(seen), j.files)
		}
		for f, n := range seen {
			if n != 1 {
				t.Errorf("epoch %d trained on file %d %d times", e, f, n)
			}
		}
	}
}

// jpegJob makes files JPEGs of 4 classes, packs them for ranks ranks (16
// files per chunk) and returns the dataset and simulate's order of its
// first epochs (at 25 %, a ramp of 2 chunks: epoch e+1's order depends
// on epoch e's drain).
func jpegJob(t *testing.T, files, ranks, epochs int) (string, map[[2]int][]int) {
	t.Helper()
	tmp := t.TempDir()
	jpegs := makeJPEGs(t, tmp, files)
	dir := filepath.Join(tmp, "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", dir, "--chunk-files", "16", "--ranks", fmt.Sprint(ranks)); status != 0 {
		t.Fatal(errs)
	}
	want := filepath.Join(tmp, "want.txt")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", fmt.Sprint(epochs), "--mem-fraction", "0.25", "--ramp", "2",
		"--order-out", want); status != 0 {
		t.Fatal(errs)
	}
	return dir, orderFile(t, want)
}

// TestResumeCoLaunched: a co-launched training (train.py, DDP, 3 epochs,
// len(sampler) each epoch, checkpoints every 4 steps, 4 DataLoader
// workers each fetching 4 batches ahead) is killed, serve and all, at
// ~40 % of epoch 2, and run again with the identical command line: on 2
// ranks serving as many epochs as the training reads, on 2 with
// --epochs 3, and on 3 ranks. The restart finds the checkpoints
// (BrandLoader.state_dict) and offers its place, which the ranks take up
// without --resume. Epochs 2 and 3 are trained on in the uninterrupted
// order, every file of each exactly once across both runs, and the job
// ends with status 0. (A resumed job's training offered its start again
// once a new Client read epoch 0 from a ring not yet filled in, at the
// next epoch or at len(sampler); the rank never answered, and the
// training waited 120 s and failed.)
func TestResumeCoLaunched(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const batch = 8
	for _, tc := range []struct {
		name         string
		ranks, files int
		epochs       []string
	}{
		{"2 ranks until the training ends", 2, 640, nil},
		{"2 ranks epochs 3", 2, 640, []string{"--epochs", "3"}},
		{"3 ranks", 3, 576, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, uninterrupted := jpegJob(t, tc.files, tc.ranks, 3)
			perRank := tc.files / tc.ranks
			tmp := t.TempDir()
			ckpt := filepath.Join(tmp, "ckpt")
			serveArgs := append([]string{"--chunks", dir, "--mem", "25%", "--ramp", "2"}, tc.epochs...)
			// a killed training process leaves its multiprocessing
			// directory (pymp-*) in TMPDIR: the test's, removed when it ends
			pymp := t.TempDir()
			train := []string{"env", "TMPDIR=" + pymp, python, "-W", "ignore", "../../examples/pytorch/train.py", "--num-classes", "4", "--epochs", "3",
				"--batch-size", fmt.Sprint(batch), "--checkpoint", ckpt, "--checkpoint-every", "4",
				"--workers", "4", "--prefetch-factor", "4", "--log-files", filepath.Join(tmp, "train-{rank}.log")}
			log := func(r int) string { return filepath.Join(tmp, fmt.Sprintf("train-%d.log", r)) }

			// Run 1, killed once rank 0 trained on 40 % of epoch 2. The
			// checkpoint (BrandLoader.state_dict) counts what training
			// took, 128 positions short of what the sampler handed out
			cmd, out, _ := coLaunch(t, tc.ranks, serveArgs, train...)
			killAt := perRank/batch + perRank*4/10/batch // steps: epoch 1, then 40 % of epoch 2
			awaitStep(t, log(0), 2, killAt, out)
			killJob(t, cmd, nil)
			gone(t, ckpt, 20*time.Second)
			if strings.Contains(out.String(), "resum") {
				t.Errorf("the first run, with no checkpoint yet, speaks of resuming:\n%s", out)
			}

			// Run 2: the same command.
			cmd, out, base := coLaunch(t, tc.ranks, serveArgs, train...)
			if err := exitWithin(t, cmd, 2*time.Minute); err != nil {
				t.Fatalf("the resumed job: %v\n%s", err, out)
			}
			var run1, run2 []string // each log holds both runs, the second appended
			for r := range tc.ranks {
				runs := trainRuns(t, log(r))
				if len(runs) != 2 {
					t.Fatalf("rank %d's log holds %d runs, not 2", r, len(runs))
				}
				run1, run2 = append(run1, runs[0]), append(run2, runs[1])
			}
			checkResumed(t, resumedJob{files: tc.files, epoch: 2, epochs: 3, uninterrupted: uninterrupted, before: run1, after: run2,
				said: out.String()})
			if !strings.Contains(out.String(), "check    resumed: every position from the restart on answered") ||
				!strings.Contains(out.String(), "epoch 3 from brandrt") {
				t.Errorf("the resumed job did not check epoch 2, or did not train epoch 3:\n%s", out)
			}
			leftBehind(t, ckpt, base)
		})
	}
}

// gone waits until no process's command line holds marker, and kills
// those still there after d.
func gone(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if len(processesWith(marker)) == 0 {
			return
		}
	}
	for _, pid := range processesWith(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Errorf("processes of %s outlived their job by %v", marker, d)
}

// TestResumeWithLen: one rank told to resume epoch 2 at position 300 by
// a training loop started on its own (a state written by hand), which
// calls len(sampler) before each epoch and reads with 3 DataLoader
// workers: the rest of epoch 2 (the uninterrupted order's positions 300
// on) and all of epoch 3 arrive, each file once, with its bytes and
// label. (len(sampler) made a second Client offer the start again, and
// no file was ever delivered.)
func TestResumeWithLen(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files, at = 640, 300
	input, dir := packPaths(t, files, 4, 16, 1)
	want := filepath.Join(t.TempDir(), "want.txt")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "3", "--mem-fraction", "0.25", "--order-out", want); status != 0 {
		t.Fatal(errs)
	}
	uninterrupted := orderFile(t, want)
	state := jsonFile(t, map[string]int{"epoch": 1, "position": at, "ranks": 1, "seed": 1})
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "25%", "--epochs", "3", "--resume")
	res := filepath.Join(t.TempDir(), "got.json")
	said := trainers(t, env, [][]string{{"loader.py", "--input", input, "--out", res, "--workers", "3", "--state", state, "--len", "--epochs", "3"}})
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if !strings.Contains(said[0], "epoch 1: 340 positions") || !strings.Contains(said[0], "epoch 2: 640 positions") {
		t.Errorf("len(sampler): want 340 positions in epoch 2 and 640 in epoch 3:\n%s", said[0])
	}
	got := map[int][]int{}
	for _, d := range deliveries(t, res, "the training process") {
		got[d.epoch] = append(got[d.epoch], d.file)
	}
	for e, whole := range map[int][]int{1: uninterrupted[[2]int{2, 0}][at:], 2: uninterrupted[[2]int{3, 0}]} {
		slices.Sort(got[e])
		whole = slices.Sorted(slices.Values(whole))
		if !slices.Equal(got[e], whole) {
			t.Errorf("epoch %d: %d files delivered, not the %d of the uninterrupted order's positions %d on, once each",
				e+1, len(got[e]), len(whole), map[int]int{1: at, 2: 0}[e])
		}
	}
}

// TestResumeOnOtherRanksUnderMpirun: a training run of 3 ranks (train.py,
// DDP, checkpoints every 4 steps) on a dataset packed in 6 shards is
// killed, serve and all, at ~40 % of epoch 2 and resumed from its
// checkpoint on 2 ranks, with 3 DataLoader workers instead of 2; then
// one of 2 ranks resumed on 3. Across both runs every file of epoch 2 is
// trained on exactly once, and epoch 3 whole; two resumes from one
// checkpoint deliver byte-identical orders (--order-out), the order
// simulate --resume predicts from the sampler's state.
func TestResumeOnOtherRanksUnderMpirun(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files, batch = 480, 8
	tmp := t.TempDir()
	jpegs := makeJPEGs(t, tmp, files)
	dir := filepath.Join(tmp, "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", dir, "--chunk-files", "8", "--shards", "6"); status != 0 {
		t.Fatal(errs)
	}
	for _, c := range []struct{ from, to int }{{3, 2}, {2, 3}} {
		t.Run(fmt.Sprintf("%dto%d", c.from, c.to), func(t *testing.T) {
			tmp := t.TempDir()
			ckpt := filepath.Join(tmp, "ckpt")
			serveArgs := []string{"--chunks", dir, "--mem", "25%", "--consume", "0", "--epochs", "3"}
			trainArgs := func(log string, more ...string) []string {
				return append([]string{"--epochs", "3", "--batch-size", fmt.Sprint(batch), "--checkpoint", ckpt, "--checkpoint-every", "4",
					"--log-files", log}, more...)
			}
			logs := func(run string, np int) []string {
				var l []string
				for r := range np {
					l = append(l, filepath.Join(tmp, fmt.Sprintf("%s-%d.log", run, r)))
				}
				return l
			}

			// Run 1 on c.from ranks, killed once rank 0 trained on 40 %
			// of epoch 2.
			before := logs("run1", c.from)
			env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
			serve, out := startServeEnv(t, env, c.from, serveArgs...)
			cmds := startTrainers(t, env, c.from, func(r int) []string { return trainArgs(before[r], "--workers", "2") })
			perRank := files / c.from
			killAt := perRank/batch + perRank*4/10/batch
			awaitStep(t, before[0], 2, killAt, out)
			killJob(t, serve, cmds)
			saved := filepath.Join(tmp, "saved")
			if out, err := exec.Command("cp", "-r", ckpt, saved).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v\n%s", err, out)
			}

			// Runs 2 and 3 on c.to ranks, each from the checkpoint run 1
			// saved, with 3 DataLoader workers.
			var orders [2][]byte
			var after []string
			var said string
			for i := range 2 {
				if i == 1 {
					_ = os.RemoveAll(ckpt)
					if out, err := exec.Command("cp", "-r", saved, ckpt).CombinedOutput(); err != nil {
						t.Fatalf("cp: %v\n%s", err, out)
					}
				}
				run := fmt.Sprintf("run%d", i+2)
				after = logs(run, c.to)
				order := filepath.Join(tmp, run+".order")
				var out *testkit.Log
				out, said = serveResumed(t, c.to, serveArgs, order, func(r int) []string { return trainArgs(after[r], "--workers", "3", "--resume") })
				if !strings.Contains(out.String(), fmt.Sprintf("was saved on %d ranks", c.from)) {
					t.Errorf("resumed serve did not say it resumed a job of %d ranks:\n%s", c.from, out)
				}
				var err error
				if orders[i], err = os.ReadFile(order); err != nil {
					t.Fatal(err)
				}
			}
			if string(orders[0]) != string(orders[1]) {
				t.Error("two resumes from one checkpoint delivered different orders (--order-out)")
			}
			// simulate --resume predicts the order from the loader's
			// state in the checkpoint the training took up from
			i := strings.Index(said, "rank 0: resuming epoch 2 at position ")
			from := strings.TrimSpace(strings.SplitN(strings.SplitN(said[i:], " from ", 2)[1], "\n", 2)[0])
			state := filepath.Join(tmp, "state.json")
			script := "import json, sys, torch; json.dump(torch.load(sys.argv[1])['loader'], open(sys.argv[2], 'w'))"
			if out, err := exec.Command(python, "-c", script, filepath.Join(saved, filepath.Base(from)), state).CombinedOutput(); err != nil {
				t.Fatalf("the loader's state from %s: %v\n%s", from, err, out)
			}
			simulated := filepath.Join(tmp, "simulated.order")
			if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--ranks", fmt.Sprint(c.to), "--epochs", "3", "--mem-fraction", "0.25",
				"--resume", state, "--order-out", simulated); status != 0 {
				t.Fatalf("simulate --resume: %s", errs)
			}
			if want, err := os.ReadFile(simulated); err != nil || string(want) != string(orders[0]) {
				t.Errorf("serve's order after the resume (%d bytes) differs from simulate --resume's (%d bytes, %v)", len(orders[0]), len(want), err)
			}

			// Epoch 2: what run 1 trained on up to the checkpoint and what
			// run 3 trained on make every file once; epoch 3 is whole.
			_, step := resumedAt(t, said, 0, 2)
			checkTakenUp(t, before, after, step, files)
		})
	}
}

// checkOnce checks that seen counts every one of files files once.
func checkOnce(t *testing.T, what string, seen map[int]int, files int) {
	t.Helper()
	if len(seen) != files {
		t.Errorf("%s: trained on %d distinct files of %d", what, len(seen), files)
	}
	for f, n := range seen {
		if n != 1 {
			t.Errorf("%s: trained on file %d %d times", what, f, n)
		}
	}
}

// makeJPEGs writes files generated 32×32 JPEGs of 4 classes into
// dir/jpegs (examples/pytorch/make_jpegs.py) and returns that directory.
func makeJPEGs(t *testing.T, dir string, files int) string {
	t.Helper()
	jpegs := filepath.Join(dir, "jpegs")
	if out, err := exec.Command(python, "../../examples/pytorch/make_jpegs.py", "--out", jpegs, "--classes", "4",
		"--images", fmt.Sprint(files), "--size", "32").CombinedOutput(); err != nil {
		t.Fatalf("make_jpegs: %v\n%s", err, out)
	}
	return jpegs
}

// awaitStep waits, for up to 2 minutes, until the train.py log says step
// step of epoch epoch was trained on; out is the job's output, shown
// should it never come.
func awaitStep(t *testing.T, log string, epoch, step int, out fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), fmt.Sprintf("\n%d %d ", epoch, step)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 never reached step %d of epoch %d:\n%s\n%s", step, epoch, b, out)
		}
	}
}

// checkTakenUp checks a job killed in epoch 2 and taken up from the
// checkpoint of step: what the logs before say was trained on up to that
// step and what the logs after say make every file of epoch 2 once, and
// the logs after hold epoch 3 whole.
func checkTakenUp(t *testing.T, before, after []string, step, files int) {
	t.Helper()
	seen := map[int]int{}
	countTrained(t, seen, before, 2, step)
	t.Logf("trained on %d files of epoch 2 before the restart, up to the checkpoint of step %d", len(seen), step)
	countTrained(t, seen, after, 2, -1)
	checkOnce(t, "epoch 2", seen, files)
	seen = map[int]int{}
	countTrained(t, seen, after, 3, -1)
	checkOnce(t, "epoch 3", seen, files)
}

// countTrained adds to seen, per file, how often the train.py logs say
// it was trained on in epoch, up to step upTo (all when −1).
func countTrained(t *testing.T, seen map[int]int, logs []string, epoch, upTo int) {
	t.Helper()
	for _, log := range logs {
		got, _ := trainLog(t, log, epoch, upTo)
		for _, f := range got {
			seen[f]++
		}
	}
}
