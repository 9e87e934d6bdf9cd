package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/testkit"
)

// damageCase damages a copy of a packed dataset and says which files of
// it are lost: entries of rank 1's index.
type damageCase struct {
	name   string
	damage func(t *testing.T, file string, es []chunk.Entry) []chunk.Entry
}

var damageCases = []damageCase{
	{"flipped byte", func(t *testing.T, file string, es []chunk.Entry) []chunk.Entry {
		e := es[5]
		testkit.Flip(t, file, e.Offset+int64(e.Size)/2)
		return es[5:6]
	}},
	{"truncated", func(t *testing.T, file string, es []chunk.Entry) []chunk.Entry {
		if err := os.Truncate(file, es[9].Offset+1); err != nil {
			t.Fatal(err)
		}
		return es[9:]
	}},
}

// TestServeDamagedData damages one chunk file of rank 1 of two (a byte
// flipped in a file, the chunk file cut short) and serves it with both
// policies. With --on-damage fail the job ends within 10 s, exit status
// ≠ 0, in one line of at most 600 characters naming the chunk file, the
// slot, the input path and the byte range of a lost file. With
// --on-damage skip every other file is delivered exactly once with its
// bytes and label, the lost files are counted, and their chunk file is
// named once, with the number of its lost files. (A chunk file that is
// missing is not damage: see TestServeStorageGone.)
func TestServeDamagedData(t *testing.T) {
	cleanVader(t)
	const files = 640
	clean := servePack(t, files, 2, filepath.Join(t.TempDir(), "chunks"))
	crc, label := indexSums(t, clean, 2)
	for _, dc := range damageCases {
		dir := filepath.Join(t.TempDir(), "chunks")
		copyTree(t, clean, dir)
		file := filepath.Join(dir, chunk.RankDir(1), chunk.ChunkName(2))
		lost := dc.damage(t, file, chunkEntries(t, dir, 1, 2))
		for _, policy := range []string{"window", "paper"} {
			t.Run(dc.name+"/"+policy+"/fail", func(t *testing.T) {
				start := time.Now()
				out, err := mpirunStatus(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "2", "--policy", policy)
				took := time.Since(start)
				if err == nil || took > 10*time.Second {
					t.Fatalf("exit %v after %v:\n%s", err, took, out)
				}
				for _, want := range []string{"rank 1", file, fmt.Sprintf("slot %d", lost[0].Slot), lost[0].Path,
					fmt.Sprintf("bytes %d–%d", lost[0].Offset, lost[0].Offset+int64(lost[0].Size)), "--on-damage skip"} {
					if !strings.Contains(out, want) {
						t.Errorf("no %q in:\n%s", want, out)
					}
				}
				if line := lineWith(out, "damaged data"); len(line) > 600 {
					t.Errorf("a line of %d characters: %s", len(line), line)
				}
			})
			t.Run(dc.name+"/"+policy+"/skip", func(t *testing.T) {
				js := filepath.Join(t.TempDir(), "stats.json")
				out := mpirun(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "2", "--policy", policy,
					"--on-damage", "skip", "--max-skipped", "10", "--stats-json", js)
				lostCRC, lostLabel := int64(0), int64(0)
				for _, e := range lost {
					lostCRC, lostLabel = lostCRC+int64(e.CRC), lostLabel+int64(e.Label)
				}
				named := fmt.Sprintf("slot %d (%s)", lost[0].Slot, lost[0].Path)
				if len(lost) > 1 {
					named = fmt.Sprintf("and %d more of its files", len(lost)-1)
				}
				if n := strings.Count(out, named); n != 1 {
					t.Errorf("%q %d times:\n%s", named, n, out)
				}
				for _, s := range readStats(t, js) {
					n := int64(len(lost))
					if !s.OK() || s.FilesSkipped != n || s.FilesDelivered != files-n || s.DuplicateDeliveries != 0 || s.FilesMissing != 0 ||
						s.ChecksumErrors != 0 || s.DeliveredCRCSum != crc-lostCRC || s.DeliveredLabelSum != label-lostLabel {
						t.Errorf("epoch %d: %d of %d files lost: %+v", s.Epoch, n, files, s)
					}
				}
				if strings.Count(out, fmt.Sprintf("every file delivered exactly once but the %d left out as damaged", len(lost))) != 2 {
					t.Errorf("output:\n%s", out)
				}
			})
		}
	}
}

// lineWith returns the first line of out that contains s, or "".
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// chunkEntries returns the index entries of chunk c of rank r.
func chunkEntries(t *testing.T, dir string, r, c int) []chunk.Entry {
	t.Helper()
	ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(dir, chunk.RankDir(r)), r)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	var es []chunk.Entry
	for i := c * ix.K(); i < min(ix.Len(), (c+1)*ix.K()); i++ {
		es = append(es, ix.Entry(i))
	}
	return es
}

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, strings.TrimPrefix(p, src))
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(to, b, 0o644)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mpirunStatus runs brandrt under mpirun (for at most 2 minutes) and
// returns its output and exit error, whatever it is.
func mpirunStatus(t *testing.T, np int, args ...string) (string, error) {
	t.Helper()
	out, err := testkit.Run(2*time.Minute, nil, "mpirun", mpirunArgv(t, np, args...)...)
	return string(out), err
}

// TestServeDatasetPackedAgain packs the dataset of a running 2-rank job
// again (brandrt pack --force, another seed: every chunk file holds other
// files) once epoch 1 is reported. The next chunk read finds files that
// the index the rank read at start does not describe: the job ends,
// exit status ≠ 0, saying that the dataset was packed again under it and
// that it must be restarted, under either --on-damage; it does not call
// that damage, nor suggest --on-damage skip.
func TestServeDatasetPackedAgain(t *testing.T) {
	cleanVader(t)
	input, _ := genInput(t, 640)
	dir := filepath.Join(t.TempDir(), "chunks")
	pack := func(seed string) {
		if _, errs, status := runCLI(t, "pack", "--input", input, "--out", dir, "--chunk-files", "16", "--ranks", "2", "--seed", seed, "--force"); status != 0 {
			t.Fatal(errs)
		}
	}
	for _, onDamage := range []string{"fail", "skip"} {
		t.Run(onDamage, func(t *testing.T) {
			pack("1")
			repacked := false
			on := func(line string, _ int) {
				if !repacked && strings.HasPrefix(line, "epoch 1/") {
					repacked = true
					pack("2")
				}
			}
			start := time.Now()
			out, err := mpirunWatch(t, 2*time.Minute, 2, on, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "50",
				"--on-damage", onDamage)
			if !repacked || err == nil {
				t.Fatalf("exit %v after %v, packed again: %v\n%s", err, time.Since(start), repacked, out)
			}
			line := lineWith(out, "packed again")
			if line == "" || !strings.Contains(line, dir) || !strings.Contains(line, "start the job again") ||
				strings.Contains(out, "--on-damage skip") || strings.Contains(out, "damaged") {
				t.Fatalf("exit %v, the line %q in:\n%s", err, line, out)
			}
			t.Log(line)
		})
	}
}
