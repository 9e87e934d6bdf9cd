package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/testkit"
)

// mpirunWatch runs mpirun -np np brandrt args, calling on with each line
// of output as it comes, and returns the whole output and exit error.
func mpirunWatch(t *testing.T, timeout time.Duration, np int, on func(line string, pgid int), args ...string) (string, error) {
	t.Helper()
	all := mpirunArgv(t, np, args...)
	out, err := testkit.Watch(timeout, nil, on, "mpirun", all...)
	return string(out), err
}

// storageGone serves a copy of a packed dataset on 2 ranks and renames
// its directory once epoch 1 is reported, as a network file system's
// mount that goes away looks to the job; back, when positive, renames
// it back that long after. The ranks open each chunk file for each read
// (--open-files 0, unless args say otherwise): a file kept open reads on
// after a rename, where a mount gone fails its reads.
func storageGone(t *testing.T, clean string, back time.Duration, args ...string) (dir, out string, err error) {
	t.Helper()
	cleanVader(t)
	dir = filepath.Join(t.TempDir(), "chunks")
	copyTree(t, clean, dir)
	gone := dir + ".gone"
	renamed := false
	// The rename back is stopped when the job ends first; one that began
	// is waited for: t.Error after the test ends panics, and the panic
	// leaves the test's directories behind.
	var backTimer *time.Timer
	moved := make(chan struct{})
	on := func(line string, _ int) {
		if renamed || !strings.HasPrefix(line, "epoch 1/") {
			return
		}
		renamed = true
		if err := os.Rename(dir, gone); err != nil {
			t.Error(err)
		}
		if back > 0 {
			backTimer = time.AfterFunc(back, func() {
				defer close(moved)
				if err := os.Rename(gone, dir); err != nil {
					t.Error(err)
				}
			})
		}
	}
	args = append([]string{"serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--pause", "300ms", "--open-files", "0"}, args...)
	out, err = mpirunWatch(t, 2*time.Minute, 2, on, args...)
	if backTimer != nil && !backTimer.Stop() {
		<-moved
	}
	if !renamed {
		t.Fatalf("no epoch 1 reported:\n%s", out)
	}
	return dir, out, err
}

