package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/stage"
	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/internal/testkit"
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
	if status != 0 || !strings.Contains(out, "staged shard 1 of "+src+": copied ") || !strings.Contains(errs, "stage: shard 1: copy") ||
		!strings.Contains(errs, "stage: shard 1: verify") || filepath.Dir(dir) != local {
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
	for _, want := range []string{"the copy of shard 1 was not reused: chunk: shard 1 chunk 2 (" + filepath.Join(dir, "rank-00001", "chunk-00000002.brc") + "): corrupt: slot",
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
	if status == 0 || !regexp.MustCompile(`brandrt: stage: not enough space in `+regexp.QuoteMeta(small)+` for shard 1 of .*: copying it needs \d+ KiB, \d+ KiB are free; nothing was written`).MatchString(errs) {
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
// temporary directory, lock and reservation of space, which the next
// stage removes, leaving its copy alone.
func TestStageSignals(t *testing.T) {
	// Chunks of 1 file, each copied and synced by one worker: a few
	// seconds of copying.
	input := filepath.Join(t.TempDir(), "input")
	if _, err := synth.Generate(input, synth.Config{Classes: 4, Files: 3000, MeanSize: 20000, Sigma: 0.3, MaxSize: 60000, Seed: 5}); err != nil {
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
				if left, want := testkit.Entries(t, local), filepath.Base(stage.Dir(local, src, 0)); len(left) != 1 || left[0] != want {
					t.Fatalf("after the stage that followed SIGKILL, %s holds %v, want the copy alone (%s)", local, left, want)
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
	if !strings.Contains(out, "brandrt: rank 1: its staged copy of shard 1 was not reused: chunk: shard 1 chunk 2") || !strings.Contains(out, "; copying it again from "+shared+"\n") ||
		!strings.Contains(out, "brandrt: rank 1: staged shard 1 to") || !strings.Contains(out, "brandrt: rank 0: reusing its staged copy of shard 0") ||
		!strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("job 3, a byte of rank 1's copy flipped:\n%s", out)
	}
}

// smallDisk mounts a tmpfs of size bytes on a new directory, unmounted
// when the test ends; where mounting is not allowed (not root) it skips
// the test, saying so.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v); TestStageNeedsSpace in chunk/stage still runs", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// packShards packs files files into chunks of 8 in shards shards and
// returns the dataset's directory.
func packShards(t *testing.T, files, shards int) string {
	t.Helper()
	input, _ := genInput(t, files)
	src := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", src, "--chunk-files", "8", "--shards", fmt.Sprint(shards)); status != 0 {
		t.Fatalf("pack: %s", errs)
	}
	return src
}

// shardBytes returns the bytes of the files of shards [lo, hi) of the
// dataset in src, each rounded up to a page, and their count.
func shardBytes(t *testing.T, src string, lo, hi int) (bytes int64, files int) {
	t.Helper()
	for s := lo; s < hi; s++ {
		entries, err := os.ReadDir(filepath.Join(src, chunk.RankDir(s)))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			bytes, files = bytes+(fi.Size()+4095)/4096*4096, files+1
		}
	}
	return bytes, files
}

// TestStageOntoASmallDisk stages the 8 shards of a dataset that one rank
// serves onto a tmpfs that holds about half of them: stage refuses before
// it writes anything, with the space all of them need, the space free
// and the directory, calls them shards, and leaves the tmpfs empty.
func TestStageOntoASmallDisk(t *testing.T) {
	src := packShards(t, 400, 8)
	all, _ := shardBytes(t, src, 0, 8)
	small := smallDisk(t, all/2)
	out, errs, status := runCLI(t, "stage", "--chunks", src, "--to", small, "--ranks", "1")
	refused := regexp.MustCompile(`brandrt: stage: not enough space in ` + regexp.QuoteMeta(small) + ` for shards 0–7 of ` + regexp.QuoteMeta(src) +
		`: copying them needs [\d.]+ [KM]iB, [\d.]+ KiB are free; nothing was written\n`)
	if status == 0 || !refused.MatchString(errs) || strings.Contains(errs, "rank") {
		t.Errorf("stage of 8 shards onto %d KiB: status %d, want the refusal %q\n%s%s", all/2>>10, status, refused, out, errs)
	}
	if left := testkit.Entries(t, small); len(left) != 0 {
		t.Errorf("the refused stage left %v on %s", left, small)
	}
}

// TestStageTwoRanksOnASmallDisk starts the stages of both ranks of a job
// at once into one tmpfs that holds either rank's shards but not both:
// one stages its shards, the other refuses before it writes anything,
// saying how much its shards need and how much is free, and what is left
// on the tmpfs is the copies of the one that staged, and nothing else.
func TestStageTwoRanksOnASmallDisk(t *testing.T) {
	src := packShards(t, 400, 8)
	m, err := chunk.ReadManifest(chunk.OS, src)
	if err != nil {
		t.Fatal(err)
	}
	homes, err := chunk.Assign(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	for r := range 2 {
		b, files := shardBytes(t, src, homes[r], homes[r+1])
		most = max(most, b+int64(files+5*(homes[r+1]-homes[r])+1)*4096)
	}
	small := smallDisk(t, most*5/4)
	cmds, logs := make([]*exec.Cmd, 2), make([]strings.Builder, 2)
	for r := range 2 {
		cmds[r] = exec.Command(binary(t), "stage", "--chunks", src, "--to", small, "--rank", fmt.Sprint(r), "--ranks", "2")
		cmds[r].Stdout, cmds[r].Stderr = &logs[r], &logs[r]
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
		defer cmds[r].Process.Kill()
	}
	var won []int
	for r := range 2 {
		if err := exitWithin(t, cmds[r], time.Minute); err == nil {
			won = append(won, r)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d of 2 stages succeeded onto %d KiB, want 1:\nrank 0:\n%s\nrank 1:\n%s", len(won), most*5/4>>10, logs[0].String(), logs[1].String())
	}
	w, l := won[0], 1-won[0]
	refused := regexp.MustCompile(fmt.Sprintf(`brandrt: stage: not enough space in %s for shards %d–%d of %s: copying them needs [\d.]+ [KM]iB, [\d.]+ KiB are free`,
		regexp.QuoteMeta(small), homes[l], homes[l+1]-1, regexp.QuoteMeta(src)))
	if !refused.MatchString(logs[l].String()) {
		t.Errorf("rank %d, which did not stage, says:\n%s\nwant %q", l, logs[l].String(), refused)
	}
	var want []string
	for s := homes[w]; s < homes[w+1]; s++ {
		want = append(want, filepath.Base(stage.Dir(small, src, s)))
	}
	slices.Sort(want)
	if left := testkit.Entries(t, small); !slices.Equal(left, want) {
		t.Errorf("left on %s: %v, want rank %d's copies alone: %v", small, left, w, want)
	}
}

// damageCopy flips a byte in a file of every chunk file of shard's copy
// in dir.
func damageCopy(t *testing.T, dir string, shard int) {
	t.Helper()
	chunks, _ := filepath.Glob(filepath.Join(dir, chunk.RankDir(shard), "chunk-*.brc"))
	for c := range chunks {
		for _, e := range chunkEntries(t, dir, shard, c) {
			if e.Size > 0 {
				testkit.Flip(t, filepath.Join(dir, chunk.RankDir(shard), chunk.ChunkName(c)), e.Offset+int64(e.Size)/2)
				break
			}
		}
	}
}

// TestServeStagedCopyDamaged serves copies that serve --stage made on 2
// ranks, and damages every chunk file of rank 1's copy once epoch 1 is
// reported, as a failing local disk would. The later epochs' reads find
// the damage (twice) and read those chunks from the source instead,
// saying so once per chunk, and every epoch delivers every file exactly
// once. With rank 1's shard gone from the source too, the job ends, in
// a line that names both the damage of the copy and the source's error
// (ENOENT).
func TestServeStagedCopyDamaged(t *testing.T) {
	clean := servePack(t, 400, 2, filepath.Join(t.TempDir(), "chunks"))
	for _, gone := range []bool{false, true} {
		t.Run(map[bool]string{false: "source", true: "source gone"}[gone], func(t *testing.T) {
			cleanVader(t)
			shared := filepath.Join(t.TempDir(), "chunks")
			copyTree(t, clean, shared)
			local := t.TempDir()
			damaged := false
			on := func(line string, _ int) {
				if damaged || !strings.HasPrefix(line, "epoch 1/") {
					return
				}
				damaged = true
				damageCopy(t, stage.Dir(local, shared, 1), 1)
				if gone {
					if err := os.Rename(filepath.Join(shared, chunk.RankDir(1)), filepath.Join(shared, "gone")); err != nil {
						t.Error(err)
					}
				}
			}
			out, err := mpirunWatch(t, 2*time.Minute, 2, on, "serve", "--chunks", shared, "--stage", local, "--mem", "25%", "--consume", "2",
				"--epochs", "3", "--pause", "300ms", "--storage-wait", "1s")
			if !damaged {
				t.Fatalf("no epoch 1 reported:\n%s", out)
			}
			copied := filepath.Join(stage.Dir(local, shared, 1), chunk.RankDir(1))
			if !gone {
				said := lineWith(out, "its staged copy of shard 1 chunk ")
				if err != nil || strings.Count(out, "every file delivered exactly once") != 3 || !strings.Contains(said, copied) ||
					!strings.Contains(said, "is damaged (read twice)") || !strings.Contains(said, "read the chunk from the source, "+filepath.Join(shared, chunk.RankDir(1))) {
					t.Fatalf("exit %v; want every epoch whole and a line saying that a damaged chunk of the copy was read from the source:\n%s", err, out)
				}
				return
			}
			line := lineWith(out, "damaged data")
			for _, w := range []string{copied, "checksum", "its staged copy is damaged and the source cannot be read either", filepath.Join(shared, chunk.RankDir(1)), "(ENOENT)"} {
				if err == nil || !strings.Contains(line, w) {
					t.Fatalf("exit %v; no %q in the line that ends the job (%q):\n%s", err, w, line, out)
				}
			}
		})
	}
}
