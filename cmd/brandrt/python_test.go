package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/internal/testkit"
)

// python is Debian's interpreter, the one python3-torch installs for.
const python = "/usr/bin/python3"

func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch (make deps installs python3-torch): %v\n%s", python, err, out)
	}
}

// pathInput writes files whose bytes start with their own relative path
// and a newline, so that a reader can find the original of what it got.
// Sizes run up to 100 KB: files from another rank of more than 32 KiB
// reach the clients in place, smaller ones as copies.
func pathInput(t *testing.T, classes, files int) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "input")
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range files {
		rel := fmt.Sprintf("class-%d/f%05d.bin", i%classes, i)
		body := append([]byte(rel+"\n"), make([]byte, rng.IntN(100000))...)
		for j := len(rel) + 1; j < len(body); j++ {
			body[j] = byte(rng.Uint32())
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// startServeEnv is startServe with extra environment variables.
func startServeEnv(t *testing.T, env []string, np int, args ...string) (*exec.Cmd, *testkit.Log) {
	t.Helper()
	all := mpirunArgv(t, np, append([]string{"serve"}, args...)...)
	cmd := exec.Command("mpirun", all...)
	out := startGroup(t, cmd, env, func() {
		// mpirun puts its ranks in process groups of their own: a rank
		// whose mpirun was killed would serve on, alone.
		for _, pid := range ranks(t, binary(t)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return cmd, out
}

// startGroup starts cmd with env added, in a process group of its own,
// its output in the returned log; when the test ends the group is
// killed, and then, when set, after runs.
func startGroup(t *testing.T, cmd *exec.Cmd, env []string, after func()) *testkit.Log {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	out := new(testkit.Log)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if after != nil {
			after()
		}
	})
	return out
}

// packPaths packs a pathInput of files in classes for ranks ranks, k files
// per chunk, and returns the input and the dataset directories.
func packPaths(t *testing.T, files, classes, k, ranks int) (input, dir string) {
	t.Helper()
	input = pathInput(t, classes, files)
	dir = filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", fmt.Sprint(k), "--ranks", fmt.Sprint(ranks)); status != 0 {
		t.Fatal(errs)
	}
	return input, dir
}

// trainers runs one training script per entry of args at once (args[r]
// holds the script under python/tests and its flags) and returns their
// outputs; a failed or timed-out one fails the test.
func trainers(t *testing.T, env []string, args [][]string) []string {
	t.Helper()
	outs := make([]string, len(args))
	errs := make(chan error, len(args))
	for r, a := range args {
		go func() {
			all := append([]string{"-W", "ignore", "../../python/tests/" + a[0]}, a[1:]...)
			o, err := testkit.Run(2*time.Minute, env, python, all...)
			outs[r] = string(o)
			if err != nil {
				err = fmt.Errorf("training process %d: %v\n%s", r, err, o)
			}
			errs <- err
		}()
	}
	for range args {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// delivery is one file a training process got: the epoch (from 0), the
// file's path, whether its bytes were the original's, and its label.
type delivery struct {
	epoch int
	rel   string
	equal bool
	label int
	file  int // its id, or −1 where the process did not write it
}

// deliveries reads what a training process wrote, and reports every file
// that came with other bytes than the original's or a label that is not
// its class directory's; tag names the process.
func deliveries(t *testing.T, name, tag string) []delivery {
	t.Helper()
	var rows [][]any
	b, err := os.ReadFile(name)
	if err == nil {
		err = json.Unmarshal(b, &rows)
	}
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]delivery, len(rows))
	for i, x := range rows {
		d := delivery{int(x[0].(float64)), x[1].(string), x[2].(bool), int(x[3].(float64)), -1}
		if len(x) > 4 {
			d.file = int(x[4].(float64))
		}
		var class int
		fmt.Sscanf(d.rel, "class-%d/", &class)
		if !d.equal || class != d.label {
			t.Errorf("%s, epoch %d: %s arrived with label %d, bytes equal %v", tag, d.epoch, d.rel, d.label, d.equal)
		}
		ds[i] = d
	}
	return ds
}

// onceEach checks that in epoch (from 0) each of files files arrived once.
func onceEach(t *testing.T, ds []delivery, epoch, files int) {
	t.Helper()
	seen := map[string]int{}
	for _, d := range ds {
		if d.epoch == epoch {
			seen[d.rel]++
		}
	}
	if len(seen) != files {
		t.Errorf("epoch %d: %d distinct files of %d", epoch, len(seen), files)
	}
	for rel, n := range seen {
		if n != 1 {
			t.Errorf("epoch %d: %s delivered %d times", epoch, rel, n)
		}
	}
}

// TestDataLoaderUnderMpirun: two ranks serve, and beside each a training
// process reads two epochs with a 4-worker DataLoader. Across both, each
// file is delivered once per epoch, with the label of its class directory
// and the bytes of the original file. The order delivered (--order-out)
// is the same, byte for byte, as simulate's of the same dataset and seed,
// and as that of in-process readers asking out of order. (A ramp of 2
// chunks, less than the 5 the budget holds, makes epoch 2's order depend
// on epoch 1's drain.)
func TestDataLoaderUnderMpirun(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 600
	input, dir := packPaths(t, files, 5, 16, 2)
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	orders := []string{filepath.Join(t.TempDir(), "loader.txt"), filepath.Join(t.TempDir(), "consume.txt"), filepath.Join(t.TempDir(), "simulate.txt")}
	stats := filepath.Join(t.TempDir(), "stats.json")
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "30%", "--consume", "0", "--epochs", "2", "--ramp", "2", "--order-out", orders[0])
	results := []string{filepath.Join(t.TempDir(), "0.json"), filepath.Join(t.TempDir(), "1.json")}
	var args [][]string
	for r, res := range results {
		args = append(args, []string{"loader.py", "--local-rank", fmt.Sprint(r), "--input", input, "--out", res, "--workers", "4"})
	}
	trainers(t, env, args)
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	var all []delivery
	for r, res := range results {
		all = append(all, deliveries(t, res, fmt.Sprintf("process %d", r))...)
	}
	onceEach(t, all, 0, files)
	onceEach(t, all, 1, files)
	if c := strings.Count(out.String(), "every file delivered exactly once"); c != 2 {
		t.Errorf("serve reported %d good epochs:\n%s", c, out)
	}
	if o, err := testkit.Run(time.Minute, nil, "mpirun", append(append([]string{}, testkit.MpirunArgs...), "-np", "2", binary(t), "serve",
		"--chunks", dir, "--mem", "30%", "--consume", "3", "--depth", "5", "--epochs", "2", "--ramp", "2", "--order-out", orders[1],
		"--batch", "16", "--stats-json", stats)...); err != nil {
		t.Fatalf("serve --consume 3: %v\n%s", err, o)
	} else if !strings.Contains(string(o), "  order    ") {
		t.Errorf("serve printed no order line:\n%s", o)
	}
	sim, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "2", "--mem-fraction", "0.3", "--ramp", "2", "--order-out", orders[2],
		"--batch", "16", "--json")
	if status != 0 {
		t.Fatal(errs)
	}
	sameMix(t, stats, sim)
	var bodies []string
	for _, name := range orders {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	if lines := strings.Count(bodies[0], "\n"); lines != 1+2*files || bodies[0] != bodies[1] || bodies[0] != bodies[2] {
		t.Errorf("delivered orders differ (%d lines): DataLoader workers, in-process readers, simulate:\n%.300s\n%.300s\n%.300s",
			lines, bodies[0], bodies[1], bodies[2])
	}
	// A rank's own files reach its clients in place, and so do those from
	// the other rank of more than 32 KiB; smaller ones from the other rank
	// are copied.
	shared := regexp.MustCompile(`rank \d: training processes read ([\d,]+) files in place in shared memory(?: \([^)]*\))? and ([\d,]+) as copies`)
	if m := shared.FindAllStringSubmatch(out.String(), -1); len(m) != 2 {
		t.Errorf("no count of shared and copied files from both ranks:\n%s", out)
	} else {
		for _, r := range m {
			t.Log(r[0])
			if r[1] == "0" || r[2] == "0" {
				t.Errorf("%s: want both kinds", r[0])
			}
		}
	}
}

// sameMix checks that serve's statistics (--stats-json) give each epoch
// the order's figures that simulate's JSON lines give it.
func sameMix(t *testing.T, statsPath, simJSON string) {
	t.Helper()
	b, err := os.ReadFile(statsPath)
	if err != nil {
		t.Fatal(err)
	}
	var served, simulated []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var st struct {
			Order map[string]any `json:"order"`
		}
		if err := json.Unmarshal([]byte(l), &st); err != nil || st.Order == nil {
			t.Fatalf("serve's statistics %q: %v, no order", l, err)
		}
		served = append(served, st.Order)
	}
	for _, l := range strings.Split(strings.TrimSpace(simJSON), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		simulated = append(simulated, r)
	}
	if len(served) != len(simulated) {
		t.Fatalf("serve measured %d epochs' orders, simulate %d", len(served), len(simulated))
	}
	for e := range served {
		for _, k := range []string{"distinct_chunks_per_batch", "distinct_chunks_per_batch_shuffle", "chunk_span", "chunk_span_shuffle",
			"distinct_first_1pct", "distinct_first_1pct_shuffle", "distinct_last_1pct", "distinct_last_1pct_shuffle", "pairs_again", "pairs_again_shuffle"} {
			if served[e][k] != simulated[e][k] {
				t.Errorf("epoch %d: serve measured %s %v, simulate %v", e+1, k, served[e][k], simulated[e][k])
			}
		}
		if e > 0 && served[e]["pairs_again"] == nil {
			t.Errorf("epoch %d: no pairs again", e+1)
		}
	}
}

