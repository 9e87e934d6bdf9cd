package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/stage"
)

// lastLine returns the last line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestStageCommand stages rank 1 of a dataset, stages it again (reused),
// damages the copy (detected, named and copied again), and stages onto a
// 256 KiB tmpfs (refused, with the space needed and free).
func TestStageCommand(t *testing.T) {
	input, _ := genInput(t, 500)
	src := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", src, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatalf("pack: %s", errs)
	}
	local := filepath.Join(t.TempDir(), "scratch")
	stage := []string{"stage", "--chunks", src, "--to", local, "--rank", "1"}
	out, errs, status := runCLI(t, stage...)
	dir := lastLine(out)
	if status != 0 || !strings.Contains(out, "staged shard 1 of "+src+": copied ") || !strings.Contains(errs, "stage: copy") ||
		!strings.Contains(errs, "stage: verify") || filepath.Dir(dir) != local {
		t.Fatalf("first stage: status %d\n%s%s", status, out, errs)
	}
	if out, errs, status := runCLI(t, "verify", "--chunks", dir, "--local"); status != 0 || !strings.Contains(out, "checked 2") {
		t.Fatalf("verify the copy: status %d\n%s%s", status, out, errs)
	}
	out, errs, status = runCLI(t, stage...)
	if status != 0 || !regexp.MustCompile(`reused the copy of shard 1: read \d+ B \(manifest.json alone\) from `).MatchString(out) || lastLine(out) != dir {
		t.Fatalf("second stage: status %d\n%s%s", status, out, errs)
	}
	if err := chunktest.FlipByte(filepath.Join(dir, "rank-00001", "chunk-00000002.brc"), 2000); err != nil {
		t.Fatal(err)
	}
	out, errs, status = runCLI(t, stage...)
	for _, want := range []string{"the copy was not reused: chunk: rank 1 chunk 2 (" + filepath.Join(dir, "rank-00001", "chunk-00000002.brc") + "): corrupt: slot",
		"checksum", "staged shard 1 of "} {
		if status != 0 || !strings.Contains(out, want) {
			t.Fatalf("stage of a damaged copy lacks %q: status %d\n%s%s", want, status, out, errs)
		}
	}

	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v); TestStageNeedsSpace in chunk/stage still runs", err)
	}
	defer syscall.Unmount(small, 0)
	out, errs, status = runCLI(t, "stage", "--chunks", src, "--to", small, "--rank", "1")
	if status == 0 || !regexp.MustCompile(`brandrt: stage: not enough space in `+regexp.QuoteMeta(small)+` for rank 1 of .*: the copy needs \d+ KiB, \d+ KiB are free`).MatchString(errs) {
		t.Fatalf("stage onto 256 KiB: status %d\n%s%s", status, out, errs)
	}
}

// TestStageThenServe stages each rank under mpirun into one directory (as
// each node would into its own) and serves the copies with the pattern
// stage prints.
func TestStageThenServe(t *testing.T) {
	cleanVader(t)
	input, _ := genInput(t, 400)
	src := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", src, "--chunk-files", "8", "--ranks", "2"); status != 0 {
		t.Fatalf("pack: %s", errs)
	}
	local := t.TempDir()
	out := mpirun(t, 2, "stage", "--chunks", src, "--to", local)
	pattern := regexp.MustCompile(`with --chunks '([^']+)'`).FindStringSubmatch(out)
	if strings.Count(out, "staged shard ") != 2 || pattern == nil {
		t.Fatalf("stage under mpirun:\n%s", out)
	}
	out = mpirun(t, 2, "serve", "--chunks", pattern[1], "--mem", "40%", "--consume", "2")
	if !strings.Contains(out, "epoch 1/1: 400 files") || !strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("serve the staged copies:\n%s", out)
	}
}

