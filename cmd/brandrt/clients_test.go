package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/rt/shm"
)

// attachEpoch attaches a client to local rank 0 of the job whose attach
// base is base, once the rank listens and serves epoch; it returns the
// client and the rank's positions in that epoch.
func attachEpoch(t *testing.T, base string, epoch uint32) (*shm.Client, int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := shm.Attach(filepath.Join(base, "local-0"))
		if err == nil {
			for time.Now().Before(deadline) {
				if e, n := c.Epoch(); e == epoch {
					return c, int(n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			c.Close()
			t.Fatalf("epoch %d did not begin within 30 s", epoch)
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readPositions asks c for positions sns of epoch, 32 at a time, and
// returns the records' kinds and, for errors, their messages.
func readPositions(t *testing.T, c *shm.Client, epoch uint32, sns []int32) (kinds []uint32, errs []string) {
	t.Helper()
	for len(sns) > 0 {
		batch := sns[:min(32, len(sns))]
		sns = sns[len(batch):]
		for _, sn := range batch {
			if err := c.Request(epoch, sn); err != nil {
				t.Fatal(err)
			}
		}
		for range batch {
			rec, err := c.Next(20 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, rec.Kind)
			if rec.Kind == shm.RecError {
				errs = append(errs, string(rec.Data))
			}
			c.Release(rec)
		}
	}
	return kinds, errs
}

func span(from, to int) []int32 {
	var s []int32
	for sn := from; sn < to; sn++ {
		s = append(s, int32(sn))
	}
	return s
}

// TestStrayClientRefused: once a training process declared itself
// (BrandSampler), a client that is neither that process nor started by
// it gets its reads refused, and the trainer reads its whole epoch.
func TestStrayClientRefused(t *testing.T) {
	cleanVader(t)
	needTorch(t)
	const files = 480
	input, dir := packPaths(t, files, 5, 16, 1)
	base := t.TempDir()
	env := []string{"BRANDRT_ATTACH=" + base}
	cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "30%", "--epochs", "1")
	ready, result := filepath.Join(t.TempDir(), "ready"), filepath.Join(t.TempDir(), "a.json")
	trained := make(chan error, 1)
	var trainOut []byte
	go func() {
		var err error
		trainOut, err = testkit.Run(time.Minute, env, python, "-W", "ignore", "../../python/tests/loader.py", "--input", input,
			"--out", result, "--epochs", "1", "--workers", "2", "--ready", ready, "--hold", "2")
		trained <- err
	}()
	waitFor(t, ready, 60*time.Second) // the trainer's session exists, and it holds the epoch open
	c, n := attachEpoch(t, base, 1)
	kinds, errs := readPositions(t, c, 1, span(0, n))
	c.Close()
	if err := <-trained; err != nil {
		t.Fatalf("the trainer failed: %v\n%s\n%s", err, trainOut, out)
	}
	if err := exitWithin(t, cmd, 30*time.Second); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if len(errs) != n {
		t.Fatalf("the stray client got %d records of kinds %v, %d of them errors, for %d positions", len(kinds), kinds, len(errs), n)
	}
	for _, e := range errs {
		if !strings.Contains(e, "reads only for its training processes") {
			t.Fatalf("a refusal says %q", e)
		}
	}
	if !strings.Contains(out.String(), "refusing its reads") {
		t.Errorf("serve did not name the stray client:\n%s", out)
	}
	onceEach(t, deliveries(t, result, "the trainer"), 0, files)
}

// TestClientsGoneMidEpoch: a rank whose clients (without a BrandSampler)
// all go away in the middle of an epoch ends the job after --client-wait,
// saying so; a client that comes back within it finishes the epoch.
func TestClientsGoneMidEpoch(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 480, 1, filepath.Join(t.TempDir(), "chunks"))
	for _, back := range []bool{false, true} {
		t.Run(map[bool]string{false: "gone", true: "back"}[back], func(t *testing.T) {
			base := t.TempDir()
			// --fresh: the Go client waits for the epoch without offering
			// a start, as a Python one does
			cmd, out := startServeEnv(t, []string{"BRANDRT_ATTACH=" + base}, 1, "--chunks", dir, "--mem", "30%", "--epochs", "1", "--client-wait", "2s", "--fresh")
			c, n := attachEpoch(t, base, 1)
			if kinds, errs := readPositions(t, c, 1, span(0, 40)); len(errs) > 0 {
				t.Fatalf("records %v: %v", kinds, errs)
			}
			c.Close()
			left := time.Now()
			if back {
				time.Sleep(time.Second)
				c, _ = attachEpoch(t, base, 1)
				kinds, errs := readPositions(t, c, 1, span(40, n))
				c.Close()
				if len(errs) > 0 {
					t.Fatalf("records %v: %v", kinds, errs)
				}
				if err := exitWithin(t, cmd, 30*time.Second); err != nil {
					t.Fatalf("serve: %v\n%s", err, out)
				}
				return
			}
			err := exitWithin(t, cmd, 20*time.Second)
			took := time.Since(left)
			t.Logf("serve ended %v after the last client went", took.Round(time.Millisecond))
			if err == nil || !strings.Contains(out.String(), "every client went away") || !strings.Contains(out.String(), "440 of its 480 positions never asked for") {
				t.Fatalf("serve: %v\n%s", err, out)
			}
			if took < 2*time.Second {
				t.Fatalf("serve ended %v after the last client went, before --client-wait 2s", took)
			}
		})
	}
}

// TestSecondTrainingProcess: a second training process on a rank is
// refused with a message naming the first, which already reads its
// positions, by pid, rather than "position 0 asked twice". One that
// declares the same share as the first (as a BrandSampler does) is
// refused every position it asks, asked before or not; one without a
// BrandSampler, while the first has none either, the positions the first
// asked. The first then reads its epoch whole.
func TestSecondTrainingProcess(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 480, 1, filepath.Join(t.TempDir(), "chunks"))
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "sampler", true: "plain"}[plain], func(t *testing.T) {
			var flags []string
			second, refusals := []string{"--first", "0:2", "--then", "100:102"}, 4
			if plain {
				flags, second, refusals = []string{"--plain"}, []string{"--first", "0:2"}, 2
			}
			base, hold := t.TempDir(), filepath.Join(t.TempDir(), "hold")
			env := []string{"BRANDRT_ATTACH=" + base}
			cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "30%", "--epochs", "1")
			waitFile(t, filepath.Join(base, "local-0", "attach.sock"), 30*time.Second)
			first, lines := startSecondPy(t, env, append([]string{"--first", "0:40", "--hold", hold}, flags...))
			if line := nextLine(t, lines, 60*time.Second); line != "read 40" {
				t.Fatalf("the first process: %q\n%s", line, out)
			}
			got, err := testkit.Run(time.Minute, env, python, append(append([]string{"../../python/tests/second.py"}, second...), flags...)...)
			if err != nil {
				t.Fatalf("the second process: %v\n%s", err, got)
			}
			want := fmt.Sprintf("another training process (pid %d) already reads", first.Process.Pid)
			if n := strings.Count(string(got), want); n != refusals || strings.Contains(string(got), "asked twice") {
				t.Errorf("the second process was refused %d times with %q, want %d:\n%s", n, want, refusals, got)
			}
			t.Logf("the second process:\n%s", got)
			if err := os.WriteFile(hold, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if line := nextLine(t, lines, 60*time.Second); line != "done" || first.Wait() != nil {
				t.Fatalf("the first process: %q, %v\n%s", line, first.ProcessState, out)
			}
			if err := exitWithin(t, cmd, 30*time.Second); err != nil {
				t.Fatalf("serve: %v\n%s", err, out)
			}
		})
	}
}

// startSecondPy starts python/tests/second.py with args and returns it
// and its lines of output; the test's end kills it.
func startSecondPy(t *testing.T, env, args []string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"../../python/tests/second.py"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	return cmd, lines
}

// nextLine returns the next of lines, or fails the test after d.
func nextLine(t *testing.T, lines <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the process ended")
		}
		return l
	case <-time.After(d):
		t.Fatalf("no line within %v", d)
		return ""
	}
}