// TestClientSeesRankDie: a client waiting on a rank that is killed raises
// within seconds.
func TestClientSeesRankDie(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	dir := servePack(t, 300, 1, filepath.Join(t.TempDir(), "chunks"))
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	// many epochs: the rank stays up, idle, once the client has read epoch 1
	_, _ = startServeEnv(t, env, 1, "--chunks", dir, "--mem", "30%", "--consume", "0", "--epochs", "100")
	cl := exec.Command(python, "../../python/tests/rank_gone.py")
	cl.Env = append(os.Environ(), env...)
	stdout, err := cl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cl.Stderr = os.Stderr
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) { // wait for the socket
		if m, _ := filepath.Glob(filepath.Join(strings.TrimPrefix(env[0], "BRANDRT_ATTACH="), "local-0", "attach.sock")); len(m) == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("serve did not open its attach socket")
		}
	}
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	defer cl.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "reading" {
		t.Fatalf("client: %q", lines.Text())
	}
	for _, pid := range ranks(t, binary(t)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killed := time.Now()
	done := make(chan string, 1)
	go func() {
		lines.Scan()
		done <- lines.Text()
	}()
	select {
	case msg := <-done:
		if !strings.HasPrefix(msg, "rank gone after") {
			t.Fatalf("client said %q", msg)
		}
		t.Logf("%s (%v after the kill)", msg, time.Since(killed).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not notice within 5 s")
	}
}

// TestWorkerKilled: on rank 0, a DataLoader worker is killed mid-epoch;
// the training process ends that epoch and a new DataLoader reads the next
// one whole. Rank 1's training process reads both epochs as usual: the
// rank survived, and epoch 2 delivers every file once across both.
func TestWorkerKilled(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 600
	input, dir := packPaths(t, files, 5, 16, 2)
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "30%", "--consume", "0", "--epochs", "2")
	results := []string{filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")}
	outs := trainers(t, env, [][]string{
		{"worker_kill.py", "--local-rank", "0", "--input", input, "--out", results[0]},
		{"loader.py", "--local-rank", "1", "--input", input, "--out", results[1]},
	})
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	// PyTorch says "exited unexpectedly" or, when its signal handler sees
	// the death first, "is killed by signal: Killed"
	dead := strings.Contains(outs[0], "exited unexpectedly") || strings.Contains(outs[0], "is killed by signal: Killed")
	if !dead || !strings.Contains(out.String(), "ended    early, by a client") {
		t.Fatalf("no dead worker or no early end:\n%s\n%s", outs[0], out)
	}
	var all []delivery
	for r, res := range results {
		all = append(all, deliveries(t, res, fmt.Sprintf("process %d", r))...)
	}
	onceEach(t, all, 1, files)
	if !strings.Contains(out.String(), "epoch 2/2: 600 files") {
		t.Errorf("serve output:\n%s", out)
	}
}

// TestDataLoaderOptions: one rank serves ten epochs to one training
// process after another, each with other DataLoader settings: no worker
// processes, pinned memory, eight workers, workers that do not persist
// (two epochs), whole batches per request, one file per request, and
// files handed to the training process in place (BrandDataset's
// in_place) with workers that persist and (two epochs) workers that do
// not, the training process keeping three batches' files while the next
// come and checking them again at the end of each epoch.
func TestDataLoaderOptions(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 300
	input, dir := packPaths(t, files, 3, 8, 1)
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	configs := [][]string{
		{"--workers", "0"},
		{"--workers", "2", "--pin-memory"},
		{"--workers", "8"},
		{"--workers", "3", "--not-persistent", "--epochs", "2"},
		{"--workers", "2", "--batched"},
		{"--workers", "2", "--one-by-one"},
		{"--workers", "4", "--in-place"},
		{"--workers", "3", "--in-place", "--not-persistent", "--epochs", "2"},
	}
	cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "40%", "--epochs", "10")
	epoch := 0
	for _, c := range configs {
		res := filepath.Join(t.TempDir(), "got.json")
		outs := trainers(t, env, [][]string{append([]string{"loader.py", "--input", input, "--out", res,
			"--first-epoch", fmt.Sprint(epoch), "--epochs", "1"}, c...)})
		if slices.Contains(c, "--in-place") {
			var n, of int
			_, line, _ := strings.Cut(outs[0], "in place:")
			if _, err := fmt.Sscanf(line, "%d of %d", &n, &of); err != nil || n == 0 {
				t.Errorf("%v: no file handed in place (%v):\n%s", c, err, outs[0])
			}
			t.Logf("%v: %d of %d files in place", c, n, of)
		}
		ds := deliveries(t, res, fmt.Sprint(c))
		seen := map[string]int{}
		for _, d := range ds {
			seen[fmt.Sprint(d.epoch, d.rel)]++
		}
		epochs := len(ds) / files
		if len(seen) != len(ds) || len(ds) != epochs*files || epochs == 0 {
			t.Errorf("%v: %d rows, %d distinct (epoch, file) pairs, for %d files", c, len(ds), len(seen), files)
		}
		epoch += epochs
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if n := strings.Count(out.String(), "every file delivered exactly once"); n != 10 {
		t.Errorf("%d good epochs of 10:\n%s", n, out)
	}

	// A budget that holds the shard keeps its chunks whole in the arena:
	// their files lie where the chunk has them, most not at a page, and
	// go as shared records, in_place or not.
	cmd, out = startServeEnv(t, env, 1, "--chunks", dir, "--mem", "100%", "--epochs", "2")
	res := filepath.Join(t.TempDir(), "got.json")
	trainers(t, env, [][]string{{"loader.py", "--input", input, "--out", res, "--epochs", "2", "--workers", "2", "--in-place"}})
	ds := deliveries(t, res, "resident, in place")
	for e := range 2 {
		onceEach(t, ds, e, files)
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve --mem 100%%: %v\n%s", err, out)
	}
}

// TestSuppliedTraces: two ranks serve with --traces clients. Each
// training process first offers a trace for epoch 1 that shares a file
// with the other's, which both ranks refuse; then its sampler supplies the
// orders: in the first epoch a permutation of the dataset split 1:3
// between the ranks, in the second a third of the dataset. Each rank
// answers exactly its own trace's positions, no file twice, every file
// once in the first epoch, with the original bytes and labels.
func TestSuppliedTraces(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 400
	input, dir := packPaths(t, files, 5, 16, 2)
	perm := rand.New(rand.NewPCG(4, 4)).Perm(files)
	split := [][3]int{{0, 100, files}, {0, 60, files / 3}} // per epoch: rank r reads perm[split[r]:split[r+1]]
	tmp := t.TempDir()
	env := []string{"BRANDRT_ATTACH=" + tmp}
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "30%", "--epochs", "2", "--traces", "clients")
	var args [][]string
	results, resDir := make([]string, 2), t.TempDir()
	for r := range 2 {
		var orders [][]int
		for _, s := range split {
			orders = append(orders, perm[s[r]:s[r+1]])
		}
		bad := orders[0]
		if r == 1 {
			bad = append([]int{perm[0]}, bad...) // perm[0] is rank 0's
		}
		// not in tmp: serve removes its attach directory when it ends,
		// which may be before a training process writes its results
		results[r] = filepath.Join(resDir, fmt.Sprintf("%d.json", r))
		args = append(args, []string{"traces.py", "--local-rank", fmt.Sprint(r), "--input", input, "--out", results[r],
			"--orders", jsonFile(t, orders), "--bad", jsonFile(t, bad)})
	}
	outs := trainers(t, env, args)
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	for r, o := range outs {
		if !strings.Contains(o, "refused: the trace of epoch 1 was refused") || !strings.Contains(o, "appears twice") {
			t.Errorf("process %d: the overlapping traces were not refused as such:\n%s", r, o)
		}
	}
	var all []delivery
	for r, res := range results {
		ds := deliveries(t, res, fmt.Sprintf("process %d", r))
		for e, s := range split {
			n := 0
			for _, d := range ds {
				if d.epoch == e {
					n++
				}
			}
			if want := s[r+1] - s[r]; n != want {
				t.Errorf("process %d, epoch %d: %d files, its trace has %d", r, e, n, want)
			}
		}
		all = append(all, ds...)
	}
	onceEach(t, all, 0, files)
	onceEach(t, all, 1, split[1][2])
	if !strings.Contains(out.String(), "refused") {
		t.Errorf("serve did not say it refused the traces:\n%s", out)
	}
}

