package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// vaderWatch notes the shared-memory segments of Open MPI's vader
// transport seen while a job runs, so that the test can check that the
// job left none behind (segments of other jobs running meanwhile are
// told apart by a live process still mapping them).
type vaderWatch struct{ before, seen map[string]bool }

func watchVader() *vaderWatch {
	w := &vaderWatch{before: map[string]bool{}, seen: map[string]bool{}}
	old, _ := filepath.Glob("/dev/shm/vader_segment.*")
	for _, p := range old {
		w.before[p] = true
	}
	return w
}

func (w *vaderWatch) look() {
	now, _ := filepath.Glob("/dev/shm/vader_segment.*")
	for _, p := range now {
		if !w.before[p] {
			w.seen[p] = true
		}
	}
}

// left returns the job's segments still in /dev/shm that no process maps.
func (w *vaderWatch) left() []string {
	var out []string
	for p := range w.seen {
		if _, err := os.Stat(p); err == nil && !mapped(p) {
			out = append(out, p)
		}
	}
	return out
}

// failingJob starts a two-rank serve of a small dataset, training
// processes attaching under a directory of its own, and returns mpirun,
// its output, the attach directory and the vader watch.
func failingJob(t *testing.T, env []string, args ...string) (*exec.Cmd, *testkit.Log, string, *vaderWatch) {
	t.Helper()
	cleanVader(t)
	dir := servePack(t, 600, 2, filepath.Join(t.TempDir(), "chunks"))
	attach := filepath.Join(t.TempDir(), "attach")
	w := watchVader()
	env = append(env, "BRANDRT_ATTACH="+attach)
	cmd, out := startServeEnv(t, env, 2, append([]string{"--chunks", dir, "--mem", "25%", "--epochs", "2"}, args...)...)
	return cmd, out, attach, w
}

// endsClean waits up to 10 s for mpirun to exit with an error whose
// output holds every want, then checks that nothing is left: no rank, no
// attach point, no vader segment of the job.
func endsClean(t *testing.T, cmd *exec.Cmd, out *testkit.Log, attach string, w *vaderWatch, want ...string) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
			w.look()
		case <-time.After(10 * time.Second):
			t.Fatalf("mpirun still running 10 s later:\n%s", out)
		}
	}
	t.Logf("the job ended %v later: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Errorf("the job exited 0:\n%s", out)
	}
	for _, s := range want {
		if !strings.Contains(out.String(), s) {
			t.Errorf("no %q in:\n%s", s, out)
		}
	}
	if left := ranks(t, binary(t)); len(left) != 0 {
		t.Errorf("ranks still running: %v", left)
	}
	if m, _ := filepath.Glob(filepath.Join(attach, "*", "*")); len(m) != 0 {
		t.Errorf("left in the attach directory: %v", m)
	}
	if left := w.left(); len(left) != 0 {
		t.Errorf("left in /dev/shm: %v", left)
	}
}

// waitAttach waits until both ranks listen.
func waitAttach(t *testing.T, attach string, out *testkit.Log) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(attach, "local-*", "attach.sock")); len(m) == 2 {
			return
		}
	}
	t.Fatalf("the ranks never listened:\n%s", out)
}

// A signal to one rank of two (not to mpirun) ends the whole job within
// seconds, the rank saying why, and leaves nothing behind.
func TestServeOneRankSignalled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, out, attach, w := failingJob(t, nil)
			waitAttach(t, attach, out)
			w.look()
			pids := ranks(t, binary(t))
			if len(pids) != 2 {
				t.Fatalf("ranks %v", pids)
			}
			if err := syscall.Kill(pids[1], sig); err != nil {
				t.Fatal(err)
			}
			endsClean(t, cmd, out, attach, w, "interrupted by SIG", "ending the job")
		})
	}
}

