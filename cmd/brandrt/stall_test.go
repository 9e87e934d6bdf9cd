package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/internal/testkit"
)

// tinyFiles is the dataset of the issue that found a client could stall
// its rank: 200,000 files of about 61 bytes, so that a client's ring
// holds tens of thousands of answers.
var tinyFiles = testkit.Dataset{Gen: synth.Config{Classes: 10, Files: 200000, MeanSize: 61, Sigma: 0.3, MaxSize: 4096, Seed: 3}, K: 64, Ranks: 2, Seed: 1}

// cleanups run when the test binary ends (TestMain): for what tests
// share.
var cleanups []func()

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// packedTiny packs tinyFiles once for the tests that share it, in a
// directory removed when the test binary ends (TestMain).
func packedTiny(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		if tinyDir, tinyErr = os.MkdirTemp("", "brandrt-tiny-"); tinyErr != nil {
			return
		}
		cleanups = append(cleanups, func() { os.RemoveAll(tinyDir) })
		input, _ := tinyFiles.Generate(t, tinyDir)
		tinyFiles.Pack(t, input, tinyDir+"/chunks")
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir + "/chunks"
}

// startPython starts python/tests/NAME with args in a process group of
// its own, its output in the returned log; the group is killed when the
// test ends.
func startPython(t *testing.T, env []string, name string, args ...string) (*exec.Cmd, *testkit.Log) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-W", "ignore", "../../python/tests/" + name}, args...)...)
	return cmd, startGroup(t, cmd, env, nil)
}

// tinyJob is what the tests on tinyFiles share: they skip under -short,
// clean Open MPI's leftovers, and attach under a directory of their own;
// it returns the packed dataset and the environment naming that
// directory.
func tinyJob(t *testing.T) (dir string, env []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("200,000 files; -short")
	}
	cleanVader(t)
	return packedTiny(t), []string{"BRANDRT_ATTACH=" + t.TempDir()}
}

// TestClientThatStopsReading: on 2 ranks holding their shards, a client
// of rank 0 asks for every other position and never reads. Its requests
// stop being taken (request() says why), and meanwhile the rank's other
// client reads every position left and the other rank's client its
// whole trace; the rank names the client that does not read, and once
// no client of it reads, --client-wait ends the job, naming it again.
// (Before, the rank took the staller's requests until its ring filled,
// and then its loop waited on it: nobody else was served.)
func TestClientThatStopsReading(t *testing.T) {
	dir, env := tinyJob(t)
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "100%", "--epochs", "1", "--peer-warn", "3s", "--client-wait", "10s")
	stall, stallOut := startPython(t, env, "unread.py", "stall", "0", "2")
	// It asks until request() refuses (or, before, until its ring was
	// full: some 44,000 requests later).
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !strings.Contains(stallOut.String(), "stalling:"); {
		time.Sleep(50 * time.Millisecond)
	}
	outs := trainers(t, env, [][]string{{"unread.py", "read", "0", "2"}, {"unread.py", "read", "1"}})
	for r, o := range outs {
		if m := regexp.MustCompile(`read (\d+) of (\d+) in`).FindStringSubmatch(o); m == nil || m[1] != m[2] {
			t.Fatalf("the reader of rank %d: %s", r, o)
		}
	}
	t.Logf("while the staller stalls: %s; %s", strings.TrimSpace(outs[0]), strings.TrimSpace(outs[1]))
	if !strings.Contains(stallOut.String(), "request() raised after 192: ") || !strings.Contains(stallOut.String(), "read replies with next() before asking for more") {
		t.Fatalf("the staller's request():\n%s", stallOut)
	}
	if stall.ProcessState != nil {
		t.Fatalf("the staller ended:\n%s", stallOut)
	}
	named := regexp.MustCompile(`rank 0: client \d+ \(pid \d+, [^)]*unread.py stall 0 2\) has not read the 128 files`)
	err := exitWithin(t, cmd, 60*time.Second)
	if !named.MatchString(out.String()) {
		t.Errorf("the rank did not name the staller:\n%s", out)
	}
	if err == nil || !strings.Contains(out.String(), "no client has read what it was answered (client ") {
		t.Fatalf("serve: %v\n%s", err, out)
	}
}

// TestAskEverythingThenRead: a client that asks for every position of a
// 200,000-file epoch with request() before reading any is told, once
// its ring is full, to read first; it reads what it asked, and the rest
// with read_many().
// (Before, request() waited for ever once the rank stopped taking.)
func TestAskEverythingThenRead(t *testing.T) {
	dir, env := tinyJob(t)
	cmd, out := startServeEnv(t, env, 1, "--chunks", dir, "--mem", "25%", "--epochs", "1")
	got := trainers(t, env, [][]string{{"unread.py", "ask-all", "0"}})[0]
	want := fmt.Sprintf("read the 192 asked, then read_many read %d of the %d positions left", 200000-192, 200000-192)
	if !strings.Contains(got, "request() raised after 192: ") || !strings.Contains(got, want) {
		t.Fatalf("the client:\n%s", got)
	}
	if err := exitWithin(t, cmd, 60*time.Second); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
}

// TestTrainingOnOneNodeOnly: a 2-rank job whose training attached to
// rank 0 only (a launch that failed on the other node). Within
// --peer-warn and 5 s the ranks say that rank 1 has no training, the
// waiting client says what it waits for, and --training-wait ends the
// job naming rank 1. (Before, the training read a few files and then
// both ranks waited for ever without a word.)
func TestTrainingOnOneNodeOnly(t *testing.T) {
	cleanVader(t)
	dir := servePack(t, 2000, 2, filepath.Join(t.TempDir(), "chunks"))
	base := t.TempDir()
	env := []string{"BRANDRT_ATTACH=" + base}
	start := time.Now()
	cmd, out := startServeEnv(t, env, 2, "--chunks", dir, "--mem", "25%", "--epochs", "1", "--peer-warn", "3s", "--training-wait", "15s")
	_, readerOut := startPython(t, env, "unread.py", "read", "0")
	waitForLine(t, out, "had no training process attached", 3*time.Second+5*time.Second)
	said := regexp.MustCompile(`brandrt: rank \d \(node [^)]*\): rank 1 \(node [^)]*\) had no training process attached \d+s after serving began`)
	if !said.MatchString(out.String()) {
		t.Fatalf("after %v:\n%s", time.Since(start).Round(time.Second), out)
	}
	err := exitWithin(t, cmd, 40*time.Second)
	t.Logf("the job ended %v after it began: %v", time.Since(start).Round(time.Second), err)
	if err == nil || !strings.Contains(out.String(), "rank 1 (node ") || !strings.Contains(out.String(), "had no training process attached") ||
		!strings.Contains(out.String(), "(--training-wait 15s)") {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if want := "the job waits for rank 1, which had no training process attached"; !strings.Contains(readerOut.String(), want) {
		t.Errorf("the waiting client did not say %q:\n%s", want, readerOut)
	}
}