// jsonFile writes v to a new file and returns its name.
func jsonFile(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestSiblingOfKilledWorker: two training processes share one rank's
// trace (BrandSampler rank 0 and 1 of 2). The first loses a DataLoader
// worker mid-epoch. When it ends the epoch for its share (end_epoch), its
// sibling reads its own share whole, unharmed, and both read the next
// epoch whole. When it dies instead, the rank ends the job within
// seconds, saying which process went away, and the sibling fails cleanly:
// nothing waits forever.
func TestSiblingOfKilledWorker(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 480
	input, dir := packPaths(t, files, 5, 16, 1)
	for _, die := range []bool{false, true} {
		name := map[bool]string{false: "ends its share", true: "dies"}[die]
		t.Run(name, func(t *testing.T) {
			env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
			cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "30%", "--epochs", "2")
			results := []string{filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")}
			kill := []string{"worker_kill.py", "--input", input, "--out", results[0], "--replica", "0", "--replicas", "2"}
			if die {
				kill = append(kill, "--die")
			}
			type result struct {
				out string
				err error
			}
			res := make(chan result, 2)
			for _, a := range [][]string{kill, {"loader.py", "--input", input, "--out", results[1], "--replica", "1", "--replicas", "2", "--workers", "2"}} {
				go func() {
					o, err := testkit.Run(time.Minute, env, python, append([]string{"-W", "ignore", "../../python/tests/" + a[0]}, a[1:]...)...)
					res <- result{string(o), err}
				}()
			}
			var errs []error
			var outs []string
			for range 2 {
				r := <-res
				errs, outs = append(errs, r.err), append(outs, r.out)
			}
			serr := exitWithin(t, cmd, 30*time.Second)
			if !die {
				if errors.Join(errs...) != nil || serr != nil || !strings.Contains(out.String(), "ended    early, by a client") {
					t.Fatalf("trainers %v, serve %v:\n%s\n%s", errs, serr, outs, out)
				}
				var all []delivery
				for r, res := range results {
					all = append(all, deliveries(t, res, fmt.Sprintf("process %d", r))...)
				}
				onceEach(t, all, 1, files)
				return
			}
			if serr == nil || !strings.Contains(out.String(), "(share 0 of 2 of the rank's trace) went away in epoch 1") {
				t.Fatalf("serve %v:\n%s", serr, out)
			}
			if errs[0] == nil || errs[1] == nil {
				t.Fatalf("both trainers should fail: %v\n%s", errs, outs)
			}
		})
	}
}

// TestPythonOtherReleaseRefused: a Python client of another release (its
// layout.RELEASE faked) is refused by a running rank, with both releases
// named and what to install; a client of the rank's release then reads.
func TestPythonOtherReleaseRefused(t *testing.T) {
	cleanVader(t)
	_, dir := packPaths(t, 64, 2, 16, 1)
	base := t.TempDir()
	env := []string{"BRANDRT_ATTACH=" + base, "PYTHONPATH=../../python"}
	_, said := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "100%", "--epochs", "1")
	defer func() {
		if t.Failed() {
			t.Logf("serve:\n%s", said)
		}
	}()
	waitFile(t, filepath.Join(base, "local-0", "attach.sock"), 30*time.Second)
	const script = `
import sys
from brandrt import BrandError, Client, layout
mine = layout.RELEASE
layout.RELEASE = "0.0.9"
try:
    Client(timeout=30)
    print("attached")
except BrandError as e:
    print(e)
layout.RELEASE = mine
with Client(timeout=30) as c:
    c.wait_epoch(1)
    fid, label, data = c.read(0, 1)
    print("read %d bytes" % len(data))
`
	out, err := testkit.Run(time.Minute, env, python, "-c", script)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"the rank refused this client: this client is brandrt 0.0.9 (attach protocol 6) and the rank brandrt 0.1.0 (attach protocol 6): " +
		"install the client of the rank's release, brandrt 0.1.0 (in its checkout: make wheel, then pip install dist/brandrt-0.1.0-py3-none-any.whl)", "\nread "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("want %q in what the client printed:\n%s", want, out)
		}
	}
}

