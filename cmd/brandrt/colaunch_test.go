package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// coLaunch starts `mpirun -np np brandrt serve args… -- train…` with its
// own attach base, and returns it, its output and the base.
func coLaunch(t *testing.T, np int, args []string, train ...string) (*exec.Cmd, *testkit.Log, string) {
	t.Helper()
	base := t.TempDir()
	all := mpirunArgv(t, np, append([]string{"serve"}, args...)...)
	cmd := exec.Command("mpirun", append(append(all, "--"), train...)...)
	cmd.Env = append(os.Environ(), "BRANDRT_ATTACH="+base)
	out := new(testkit.Log) // read while mpirun writes it
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return cmd, out, base
}

// processesWith returns the PIDs of the processes whose command line,
// its arguments joined by spaces, holds marker.
func processesWith(marker string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			var pid int
			fmt.Sscanf(p, "/proc/%d/cmdline", &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// leftBehind fails the test if a process of marker or an attach point
// under base is left.
func leftBehind(t *testing.T, marker, base string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // processes signalled at the end may take a moment
	if pids := processesWith(marker); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	if left, _ := filepath.Glob(filepath.Join(base, "*")); len(left) > 0 {
		t.Errorf("attach points left: %v", left)
	}
}

// TestCoLaunchTrains: `serve --nproc-per-node 2 -- loader.py` on 2 ranks
// starts 4 training processes, each with the variables of a torchrun
// worker and of a brandrt client, and with no flag of its own each reads
// its share of its rank's trace: over both epochs every file comes
// exactly once per epoch, and the job ends when the training does
// (serve has no --epochs), with status 0.
func TestCoLaunchTrains(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 480
	input, dir := packPaths(t, files, 5, 16, 2)
	outs := t.TempDir()
	script := `env > "$OUTS/env-$RANK"; exec ` + python + ` -W ignore ../../python/tests/loader.py --input "$INPUT" --out "$OUTS/got-$RANK.json" --workers 1 --epochs 2`
	t.Setenv("OUTS", outs)
	t.Setenv("INPUT", input)
	cmd, out, base := coLaunch(t, 2, []string{"--chunks", dir, "--mem", "30%", "--nproc-per-node", "2"}, "sh", "-c", script)
	if err := exitWithin(t, cmd, 90*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "epoch 2: ") || strings.Contains(out.String(), "epoch 3") {
		t.Errorf("want the statistics of epochs 1 and 2, no third:\n%s", out)
	}
	var all []delivery
	masters := map[string]bool{}
	for r := range 4 {
		env := readEnv(t, filepath.Join(outs, fmt.Sprintf("env-%d", r)))
		want := map[string]string{"RANK": fmt.Sprint(r), "WORLD_SIZE": "4", "LOCAL_RANK": fmt.Sprint(r % 2), "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": fmt.Sprint(r / 2), "BRANDRT_LOCAL_RANK": fmt.Sprint(r / 2), "BRANDRT_ATTACH": base}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("process %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
		for k := range env {
			if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") {
				t.Errorf("process %d inherited the launcher's %s", r, k)
			}
		}
		masters[env["MASTER_ADDR"]+":"+env["MASTER_PORT"]] = true
		all = append(all, deliveries(t, filepath.Join(outs, fmt.Sprintf("got-%d.json", r)), fmt.Sprintf("process %d", r))...)
	}
	if len(masters) != 1 || masters[":"] {
		t.Errorf("MASTER_ADDR:MASTER_PORT differ or are missing: %v", masters)
	}
	for e := range 2 {
		onceEach(t, all, e, files)
	}
	leftBehind(t, "loader.py", base)
}

// readEnv reads the output of env.
func readEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestCoLaunchFails: a training process that fails on one rank ends the
// job within seconds, naming the node, the rank and the status, and the
// job exits with that status; one killed by a signal, likewise; SIGTERM
// to mpirun ends the job and every training process; training processes
// that ignore SIGTERM are killed; a training that ends before saying
// where a --resume job resumes ends it. Nothing is left.
func TestCoLaunchFails(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 400, 2, filepath.Join(t.TempDir(), "chunks"))
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name, script string
		status       int
		says         string
		args         []string
	}{
		{"status", `if [ "$RANK" = 1 ]; then sleep 1; exit 7; fi; exec sleep 1007`, 7, "ended with status 7 on node " + host + " (rank 1, training process 0 of 1)", nil},
		{"signal", `if [ "$RANK" = 0 ]; then sleep 1; kill -KILL $$; fi; exec sleep 1009`, 128 + 9, "ended with signal SIGKILL on node " + host + " (rank 0,", nil},
		{"sigterm", `exec sleep 1015`, 1, "interrupted by SIGTERM", nil},
		// the survivors ignore SIGTERM: SIGKILL ends them
		{"deaf", `if [ "$LOCAL_RANK" = 0 ] && [ "$RANK" = 0 ]; then sleep 1; exit 5; fi; trap '' TERM; exec sleep 1017`, 5, "ended with status 5", []string{"--nproc-per-node", "2"}},
		// with --resume, a training that ends before saying where the job resumes
		{"resume", `exit 0`, 1, "the training ended before saying where the job resumes", []string{"--resume"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, out, base := coLaunch(t, 2, append([]string{"--chunks", dir, "--mem", "25%"}, tc.args...), "sh", "-c", tc.script)
			if tc.name == "sigterm" {
				waitForLine(t, out, "started the training command", 30*time.Second)
				time.Sleep(500 * time.Millisecond)
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			start := time.Now()
			err := exitWithin(t, cmd, 15*time.Second)
			t.Logf("ended %v after: %v", time.Since(start).Round(time.Millisecond), err)
			status := 0
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			}
			if status != tc.status || !strings.Contains(out.String(), tc.says) {
				t.Fatalf("status %d, want %d, and %q in:\n%s", status, tc.status, tc.says, out)
			}
			leftBehind(t, "sleep 10", base)
		})
	}
}

