package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/launch"
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
func pathInput(t *testing.T, classes, files int) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "input")
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range files {
		rel := fmt.Sprintf("class-%d/f%05d.bin", i%classes, i)
		body := append([]byte(rel+"\n"), make([]byte, rng.IntN(40000))...)
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
func startServeEnv(t *testing.T, env []string, np int, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	all := append(append([]string{}, launch.MpirunArgs...), append([]string{"-np", fmt.Sprint(np), binary(t), "serve"}, args...)...)
	cmd := exec.Command("mpirun", all...)
	cmd.Env = append(os.Environ(), env...)
	out := new(strings.Builder)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd, out
}

// TestDataLoaderUnderMpirun: two ranks serve, and beside each a training
// process reads two epochs with a 4-worker DataLoader. Across both, each
// file is delivered once per epoch, with the label of its class directory
// and the bytes of the original file.
func TestDataLoaderUnderMpirun(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 600
	input := pathInput(t, 5, files)
	dir := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "30%", "--consume", "0", "--epochs", "2")
	results := make([]string, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		results[r] = filepath.Join(t.TempDir(), "got.json")
		go func() {
			o, err := launch.Run(2*time.Minute, env, python, "-W", "ignore", "../../python/tests/loader.py",
				"--local-rank", fmt.Sprint(r), "--input", input, "--out", results[r], "--workers", "4")
			if err != nil {
				err = fmt.Errorf("training process %d: %v\n%s", r, err, o)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	type row struct {
		epoch int
		rel   string
		equal bool
		label int
	}
	seen := map[int]map[string]int{0: {}, 1: {}}
	for _, name := range results {
		var rows [][]any
		b, err := os.ReadFile(name)
		if err == nil {
			err = json.Unmarshal(b, &rows)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rows {
			r := row{int(x[0].(float64)), x[1].(string), x[2].(bool), int(x[3].(float64))}
			var class int
			fmt.Sscanf(r.rel, "class-%d/", &class)
			if !r.equal || class != r.label {
				t.Errorf("epoch %d: %s arrived with label %d, bytes equal %v", r.epoch, r.rel, r.label, r.equal)
			}
			seen[r.epoch][r.rel]++
		}
	}
	for e, m := range seen {
		if len(m) != files {
			t.Errorf("epoch %d: %d distinct files of %d", e, len(m), files)
		}
		for rel, n := range m {
			if n != 1 {
				t.Errorf("epoch %d: %s delivered %d times", e, rel, n)
			}
		}
	}
	if c := strings.Count(out.String(), "every file delivered exactly once"); c != 2 {
		t.Errorf("serve reported %d good epochs:\n%s", c, out)
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
	input := pathInput(t, 5, files)
	dir := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "30%", "--consume", "0", "--epochs", "2")
	results := []string{filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")}
	scripts := []string{"worker_kill.py", "loader.py"}
	outs := make([]string, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			o, err := launch.Run(2*time.Minute, env, python, "-W", "ignore", "../../python/tests/"+scripts[r],
				"--local-rank", fmt.Sprint(r), "--input", input, "--out", results[r])
			outs[r] = string(o)
			if err != nil {
				err = fmt.Errorf("training process %d: %v\n%s", r, err, o)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if !strings.Contains(outs[0], "exited unexpectedly") || !strings.Contains(out.String(), "ended    early, by a client") {
		t.Fatalf("no dead worker or no early end:\n%s\n%s", outs[0], out)
	}
	second := map[string]int{}
	for r, name := range results {
		var rows [][]any
		b, err := os.ReadFile(name)
		if err == nil {
			err = json.Unmarshal(b, &rows)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rows {
			epoch, rel, equal, label := int(x[0].(float64)), x[1].(string), x[2].(bool), int(x[3].(float64))
			var class int
			fmt.Sscanf(rel, "class-%d/", &class)
			if !equal || class != label {
				t.Errorf("process %d epoch %d: %s with label %d, bytes equal %v", r, epoch, rel, label, equal)
			}
			if epoch == 1 {
				second[rel]++
			}
		}
	}
	if len(second) != files {
		t.Errorf("epoch 2: %d distinct files of %d", len(second), files)
	}
	for rel, n := range second {
		if n != 1 {
			t.Errorf("epoch 2: %s delivered %d times", rel, n)
		}
	}
	if !strings.Contains(out.String(), "epoch 2/2: 600 files") {
		t.Errorf("serve output:\n%s", out)
	}
}

// TestDataLoaderOptions: one rank serves six epochs to one training
// process after another, each with other DataLoader settings: no worker
// processes, pinned memory, eight workers, workers that do not persist
// (two epochs), whole batches per request.
func TestDataLoaderOptions(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 300
	input := pathInput(t, 3, files)
	dir := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", "8", "--ranks", "1"); status != 0 {
		t.Fatal(errs)
	}
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	configs := [][]string{
		{"--workers", "0"},
		{"--workers", "2", "--pin-memory"},
		{"--workers", "8"},
		{"--workers", "3", "--not-persistent", "--epochs", "2"},
		{"--workers", "2", "--batched"},
	}
	cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "40%", "--epochs", "6")
	epoch := 0
	for _, c := range configs {
		res := filepath.Join(t.TempDir(), "got.json")
		args := append([]string{"-W", "ignore", "../../python/tests/loader.py", "--input", input, "--out", res,
			"--first-epoch", fmt.Sprint(epoch), "--epochs", "1"}, c...)
		if o, err := launch.Run(2*time.Minute, env, python, args...); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, o)
		}
		var rows [][]any
		b, err := os.ReadFile(res)
		if err == nil {
			err = json.Unmarshal(b, &rows)
		}
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, x := range rows {
			rel, equal, label := x[1].(string), x[2].(bool), int(x[3].(float64))
			var class int
			fmt.Sscanf(rel, "class-%d/", &class)
			if !equal || class != label {
				t.Errorf("%v: %s with label %d, bytes equal %v", c, rel, label, equal)
			}
			seen[fmt.Sprint(x[0], rel)]++
		}
		epochs := len(rows) / files
		if len(seen) != len(rows) || len(rows) != epochs*files || epochs == 0 {
			t.Errorf("%v: %d rows, %d distinct (epoch, file) pairs, for %d files", c, len(rows), len(seen), files)
		}
		epoch += epochs
	}
	if err := exitWithin(t, cmd, time.Minute); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if n := strings.Count(out.String(), "every file delivered exactly once"); n != 6 {
		t.Errorf("%d good epochs of 6:\n%s", n, out)
	}
}