// TestInPlaceByDefault: a BrandLoader over a default BrandDataset (no
// transform, no in_place) hands the files with pages of their own to the
// training process in place, as HandedFiles, with their bytes; a plain
// DataLoader over one (default_collate) gets every file as bytes; and
// serve says how many clients took each path.
func TestInPlaceByDefault(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 200
	input, dir := packPaths(t, files, 2, 8, 1)
	base := t.TempDir()
	env := []string{"BRANDRT_ATTACH=" + base, "PYTHONPATH=../../python"}
	cmd, said := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "40%", "--epochs", "2")
	const script = `
import os, sys, torch
from brandrt.torch import BrandDataset, BrandLoader, BrandSampler
from brandrt.handed import HandedFile
root = sys.argv[1]
def original(data):  # each file's bytes begin with its own path (pathInput)
    b = bytes(data)
    with open(os.path.join(root, b.split(b"\n", 1)[0].decode()), "rb") as f:
        return f.read() == b
loader = BrandLoader(BrandDataset(timeout=60), batch_size=16, num_workers=2)
n = handed = same = 0
for files, labels in loader:
    assert isinstance(labels, torch.Tensor) and len(labels) == len(files)
    n += len(files)
    handed += sum(isinstance(f, HandedFile) for f in files)
    same += sum(original(f) for f in files)
print("BrandLoader: %d files, %d handed in place, %d as the originals" % (n, handed, same))
dl = torch.utils.data.DataLoader(BrandDataset(timeout=60), sampler=BrandSampler(), batch_size=16, num_workers=2)
dl.sampler.set_epoch(1)
n = copies = same = 0
for files, labels in dl:
    n += len(files)
    copies += sum(type(f) is bytes for f in files)
    same += sum(original(f) for f in files)
print("DataLoader: %d files, %d as bytes, %d as the originals" % (n, copies, same))
`
	out, err := testkit.Run(2*time.Minute, env, python, "-W", "ignore", "-c", script, input)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var n, handed, same int
	if _, err := fmt.Sscanf(string(out), "BrandLoader: %d files, %d handed in place, %d as the originals", &n, &handed, &same); err != nil ||
		n != files || same != files || handed == 0 {
		t.Errorf("the BrandLoader: %d files, %d handed in place, %d as the originals (%v); want %d, some, %d:\n%s", n, handed, same, err, files, files, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("DataLoader: %d files, %d as bytes, %d as the originals", files, files, files)) {
		t.Errorf("the plain DataLoader did not get every file as bytes:\n%s", out)
	}
	t.Logf("%d of %d files handed in place (the others share pages with smaller ones)", handed, n)
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, said)
	}
	if !strings.Contains(said.String(), "of the 4 clients that read, 2 handed their files on in place to their training process and 2 kept them") {
		t.Errorf("serve did not say which clients handed their files on:\n%s", said)
	}
}

