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

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/synth"
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
	if _, err := synth.Generate(input, synth.Config{Classes: 4, Files: 20000, MeanSize: 4000, Sigma: 0.3, MaxSize: 12000, Seed: 5}); err != nil {
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

// TestPackBySize: chunks cut by --chunk-size hold files until the next
// would take them past it, a larger file alone; verify and inspect read
// them; three shards serve on two ranks each file once per epoch, in the
// order simulate predicts byte for byte; the paper's policy, which needs
// K files per chunk, is refused with the reason.
func TestPackBySize(t *testing.T) {
	cleanVader(t)
	input := filepath.Join(t.TempDir(), "input")
	files, err := synth.Generate(input, synth.Config{Classes: 3, Files: 400, MeanSize: 9000, Sigma: 1.3, MaxSize: 200 << 10, Zero: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	dir := filepath.Join(t.TempDir(), "chunks")
	out, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-size", "64KiB", "--shards", "3")
	if status != 0 || !strings.Contains(out, "chunks of up to 64 KiB") {
		t.Fatalf("pack: status %d, %q %q", status, out, errs)
	}
	m, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 || m.Params.ChunkBytes != limit {
		t.Fatalf("manifest version %d, chunks of %d bytes", m.Version, m.Params.ChunkBytes)
	}
	alone, most := 0, 0
	for r := range m.Ranks {
		ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(dir, chunk.RankDir(r)), r)
		if err != nil {
			t.Fatal(err)
		}
		for c := range ix.Chunks() {
			var bytes, next int64
			n := ix.ChunkFiles(c)
			for i := range n {
				bytes += int64(ix.Record(ix.ChunkFirst(c) + i).Size)
			}
			if j := ix.ChunkFirst(c) + n; j < ix.Len() {
				next = int64(ix.Record(j).Size) // the file that opens the next chunk
			}
			switch {
			case n == 1 && bytes > limit:
				alone++
			case bytes > limit:
				t.Errorf("shard %d chunk %d: %d files of %d bytes, more than %d", r, c, n, bytes, limit)
			case next > 0 && bytes+next <= limit:
				t.Errorf("shard %d chunk %d ends at %d bytes though the next file (%d bytes) fits", r, c, bytes, next)
			}
			most = max(most, n)
		}
		ix.Close()
	}
	big := 0
	for _, f := range files {
		if f.Size > limit {
			big++
		}
	}
	if alone != big || big == 0 || most != m.K {
		t.Fatalf("%d chunks of one file over 64 KiB, %d such files; K=%d, the largest chunk holds %d", alone, big, m.K, most)
	}
	if out, errs, status := runCLI(t, "verify", "--chunks", dir); status != 0 {
		t.Fatalf("verify: %s %s", out, errs)
	}
	if out, _, _ := runCLI(t, "inspect", "--chunks", dir); !strings.Contains(out, "chunks of up to 64 KiB") {
		t.Errorf("inspect says nothing of chunks cut by size:\n%s", out)
	}
	orders := []string{filepath.Join(t.TempDir(), "serve.txt"), filepath.Join(t.TempDir(), "simulate.txt")}
	o, err := testkit.Run(time.Minute, nil, "mpirun", append(append([]string{}, testkit.MpirunArgs...), "-np", "2", binary(t), "serve",
		"--chunks", dir, "--mem", "40%", "--consume", "2", "--epochs", "2", "--order-out", orders[0])...)
	if err != nil || strings.Count(string(o), "every file delivered exactly once") != 2 {
		t.Fatalf("serve: %v\n%s", err, o)
	}
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--ranks", "2", "--epochs", "2", "--mem-fraction", "0.4", "--order-out", orders[1]); status != 0 {
		t.Fatal(errs)
	}
	a, _ := os.ReadFile(orders[0])
	b, _ := os.ReadFile(orders[1])
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("serve's order (%d bytes) differs from simulate's (%d bytes):\n%.300s\n%.300s", len(a), len(b), a, b)
	}
	_, errs, status = runCLI(t, "simulate", "--chunks", dir, "--policy", "paper")
	if status == 0 || !strings.Contains(errs, "chunks were cut by size") {
		t.Errorf("simulate --policies paper on chunks cut by size: status %d, %q", status, errs)
	}
}