// waitForLine waits until out holds s.
func waitForLine(t *testing.T, out *testkit.Log, s string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(out.String(), s) {
			return
		}
	}
	t.Fatalf("no %q after %v:\n%s", s, d, out)
}

// TestSharedNodeRefused: ranks that share a node are refused, once, by
// rank 0, naming the node and the flag that allows it.
func TestSharedNodeRefused(t *testing.T) {
	dir := servePack(t, 200, 2, filepath.Join(t.TempDir(), "chunks"))
	all := append(append([]string{}, testkit.MpirunArgs...), "-np", "2", binary(t), "serve", "--chunks", dir, "--consume", "1")
	o, err := testkit.Run(time.Minute, []string{"BRANDRT_ALLOW_SHARED_NODE=false"}, "mpirun", all...)
	out := string(o)
	if err == nil || strings.Count(out, "ranks 0 and 1 share node") != 1 || !strings.Contains(out, "--allow-shared-node") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// TestCoLaunchUneven: of a node's two training processes, one lets go of
// its sampler and exits at once after the last epoch, the other works on
// for 7 s (a checkpoint, say), longer than a sampler's session is given:
// the job still ends well, with status 0, once both have.
func TestCoLaunchUneven(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	input, dir := packPaths(t, 200, 3, 16, 1)
	t.Setenv("INPUT", input)
	t.Setenv("OUTS", t.TempDir())
	script := python + ` -W ignore ../../python/tests/loader.py --input "$INPUT" --out "$OUTS/got-$RANK.json" --workers 1 --epochs 1 && if [ "$LOCAL_RANK" = 0 ]; then sleep 7; fi`
	cmd, out, base := coLaunch(t, 1, []string{"--chunks", dir, "--mem", "30%", "--nproc-per-node", "2"}, "sh", "-c", script)
	if err := exitWithin(t, cmd, 60*time.Second); err != nil || !strings.Contains(out.String(), "every file delivered exactly once") {
		t.Fatalf("%v\n%s", err, out)
	}
	leftBehind(t, "loader.py", base)
}

// TestEpochPastTheJob: `serve --epochs 2 -- loader.py --epochs 3`: the
// training reads epochs 1 and 2, and its sampler's wait for epoch 3 fails
// at once, saying how many epochs the job serves, rather than after its
// timeout (120 s); the job ends with the training's failure. A request
// for a position of epoch 3 gets the same news from the rank at once.
func TestEpochPastTheJob(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	input, dir := packPaths(t, 240, 5, 16, 1)
	outs := t.TempDir()
	t.Setenv("OUTS", outs)
	t.Setenv("INPUT", input)
	script := python + ` -W ignore ../../python/tests/loader.py --input "$INPUT" --out "$OUTS/got.json" --workers 1 --epochs 3`
	cmd, out, base := coLaunch(t, 1, []string{"--chunks", dir, "--mem", "30%", "--epochs", "2"}, "sh", "-c", script)
	start := time.Now()
	err := exitWithin(t, cmd, 60*time.Second)
	if err == nil || time.Since(start) > 30*time.Second {
		t.Fatalf("exit %v after %v:\n%s", err, time.Since(start), out)
	}
	if !strings.Contains(out.String(), "epoch 3 is past the job's last, epoch 2 (brandrt serve --epochs 2)") || !strings.Contains(out.String(), "epoch 2/2: ") {
		t.Errorf("output:\n%s", out)
	}
	leftBehind(t, "loader.py", base)

	// The rank's own answer, to a client that asks without a sampler.
	env := []string{"BRANDRT_ATTACH=" + t.TempDir()}
	_, served := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "30%", "--epochs", "1")
	cl := exec.Command(python, "-c", `
import sys, time
sys.path.insert(0, "../../python")
from brandrt import Client, BrandError
for _ in range(300):
    try:
        c = Client(timeout=20)
        c.wait_epoch(1, timeout=30)
        break
    except (BrandError, OSError):
        time.sleep(0.1)
t = time.monotonic()
c.request(0, 2)
try:
    c.next()
except BrandError as e:
    print("%.1f s: %s" % (time.monotonic() - t, e))
`)
	cl.Env = append(os.Environ(), env...)
	got, err := cl.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "epoch 2 is past the job's last, epoch 1 (brandrt serve --epochs 1)") {
		t.Errorf("client: %v\n%s\nserve:\n%s", err, got, served)
	}
}