// TestHandBoundSaid: past the bound on files handed on (--hand-mem), a
// DataLoader's training process gets the files as bytes, and serve says
// how many went so and what to raise: here the training loop keeps every
// batch, so the bound fills at once.
func TestHandBoundSaid(t *testing.T) {
	const script = `
from brandrt.torch import BrandDataset, BrandLoader
from brandrt.handed import HandedFile
kept, handed, bytes_ = [], 0, 0
for files, labels in BrandLoader(BrandDataset(timeout=60), batch_size=16, num_workers=2):
    kept.append(files)
    handed += sum(isinstance(f, HandedFile) for f in files)
    # the files that could be handed on (rt.Handable): 32 KiB or more, or whole pages
    bytes_ += sum(type(f) is bytes and (len(f) >= 32 << 10 or (len(f) > 0 and len(f) % 4096 == 0)) for f in files)
print("%d handed on, %d that could be as bytes" % (handed, bytes_))
`
	out, said, _ := handJob(t, "256KiB", script)
	var handed, copied int
	if _, err := fmt.Sscanf(out, "%d handed on, %d that could be as bytes", &handed, &copied); err != nil || handed == 0 || copied == 0 {
		t.Fatalf("want some files handed on and some, past --hand-mem, as bytes (%v):\n%s", err, out)
	}
	t.Logf("%d files handed on, %d as bytes past the bound", handed, copied)
	if want := fmt.Sprintf("rank 0: %d files that DataLoader workers could have handed on went through their pipes as bytes, since the files their training processes held took the bound (--hand-mem 256 KiB): a larger --hand-mem hands them on", copied); !strings.Contains(said, want) {
		t.Errorf("%d handed on and %d as bytes; want serve to say %q:\n%s", handed, copied, want, said)
	}
}