// TestStageSignals interrupts a stage in the middle of its copy: SIGINT
// or SIGTERM make it remove what it copied and say so; SIGKILL leaves its
// temporary directory, which the next stage removes before copying anew.
func TestStageSignals(t *testing.T) {
	// Chunks of 1 file, each copied and synced by one worker: a few
	// seconds of copying.
	input := filepath.Join(t.TempDir(), "input")
	if _, err := chunktest.Generate(input, chunktest.GenConfig{Classes: 4, Files: 3000, MeanSize: 20000, Sigma: 0.3, MaxSize: 60000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", src, "--chunk-files", "1", "--ranks", "1", "--workers", "8"); status != 0 {
		t.Fatalf("pack: %s", errs)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			local := t.TempDir()
			cmd := exec.Command(binary(t), "stage", "--chunks", src, "--to", local, "--workers", "1")
			var log strings.Builder
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			tmp := waitForCopy(t, local, 30*time.Second)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := exitWithin(t, cmd, 20*time.Second)
			left, _ := filepath.Glob(filepath.Join(local, "[^.]*"))
			if sig == syscall.SIGKILL {
				if _, serr := os.Stat(tmp); err == nil || serr != nil || len(left) != 0 {
					t.Fatalf("exit %v; temporary directory: %v; copies: %v", err, serr, left)
				}
				out, errs, status := runCLI(t, "stage", "--chunks", src, "--to", local)
				if _, serr := os.Stat(tmp); status != 0 || !strings.Contains(out, "staged shard 0 of ") || !os.IsNotExist(serr) {
					t.Fatalf("stage after SIGKILL: status %d, temporary directory: %v\n%s%s", status, serr, out, errs)
				}
				return
			}
			want := "brandrt: stage: interrupted; removed what it copied to " + local + "\n"
			hidden, _ := filepath.Glob(filepath.Join(local, ".*.tmp-*"))
			if err == nil || !strings.Contains(log.String(), want) || len(left) != 0 || len(hidden) != 0 {
				t.Fatalf("exit %v, copies %v, temporary directories %v, want %q in:\n%s", err, left, hidden, want, log.String())
			}
		})
	}
}

// waitForCopy polls until a stage into local has copied a chunk file into
// its temporary directory, and returns that directory.
func waitForCopy(t *testing.T, local string, d time.Duration) string {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		copied, _ := filepath.Glob(filepath.Join(local, ".*.tmp-*", "rank-00000", "chunk-00000001.brc"))
		if len(copied) > 0 {
			return filepath.Dir(filepath.Dir(copied[0]))
		}
	}
	t.Fatalf("no chunk copied into %s after %v", local, d)
	return ""
}

// TestServeStage: serve --stage copies each rank's shard to node-local
// disk before the first epoch and serves it; a second job reuses the
// copies reading nothing of the dataset but its manifest (the ranks'
// directories on "shared storage" are gone by then, so any other read
// would fail the job); a third, after one byte of a copy was flipped,
// names the damage and copies that rank's shard again.
func TestServeStage(t *testing.T) {
	cleanVader(t)
	shared := servePack(t, 400, 2, filepath.Join(t.TempDir(), "chunks"))
	local := filepath.Join(t.TempDir(), "local")
	serve := func() string {
		t.Helper()
		return mpirun(t, 2, "serve", "--chunks", shared, "--stage", local, "--mem", "25%", "--consume", "2", "--epochs", "1")
	}
	out := serve()
	for r := range 2 {
		if want := fmt.Sprintf("brandrt: rank %d: staged shard %d to %s", r, r, local); !strings.Contains(out, want) || !strings.Contains(out, "every file delivered exactly once") {
			t.Fatalf("job 1: no %q, or not every file delivered, in:\n%s", want, out)
		}
	}
	aside := filepath.Join(t.TempDir(), "aside")
	if err := os.Mkdir(aside, 0o755); err != nil {
		t.Fatal(err)
	}
	for r := range 2 { // shared storage keeps its manifest alone
		if err := os.Rename(filepath.Join(shared, chunk.RankDir(r)), filepath.Join(aside, chunk.RankDir(r))); err != nil {
			t.Fatal(err)
		}
	}
	out = serve()
	for r := range 2 {
		if want := fmt.Sprintf("brandrt: rank %d: reusing its staged copy of shard %d", r, r); !strings.Contains(out, want) || !strings.Contains(out, "every file delivered exactly once") {
			t.Fatalf("job 2: no %q, or not every file delivered, in:\n%s", want, out)
		}
	}
	for r := range 2 {
		if err := os.Rename(filepath.Join(aside, chunk.RankDir(r)), filepath.Join(shared, chunk.RankDir(r))); err != nil {
			t.Fatal(err)
		}
	}
	copy1 := stage.Dir(local, shared, 1)
	if err := chunktest.FlipByte(filepath.Join(copy1, chunk.RankDir(1), "chunk-00000002.brc"), 3000); err != nil {
		t.Fatal(err)
	}
	out = serve()
	if !strings.Contains(out, "brandrt: rank 1: its staged copy of shard 1 was not reused: chunk: rank 1 chunk 2") ||
		!strings.Contains(out, "brandrt: rank 1: staged shard 1 to") || !strings.Contains(out, "brandrt: rank 0: reusing its staged copy of shard 0") ||
		!strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("job 3, a byte of rank 1's copy flipped:\n%s", out)
	}
}