// TestServeStorageGone takes the dataset's directory away after epoch 1
// of a 2-rank job. Under --on-damage skip the job must not go on
// delivering nothing: it ends, exit status ≠ 0, after --storage-wait,
// saying that storage is unreachable and naming a chunk file and the
// errno, and no epoch after the first is reported. Under the default it
// ends alike, in one short line that does not call it damage nor advise
// --on-damage skip. When the directory comes back within --storage-wait
// (6 s later: longer than the 4.25 s a read used to be retried) the job
// says that it waits and that storage answers again, and every epoch
// delivers every file exactly once.
func TestServeStorageGone(t *testing.T) {
	const files = 640
	clean := servePack(t, files, 2, filepath.Join(t.TempDir(), "chunks"))
	for _, onDamage := range []string{"skip", "fail"} {
		t.Run("gone/"+onDamage, func(t *testing.T) {
			start := time.Now()
			dir, out, err := storageGone(t, clean, 0, "--epochs", "30", "--on-damage", onDamage, "--storage-wait", "2s", "--max-skipped", "50%")
			if err == nil {
				t.Fatalf("exit 0 after %v:\n%s", time.Since(start), out)
			}
			line := lineWith(out, "the job stops")
			for _, want := range []string{"storage unreachable", dir, "ENOENT", "--storage-wait"} {
				if !strings.Contains(line, want) {
					t.Errorf("no %q in the line that ends the job: %q\n%s", want, line, out)
				}
			}
			if len(line) > 400 {
				t.Errorf("a line of %d characters: %s", len(line), line)
			}
			for _, never := range []string{"damaged", "--on-damage skip", "epoch 2/", " 0 files"} {
				if strings.Contains(out, never) {
					t.Errorf("%q in:\n%s", never, out)
				}
			}
			if !strings.Contains(out, "waiting up to 2s for it to come back (--storage-wait)") {
				t.Errorf("no rank said that it waits:\n%s", out)
			}
		})
	}
	t.Run("kept", func(t *testing.T) { // the chunk files stay open: a rename takes nothing away
		js := filepath.Join(t.TempDir(), "stats.json")
		_, out, err := storageGone(t, clean, 0, "--epochs", "4", "--storage-wait", "2s", "--open-files", "1000", "--stats-json", js)
		if err != nil || strings.Contains(out, "waiting up to") {
			t.Fatalf("%v:\n%s", err, out)
		}
		stats := readStats(t, js)
		if len(stats) != 4 {
			t.Fatalf("%d epochs reported:\n%s", len(stats), out)
		}
		for _, s := range stats {
			if !s.OK() || s.FilesDelivered != files || s.DuplicateDeliveries != 0 {
				t.Errorf("epoch %d: %+v", s.Epoch, s)
			}
		}
	})
	t.Run("back", func(t *testing.T) {
		js := filepath.Join(t.TempDir(), "stats.json")
		_, out, err := storageGone(t, clean, 6*time.Second, "--epochs", "12", "--storage-wait", "1m", "--stats-json", js)
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		for _, want := range []string{"waiting up to 1m0s for it to come back (--storage-wait)", "storage answers again after"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		stats := readStats(t, js)
		if len(stats) != 12 {
			t.Fatalf("%d epochs reported:\n%s", len(stats), out)
		}
		for _, s := range stats {
			if !s.OK() || s.FilesDelivered != files || s.FilesSkipped != 0 || s.DuplicateDeliveries != 0 {
				t.Errorf("epoch %d: %+v", s.Epoch, s)
			}
		}
	})
}

// TestServeMaxSkipped damages 3 files of one chunk file and serves it
// with --on-damage skip: with --max-skipped 2 (or 0.1%, rounded up to 1
// of 640 files) the job ends, exit status ≠ 0, saying how many files it
// left out and the bound; with 3 it serves every epoch.
func TestServeMaxSkipped(t *testing.T) {
	cleanVader(t)
	const files = 640
	dir := servePack(t, files, 2, filepath.Join(t.TempDir(), "chunks"))
	file := filepath.Join(dir, chunk.RankDir(1), chunk.ChunkName(2))
	for _, e := range chunkEntries(t, dir, 1, 2)[3:6] {
		testkit.Flip(t, file, e.Offset+int64(e.Size)/2)
	}
	for _, most := range []string{"2", "0.1%"} {
		t.Run(most, func(t *testing.T) {
			out, err := mpirunStatus(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "2", "--on-damage", "skip", "--max-skipped", most)
			want := "3 files damaged on storage and left out on this rank, more than the 2 --max-skipped allows"
			if most != "2" {
				want = "more than the 1 --max-skipped allows (of 640 in the dataset)"
			}
			if err == nil || !strings.Contains(out, want) {
				t.Fatalf("exit %v, no %q in:\n%s", err, want, out)
			}
		})
	}
	out := mpirun(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "2", "--on-damage", "skip", "--max-skipped", "3")
	if n := strings.Count(out, "every file delivered exactly once but the 3 left out as damaged"); n != 2 {
		t.Errorf("%d epochs checked:\n%s", n, out)
	}
}

// TestServeFilesLate starts a 2-rank job on a dataset whose rank 1 index
// (or manifest) is not there yet, as a mount slow to appear looks. Put
// back 3 s later, within --storage-wait, the rank says that it waits for
// the file, naming it and the errno, and that storage answers again, and
// the job serves every file exactly once. Never put back, the job ends
// after a --storage-wait of 2 s, exit status ≠ 0, naming the file and the
// errno.
func TestServeFilesLate(t *testing.T) {
	clean := servePack(t, 400, 2, filepath.Join(t.TempDir(), "chunks"))
	for _, tc := range []struct {
		name string
		file string // relative to the dataset
		back time.Duration
	}{
		{"index/back", filepath.Join(chunk.RankDir(1), chunk.IndexName), 3 * time.Second},
		{"index/gone", filepath.Join(chunk.RankDir(1), chunk.IndexName), 0},
		{"manifest/back", chunk.ManifestName, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanVader(t)
			dir := filepath.Join(t.TempDir(), "chunks")
			copyTree(t, clean, dir)
			file := filepath.Join(dir, tc.file)
			if err := os.Rename(file, file+".late"); err != nil {
				t.Fatal(err)
			}
			wait := "2s"
			if tc.back > 0 {
				wait = "1m"
				timer := time.AfterFunc(tc.back, func() { os.Rename(file+".late", file) })
				defer timer.Stop()
			}
			start := time.Now()
			out, err := mpirunStatus(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--storage-wait", wait)
			said := file + ": no such file or directory (ENOENT); waiting up to " + map[bool]string{true: "1m0s", false: "2s"}[tc.back > 0] + " for it to come back (--storage-wait)"
			if !strings.Contains(out, said) {
				t.Errorf("no %q in:\n%s", said, out)
			}
			if tc.back > 0 {
				if err != nil || !strings.Contains(out, "storage answers again after") || !strings.Contains(out, "every file delivered exactly once") {
					t.Fatalf("exit %v after %v, want the job to wait for %s and serve:\n%s", err, time.Since(start), tc.file, out)
				}
				return
			}
			line := lineWith(out, "the job stops")
			if err == nil || time.Since(start) < 2*time.Second || !strings.Contains(line, file) || !strings.Contains(line, "(ENOENT), still after waiting 2s") {
				t.Fatalf("exit %v after %v, want the job to end naming %s and ENOENT after 2 s:\n%s", err, time.Since(start), file, out)
			}
		})
	}
}