// readmeBlock returns the README's first fenced block of lang whose text
// begins with begins, up to its closing fence; it ends the test when
// there is none.
func readmeBlock(t *testing.T, lang, begins string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```"+lang+"\n"+begins)
	if !ok {
		t.Fatalf("README.md has no %s block that begins %q", lang, begins)
	}
	block, _, _ = strings.Cut(block, "```")
	return begins + block
}

// TestReadmeLoader runs the README's first Python block (a BrandLoader
// over a decoding BrandDataset, 4 workers) as written, with what it
// leaves to the reader filled in (tf, epochs, and a count in place of
// the loop's body), against a rank serving 2 epochs of JPEGs: every
// image arrives as a tensor, each epoch whole.
func TestReadmeLoader(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 240
	block := readmeBlock(t, "python", "")
	if !strings.Contains(block, "BrandLoader(") || !strings.Contains(block, "        ...\n") {
		t.Fatalf("README.md's first Python block is not the loader's:\n%s", block)
	}
	script := "import torch, torchvision.transforms as T\ntf = T.Compose([T.Resize((32, 32)), T.ToTensor()])\nepochs, seen = 2, 0\n" +
		strings.Replace(block, "        ...\n", "        assert x.shape[1:] == (3, 32, 32) and len(x) == len(y)\n        seen += len(y)\n", 1) +
		"print('images: %d' % seen)\n"
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", makeJPEGs(t, tmp, files), "--out", dir, "--chunk-files", "16"); status != 0 {
		t.Fatal(errs)
	}
	env := []string{"BRANDRT_ATTACH=" + t.TempDir(), "PYTHONPATH=../../python"}
	cmd, said := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "25%", "--epochs", "2")
	out, err := testkit.Run(2*time.Minute, env, python, "-W", "ignore", "-c", script)
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("images: %d", 2*files)) {
		t.Fatalf("the README's loader: %v; want %d images:\n%s\n%s", err, 2*files, out, script)
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, said)
	}
}