// A rank that fails alone (its statistics file cannot be made; a panic)
// ends the whole job within seconds, naming itself and the cause.
func TestServeOneRankFails(t *testing.T) {
	t.Run("stats-json", func(t *testing.T) {
		cmd, out, attach, w := failingJob(t, nil, "--stats-json", "/nonexistent/x.json")
		endsClean(t, cmd, out, attach, w, "rank 0: --stats-json: open /nonexistent/x.json", "rank 0: ending the job")
	})
	t.Run("panic", func(t *testing.T) {
		cmd, out, attach, w := failingJob(t, []string{"BRANDRT_TEST_PANIC=1"}, "--stats-json", filepath.Join(t.TempDir(), "s.json"))
		endsClean(t, cmd, out, attach, w, "rank 1: panic: rank 1: a test asked for a panic", "rank 1: ending the job")
	})
}

// A one-rank serve dies with its mpirun, killed outright or by timeout(1):
// no orphan is left holding the attach point.
func TestServeDiesWithMpirun(t *testing.T) {
	dir := servePack(t, 300, 1, filepath.Join(t.TempDir(), "chunks"))
	for _, how := range []string{"SIGKILL", "timeout"} {
		t.Run(how, func(t *testing.T) {
			attach := filepath.Join(t.TempDir(), "attach")
			args := []string{"--chunks", dir, "--mem", "25%"}
			var cmd *exec.Cmd
			if how == "timeout" {
				all := append([]string{"3", "mpirun"}, mpirunArgv(t, 1, append([]string{"serve"}, args...)...)...)
				cmd = exec.Command("timeout", all...)
				cmd.Env = append(os.Environ(), "BRANDRT_ATTACH="+attach)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			} else {
				cmd, _ = startServeEnv(t, []string{"BRANDRT_ATTACH=" + attach}, 1, args...)
			}
			sock := filepath.Join(attach, "local-0", "attach.sock")
			waitFile(t, sock, 30*time.Second)
			if how == "SIGKILL" {
				_ = cmd.Process.Kill() // mpirun alone, not its group
			}
			_ = cmd.Wait()
			for end := time.Now().Add(10 * time.Second); len(ranks(t, binary(t))) > 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the rank outlived mpirun by 10 s: %v", ranks(t, binary(t)))
				}
			}
			if _, err := os.Stat(sock); err == nil {
				t.Errorf("%s is left", sock)
			}
		})
	}
}

// waitFile waits until name exists, or fails the test.
func waitFile(t *testing.T, name string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(name); err == nil {
			return
		}
	}
	t.Fatalf("no %s after %v", name, d)
}

// A mistake in the flags under mpirun is said once, by rank 0, in a line
// per problem and a pointer to --help, not the whole help per rank.
func TestFlagErrorsUnderMpirun(t *testing.T) {
	dir := servePack(t, 100, 2, filepath.Join(t.TempDir(), "chunks"))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--epochs", "x"}, []string{`invalid value "x" for flag -epochs`}},
		{[]string{"--mem", "0"}, []string{`invalid value "0" for flag -mem: 0 is less than the minimum of 1: the rank needs memory for at least one chunk`}},
		{[]string{"--bogus"}, []string{"flag provided but not defined: -bogus"}},
		{[]string{"--epochs", "4294967296"}, []string{`invalid value "4294967296" for flag -epochs: 4294967296 is more than the limit of 2147483647`}},
		{[]string{"--on-damage", "maybe", "--policy", "foo"}, []string{`policy "foo", want window or paper`, `on damage "maybe", want fail or skip`}},
	} {
		out, err := mpirunStatus(t, 2, append([]string{"serve", "--chunks", dir}, tc.args...)...)
		if err == nil {
			t.Fatalf("%v: exit 0:\n%s", tc.args, out)
		}
		for _, w := range append(tc.want, "(brandrt serve --help explains every flag)") {
			if n := strings.Count(out, w); n != 1 {
				t.Errorf("%v: %q said %d times:\n%s", tc.args, w, n, out)
			}
		}
		if strings.Contains(out, "USAGE:") || strings.Contains(out, "Incorrect Usage") {
			t.Errorf("%v: the help is printed:\n%s", tc.args, out)
		}
	}
}
