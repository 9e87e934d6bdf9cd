package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// rankPids returns the pids of a job's ranks (process group pgid), by
// rank.
func rankPids(t *testing.T, pgid, ranks int) []int {
	pids := make([]int, ranks)
	for _, pid := range testkit.Descendants(pgid, binary(t), "serve") {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "OMPI_COMM_WORLD_RANK="); ok {
				if r, err := strconv.Atoi(v); err == nil && r < ranks {
					pids[r] = pid
				}
			}
		}
	}
	return pids
}

// cpuTime is the CPU time process pid used so far, from /proc.
func cpuTime(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Error(err)
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from the 3rd on
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// stoppedPeer serves 640 files on 2 ranks and stops rank 1 (SIGSTOP) once
// epoch 1 is reported; it measures rank 0's CPU from 1 s to 4 s after, and
// continues rank 1 after cont (never when 0). It returns the output, the
// rank 0's share of a core, when a line naming rank 1 as the one waited
// for came after the stop, and the exit error.
func stoppedPeer(t *testing.T, cont time.Duration, args ...string) (out string, cpu float64, warned time.Duration, err error) {
	cleanVader(t)
	dir := servePack(t, 640, 2, filepath.Join(t.TempDir(), "chunks"))
	host, _ := os.Hostname()
	var mu sync.Mutex
	var stopped time.Time
	var pids []int
	measured := make(chan float64, 1)
	on := func(line string, pgid int) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stopped.IsZero() && strings.HasPrefix(line, "epoch 1/"):
			pids = rankPids(t, pgid, 2)
			if pids[0] == 0 || pids[1] == 0 {
				t.Errorf("no rank pids in group %d: %v", pgid, pids)
				return
			}
			if err := syscall.Kill(pids[1], syscall.SIGSTOP); err != nil {
				t.Error(err)
				return
			}
			stopped = time.Now()
			go func() {
				time.Sleep(time.Second)
				c0 := cpuTime(t, pids[0])
				time.Sleep(3 * time.Second)
				measured <- float64(cpuTime(t, pids[0])-c0) / float64(3*time.Second)
			}()
			if cont > 0 {
				time.AfterFunc(cont, func() { _ = syscall.Kill(pids[1], syscall.SIGCONT) })
			}
		case !stopped.IsZero() && warned == 0 && strings.Contains(line, "rank 0 (node "+host+") waits") && strings.Contains(line, "rank 1 (node "+host+") sent nothing since"):
			warned = time.Since(stopped)
		case strings.Contains(line, "the job stops") && len(pids) == 2:
			_ = syscall.Kill(pids[1], syscall.SIGCONT) // so that it can be ended
		}
	}
	args = append([]string{"serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--pause", "300ms"}, args...)
	out, err = mpirunWatch(t, 2*time.Minute, 2, on, args...)
	mu.Lock()
	defer mu.Unlock()
	if stopped.IsZero() {
		t.Fatalf("rank 1 was not stopped:\n%s", out)
	}
	select {
	case cpu = <-measured:
	case <-time.After(5 * time.Second):
		t.Fatalf("no CPU measured:\n%s", out)
	}
	return out, cpu, warned, err
}

// TestServePeerStopped stops one rank of two in the middle of a job, as a
// node stuck in the kernel or a hung file system client would. The other
// rank waits quietly, under 5 % of a core measured from /proc (not
// checked under -short: quietWait), and says
// whom it waits for, with the node, within --peer-warn + 5 s. Continued,
// the job ends well, every epoch exactly once. With --peer-timeout the
// job ends instead, exit status ≠ 0, naming the silent rank and its node.
func TestServePeerStopped(t *testing.T) {
	host, _ := os.Hostname()
	t.Run("continued", func(t *testing.T) {
		js := filepath.Join(t.TempDir(), "stats.json")
		out, cpu, warned, err := stoppedPeer(t, 9*time.Second, "--epochs", "4", "--peer-warn", "3s", "--stats-json", js)
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		quietWait(t, cpu)
		if warned == 0 || warned > 8*time.Second {
			t.Errorf("warned %v after the stop:\n%s", warned, out)
		}
		stats := readStats(t, js)
		if len(stats) != 4 {
			t.Fatalf("%d epochs:\n%s", len(stats), out)
		}
		for _, s := range stats {
			if !s.OK() || s.FilesDelivered != 640 {
				t.Errorf("epoch %d: %+v", s.Epoch, s)
			}
		}
		t.Logf("rank 0 used %.1f%% of a core while it waited; warned %v after the stop", 100*cpu, warned.Round(time.Millisecond))
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		out, cpu, _, err := stoppedPeer(t, 0, "--epochs", "4", "--peer-warn", "2s", "--peer-timeout", "6s")
		if err == nil || time.Since(start) > time.Minute {
			t.Fatalf("exit %v after %v:\n%s", err, time.Since(start), out)
		}
		line := lineWith(out, "--peer-timeout 6s")
		for _, want := range []string{"rank 1 (node " + host + ") sent nothing for", "the job stops"} {
			if !strings.Contains(line, want) {
				t.Errorf("no %q in %q:\n%s", want, line, out)
			}
		}
		quietWait(t, cpu)
		t.Logf("%s\n%s", lineWith(out, "sent nothing since"), line)
	})
}

// quietWait checks that a rank waiting for a stopped peer used under 5 %
// of a core (cpu, a fraction of one). Under -short (make test's second
// pass, under the race detector, beside the other packages' race tests
// on the same cores) the figure is the machine's load more than the
// rank's (2 % alone, 6 % measured there): it is logged, not checked.
func quietWait(t *testing.T, cpu float64) {
	t.Helper()
	switch {
	case testing.Short():
		t.Logf("rank 0 used %.1f%% of a core while it waited (not checked under -short)", 100*cpu)
	case cpu >= 0.05:
		t.Errorf("rank 0 used %.1f%% of a core while it waited", 100*cpu)
	}
}
