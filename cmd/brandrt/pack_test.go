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

	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/internal/testkit"
)

// TestPackInterrupted sends SIGINT or SIGTERM to a pack in the middle of
// writing (alone, and to mpirun, which forwards it to its two processes):
// the pack says so on one line per process and exits non-zero, leaving no
// temporary directory and no output directory.
func TestPackInterrupted(t *testing.T) {
	// Chunks of one file, each written and synced by one worker: 20,000
	// of them. (With 4,000 files in chunks of 2, 1 s, a pack once ended
	// before a busy mpirun passed the signal on; with 8,000 files of 10 kB,
	// 2.5 s once, a fresh machine packed them in 0.9 s and did too.)
	input := filepath.Join(t.TempDir(), "input")
	if _, err := chunktest.Generate(input, chunktest.GenConfig{Classes: 4, Files: 20000, MeanSize: 4000, Sigma: 0.3, MaxSize: 12000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	pack := []string{binary(t), "pack", "--input", input, "--chunk-files", "1", "--workers", "1"}
	mpi := append(append([]string{"mpirun"}, testkit.MpirunArgs...), "-np", "2")
	for _, c := range []struct {
		name string
		cmd  []string
		np   int
		sig  syscall.Signal
	}{
		{"SIGINT", pack, 1, syscall.SIGINT},
		{"SIGTERM", pack, 1, syscall.SIGTERM},
		{"SIGINT to mpirun -np 2", append(mpi, pack...), 2, syscall.SIGINT},
		{"SIGTERM to mpirun -np 2", append(mpi, pack...), 2, syscall.SIGTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.np > 1 {
				cleanVader(t)
			}
			parent := filepath.Join(t.TempDir(), "new")
			out := filepath.Join(parent, "chunks")
			cmd := exec.Command(c.cmd[0], append(c.cmd[1:], "--out", out, "--shards", fmt.Sprint(c.np))...)
			var log strings.Builder
			cmd.Stdout, cmd.Stderr = &log, &log
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitForChunks(t, out, c.np, 30*time.Second)
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			err := exitWithin(t, cmd, 20*time.Second)
			want := fmt.Sprintf("brandrt: pack: interrupted; removed what it wrote in %s\n", out)
			if err == nil || strings.Count(log.String(), want) != c.np {
				t.Fatalf("exit %v, want %d lines %q in:\n%s", err, c.np, want, log.String())
			}
			if _, err := os.Stat(parent); !os.IsNotExist(err) {
				left, _ := filepath.Glob(filepath.Join(out, ".brandrt-pack-*"))
				t.Fatalf("%s is still there (temporary directories: %v)", parent, left)
			}
		})
	}
}

// waitForChunks polls until each of np processes has staged a chunk in a
// temporary directory of out.
func waitForChunks(t *testing.T, out string, np int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		staged, _ := filepath.Glob(filepath.Join(out, ".brandrt-pack-*", "rank-*", "chunk-00000001.brc"))
		if len(staged) >= np {
			return
		}
	}
	t.Fatalf("no chunk staged in %s after %v", out, d)
}