// TestHandMemUnused: when no DataLoader worker hands its files on (a
// plain DataLoader, or a transform in the workers), serve says that the
// footprint's term for files handed on went unused, and how to leave it
// out.
func TestHandMemUnused(t *testing.T) {
	const script = `
import torch
from brandrt.torch import BrandDataset, BrandSampler
n = sum(len(files) for files, _ in torch.utils.data.DataLoader(BrandDataset(timeout=60), sampler=BrandSampler(), batch_size=16, num_workers=2))
print("%d files" % n)
`
	out, said, _ := handJob(t, "1MiB", script)
	if !strings.Contains(out, fmt.Sprintf("%d files", handFiles)) {
		t.Fatalf("want %d files:\n%s", handFiles, out)
	}
	// --hand-mem 1MiB, in the arena's pages
	if want := regexp.MustCompile(`rank 0: none handed files on, so the 1\.\d MiB its footprint counts for them went unused: with such a training, serve --hand-mem 0 leaves them out`); !want.MatchString(said) {
		t.Errorf("want serve to say %q:\n%s", want, said)
	}
}

// TestPlanHandableIsServes: the files plan says a DataLoader's workers
// can hand on in place (handable_files, which its time model costs
// apart from the copies) are the files serve had them hand on, when
// nothing bounds them.
func TestPlanHandableIsServes(t *testing.T) {
	const script = `
from brandrt.torch import BrandDataset, BrandLoader
from brandrt.handed import HandedFile
handed = copied = 0
for files, labels in BrandLoader(BrandDataset(timeout=60), batch_size=16, num_workers=2):
    handed += sum(isinstance(f, HandedFile) for f in files)
    copied += sum(type(f) is bytes for f in files)
print("%d handed on, %d as bytes" % (handed, copied))
`
	out, _, dir := handJob(t, "1GiB", script)
	var handed, copied int64
	if _, err := fmt.Sscanf(out, "%d handed on, %d as bytes", &handed, &copied); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	js, errs, status := runCLI(t, "plan", "--chunks", dir, "--nodes", "1", "--mem", "40%", "--hand-mem", "1GiB", "--epochs", "1", "--json")
	var p planned
	if status != 0 || json.Unmarshal([]byte(js), &p) != nil || len(p.Epochs) != 1 {
		t.Fatalf("plan: status %d: %s%s", status, errs, js)
	}
	rf := p.Epochs[0].Ranks[0]
	t.Logf("plan: %d files, %d handable; serve: %d handed on, %d as bytes", rf.Files, rf.HandableFiles, handed, copied)
	if handed == 0 || copied == 0 || rf.HandableFiles != handed || rf.Files != handed+copied {
		t.Errorf("plan: %d files, %d handable; serve: %d handed on, %d as bytes", rf.Files, rf.HandableFiles, handed, copied)
	}
}

// TestPlanHandableIsServesTwoRanks: on 2 ranks, each rank's DataLoader
// also gets the other rank's files, received into memory it shares
// (those of more than 32 KiB) or copied into its rings; plan's handable
// files are, rank by rank, those serve had the workers hand on.
func TestPlanHandableIsServesTwoRanks(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 300
	_, dir := packPaths(t, files, 2, 8, 2)
	args := []string{"--chunks", dir, "--mem", "100%", "--epochs", "1", "--hand-mem", "1GiB"}
	env := []string{"BRANDRT_ATTACH=" + t.TempDir(), "PYTHONPATH=../../python"}
	cmd, log := startServeEnv(t, env, 2, args...)
	const script = `
import sys
from brandrt.torch import BrandDataset, BrandLoader, BrandSampler
r = int(sys.argv[1])
print(sum(len(f) for f, _ in BrandLoader(BrandDataset(timeout=60, local_rank=r), sampler=BrandSampler(local_rank=r), batch_size=16, num_workers=2)))
`
	outs, errs := make([][]byte, 2), make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			outs[r], errs[r] = testkit.Run(2*time.Minute, env, python, "-W", "ignore", "-c", script, fmt.Sprint(r))
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("training process %d: %v\n%s", r, err, outs[r])
		}
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, log)
	}
	js, perrs, status := runCLI(t, append([]string{"plan", "--nodes", "2", "--json"}, args...)...)
	var p planned
	if status != 0 || json.Unmarshal([]byte(js), &p) != nil || len(p.Epochs) != 1 {
		t.Fatalf("plan: status %d: %s%s", status, perrs, js)
	}
	said := regexp.MustCompile(`rank (\d): training processes read ([\d,]+) files in place in shared memory \(([\d,]+) of them handed on by DataLoader workers\) and ([\d,]+) as copies`).FindAllStringSubmatch(log.String(), -1)
	if len(said) != 2 {
		t.Fatalf("want each rank to say how its files went:\n%s", log)
	}
	for _, m := range said {
		r, _ := strconv.Atoi(m[1])
		num := func(s string) int64 { n, _ := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64); return n }
		rf := p.Epochs[0].Ranks[r]
		t.Logf("rank %d: plan: %d files, %d of them received, %d handable; serve: %d in place (%d handed on), %d as copies",
			r, rf.Files, rf.ReceivedFiles, rf.HandableFiles, num(m[2]), num(m[3]), num(m[4]))
		if rf.ReceivedFiles == 0 || num(m[3]) != rf.HandableFiles || num(m[2])+num(m[4]) != rf.Files {
			t.Errorf("rank %d: plan: %d files, %d received, %d handable; serve: %d in place (%d handed on), %d as copies",
				r, rf.Files, rf.ReceivedFiles, rf.HandableFiles, num(m[2]), num(m[3]), num(m[4]))
		}
	}
	// and how full the files handed on kept their bound
	held := regexp.MustCompile(`rank \d: memory shared with them .*; the files handed on to training processes held at most ([\d.]+ \w+) of it at once \(their bound, --hand-mem, is ([\d.]+ \w+)\)`).FindAllStringSubmatch(log.String(), -1)
	if len(held) != 2 {
		t.Fatalf("want each rank to say what its files handed on held:\n%s", log)
	}
	for _, m := range held {
		peak, err1 := humanize.ParseBytes(m[1])
		bound, err2 := humanize.ParseBytes(m[2])
		t.Logf("%d bytes handed on at once at most, bound %d", peak, bound)
		if err1 != nil || err2 != nil || peak == 0 || peak > bound {
			t.Errorf("%s: at most %d bytes handed on at once, bound %d", m[0], peak, bound)
		}
	}
}

// handFiles is handJob's dataset: files of 2 classes, some of them large
// enough to be handed on.
const handFiles = 200

// handJob serves handFiles files on one rank for one epoch with
// --hand-mem handMem, runs script (a training process; its first
// argument is the dataset's input directory) beside it, and returns what
// each said and the packed dataset.
func handJob(t *testing.T, handMem, script string) (out, said, dir string) {
	t.Helper()
	cleanVader(t)
	needTorch(t)
	input, dir := packPaths(t, handFiles, 2, 8, 1)
	env := []string{"BRANDRT_ATTACH=" + t.TempDir(), "PYTHONPATH=../../python"}
	cmd, log := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "40%", "--epochs", "1", "--hand-mem", handMem)
	o, err := testkit.Run(2*time.Minute, env, python, "-W", "ignore", "-c", script, input)
	if err != nil {
		t.Fatalf("%v\n%s", err, o)
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, log)
	}
	return string(o), log.String(), dir
}
