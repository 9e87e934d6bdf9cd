package stage_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/stage"
	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/internal/testkit"
)

// dataset is a small labelled dataset of n files for ranks ranks (K=8),
// shuffled with seed.
func dataset(n, ranks int, seed uint64) testkit.Dataset {
	return testkit.Dataset{Gen: synth.Config{Classes: 3, Files: n, MeanSize: 3000, Sigma: 0.8, MaxSize: 40000, Zero: 2, Seed: 7},
		K: 8, Ranks: ranks, Seed: seed}
}

// packed packs dataset(n, ranks, seed) and returns its directory.
func packed(t *testing.T, n, ranks int, seed uint64) string {
	t.Helper()
	return dataset(n, ranks, seed).Packed(t)
}

// config stages shards of src into local through fsys.
func config(fsys chunk.FS, src, local string, shards ...int) stage.Config {
	cfg := stage.DefaultConfig()
	cfg.FS, cfg.Source, cfg.Local, cfg.Shards, cfg.Workers = fsys, src, local, shards, 2
	return cfg
}

// stageOne stages the one shard of cfg.
func stageOne(cfg stage.Config) (stage.Result, error) {
	res, err := stage.Stage(cfg)
	if len(res) != 1 {
		return stage.Result{}, err
	}
	return res[0], err
}

func mustStage(t *testing.T, cfg stage.Config) stage.Result {
	t.Helper()
	res, err := stageOne(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// countFS counts the bytes read from each file below a directory, by
// path relative to it.
type countFS struct {
	chunk.FS
	under string
	mu    sync.Mutex
	read  map[string]int64
}

func newCountFS(under string) *countFS {
	return &countFS{FS: chunk.OS, under: under, read: map[string]int64{}}
}

func (c *countFS) Open(name string, uncached bool) (chunk.File, error) {
	f, err := c.FS.Open(name, uncached)
	rel, rerr := filepath.Rel(c.under, name)
	if err != nil || rerr != nil || strings.HasPrefix(rel, "..") {
		return f, err
	}
	c.add(rel, 0)
	return &countFile{File: f, fs: c, rel: rel}, nil
}

func (c *countFS) add(rel string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read[rel] += int64(n)
}

// reset returns what was counted since the last reset.
func (c *countFS) reset() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.read
	c.read = map[string]int64{}
	return r
}

type countFile struct {
	chunk.File
	fs  *countFS
	rel string
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.add(f.rel, n)
	return n, err
}

// sizes returns the size of every file below dir, by relative path.
func sizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fi.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCopy checks that the copy in dir is a node-local dataset holding
// rank's shard of src byte for byte, and nothing of the other ranks.
func checkCopy(t *testing.T, src, dir string, rank int) {
	t.Helper()
	m, rep, err := chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: dir, Workers: 2, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || rep.Ranks != 1 || rep.Files != m.Shards[rank].Files || len(rep.Skipped) != m.Ranks-1 {
		t.Fatalf("verify %s: %d ranks, %d files (shard: %d), skipped %v, problems %v", dir, rep.Ranks, rep.Files, m.Shards[rank].Files, rep.Skipped, rep.Problems)
	}
	want := []string{chunk.ManifestName, filepath.Join(chunk.RankDir(rank), chunk.IndexName)}
	for c := range m.Shards[rank].Chunks {
		want = append(want, filepath.Join(chunk.RankDir(rank), chunk.ChunkName(c)))
	}
	got := sizes(t, dir)
	delete(got, stage.MarkerName)
	if len(got) != len(want) {
		t.Fatalf("the copy holds %d files, want %d: %v", len(got), len(want), got)
	}
	for _, rel := range want {
		a, errA := os.ReadFile(filepath.Join(src, rel))
		b, errB := os.ReadFile(filepath.Join(dir, rel))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: the copy differs from the source (%v, %v)", rel, errA, errB)
		}
	}
}

// nothingLeft checks that local holds nothing: no copy, no temporary
// directory, no lock.
func nothingLeft(t *testing.T, local string) {
	t.Helper()
	if got := testkit.Entries(t, local); len(got) != 0 {
		t.Fatalf("%s holds %v, want nothing", local, got)
	}
}

// TestStageThenReuse stages rank 1 of 2, then again: the first copies the
// manifest and rank 1's index and chunk files, each read once from the
// source, and nothing of rank 0; the second reads the manifest alone from
// the source, verifies the copy and keeps it.
func TestStageThenReuse(t *testing.T) {
	src := packed(t, 300, 2, 1)
	local := filepath.Join(t.TempDir(), "scratch") // created by Stage
	fsys := newCountFS(src)
	cfg := config(fsys, src, local, 1)
	var steps []string
	cfg.Progress = func(_ int, step stage.Step, done, total int64) {
		if done == total {
			steps = append(steps, fmt.Sprintf("%s %d", step, total))
		}
	}
	res := mustStage(t, cfg)
	if res.Reused || res.Replaced != "" || res.Dir != stage.Dir(local, src, 1) || res.Dir != chunk.ForRank(stage.Pattern(local, src), 1) {
		t.Fatalf("first stage: %+v (pattern %s)", res, stage.Pattern(local, src))
	}
	checkCopy(t, src, res.Dir, 1)

	all := sizes(t, src)
	want := map[string]int64{}
	var shard, chunks int64
	for rel, n := range all {
		if rel == chunk.ManifestName || strings.HasPrefix(rel, chunk.RankDir(1)) {
			want[rel] = n
			shard += n
			if strings.HasSuffix(rel, ".brc") {
				chunks += n
			}
		}
	}
	if got := fsys.reset(); !mapsEqual(got, want) {
		t.Fatalf("read from the source %v, want each file of rank 1 and the manifest once: %v", got, want)
	}
	if res.SourceBytes != shard || res.CopiedBytes != shard || res.Bytes != shard || res.VerifiedBytes != chunks {
		t.Fatalf("result counts %d read, %d copied, %d in the copy, %d verified; the shard has %d bytes, %d in chunk files",
			res.SourceBytes, res.CopiedBytes, res.Bytes, res.VerifiedBytes, shard, chunks)
	}
	if wantSteps := []string{fmt.Sprintf("copy %d", shard-all[chunk.ManifestName]), fmt.Sprintf("verify %d", chunks)}; !slices.Equal(steps, wantSteps) {
		t.Fatalf("progress ended steps %v, want %v", steps, wantSteps)
	}

	steps = nil
	res = mustStage(t, cfg)
	if !res.Reused || res.Replaced != "" || res.Dir != stage.Dir(local, src, 1) {
		t.Fatalf("second stage: %+v", res)
	}
	manifest := map[string]int64{chunk.ManifestName: all[chunk.ManifestName]}
	if got := fsys.reset(); !mapsEqual(got, manifest) {
		t.Fatalf("a reuse read %v from the source, want the manifest alone: %v", got, manifest)
	}
	if res.SourceBytes != all[chunk.ManifestName] || res.CopiedBytes != 0 || res.VerifiedBytes != chunks || res.Bytes != shard {
		t.Fatalf("reuse counts %d read, %d copied, %d verified, %d in the copy", res.SourceBytes, res.CopiedBytes, res.VerifiedBytes, res.Bytes)
	}
	if wantSteps := []string{fmt.Sprintf("verify %d", chunks)}; !slices.Equal(steps, wantSteps) {
		t.Fatalf("progress ended steps %v, want %v", steps, wantSteps)
	}
	if got := testkit.Entries(t, local); !slices.Equal(got, []string{filepath.Base(res.Dir)}) {
		t.Fatalf("%s holds %v, want the copy alone", local, got)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestStageChangedSource packs the source again with another seed: the
// next Stage finds the manifest changed and copies the new shard.
func TestStageChangedSource(t *testing.T) {
	src := packed(t, 300, 2, 1)
	local := t.TempDir()
	cfg := config(chunk.OS, src, local, 1)
	first := mustStage(t, cfg)
	dataset(300, 2, 2).Pack(t, filepath.Join(filepath.Dir(src), "input"), src)
	res := mustStage(t, cfg)
	if res.Reused || res.Dir != first.Dir || !strings.Contains(res.Replaced, "the source changed since the copy was made") {
		t.Fatalf("after packing again: %+v", res)
	}
	checkCopy(t, src, res.Dir, 1)
}

// TestStageNeedsSpace refuses copies that the free space cannot hold
// together, though it holds each: before it writes anything, saying
// where, for which shards, how much they need and how much is free. One
// shard alone fits.
func TestStageNeedsSpace(t *testing.T) {
	src := packed(t, 600, 4, 1)
	local := t.TempDir()
	cfg := config(chunk.OS, src, local, 0, 1, 2, 3)
	var asked string
	cfg.FreeSpace = func(dir string) (int64, error) { asked = dir; return 1 << 20, nil }
	_, err := stage.Stage(cfg)
	for _, w := range []string{"not enough space in " + local + " for shards 0–3 of " + src, ": copying them needs ", " MiB, 1.0 MiB are free; nothing was written"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %v, want it to contain %q", err, w)
		}
	}
	if asked != local {
		t.Fatalf("free space asked of %q, want %q", asked, local)
	}
	nothingLeft(t, local)
	cfg.Shards = []int{2}
	checkCopy(t, src, mustStage(t, cfg).Dir, 2)
}

// TestStageTwoDatasets stages two datasets, and the same one through a
// symlink, into one directory: two copies that do not collide, each
// reused next time.
func TestStageTwoDatasets(t *testing.T) {
	a, b := packed(t, 300, 2, 1), packed(t, 200, 2, 1)
	local := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	ra, rb := mustStage(t, config(chunk.OS, a, local, 0)), mustStage(t, config(chunk.OS, b, local, 0))
	if ra.Dir == rb.Dir || filepath.Base(a) != filepath.Base(b) {
		t.Fatalf("both datasets (named %s and %s) staged in %s", filepath.Base(a), filepath.Base(b), ra.Dir)
	}
	for src, want := range map[string]string{a: ra.Dir, b: rb.Dir, link: ra.Dir} {
		res := mustStage(t, config(chunk.OS, src, local, 0))
		if !res.Reused || res.Dir != want {
			t.Fatalf("%s: %+v, want %s reused", src, res, want)
		}
		checkCopy(t, src, res.Dir, 0)
	}
}

// TestStageTakesTurns runs two stages of the same copy at once: one
// copies, the other waits for it, then verifies and reuses its copy.
func TestStageTakesTurns(t *testing.T) {
	src := packed(t, 300, 2, 1)
	local := t.TempDir()
	var wg sync.WaitGroup
	res := make([]stage.Result, 2)
	errs := make([]error, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = stageOne(config(chunk.OS, src, local, 1))
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || res[0].Reused == res[1].Reused {
		t.Fatalf("two stages at once: %v, %v; reused %v, %v", errs[0], errs[1], res[0].Reused, res[1].Reused)
	}
	checkCopy(t, src, res[0].Dir, 1)
}

// TestStageRefusesBadInput names what is wrong with the configuration,
// a source that is not a dataset, and a shard the dataset lacks, before
// it creates anything.
func TestStageRefusesBadInput(t *testing.T) {
	src := packed(t, 100, 2, 1)
	local := filepath.Join(t.TempDir(), "scratch")
	cfg := stage.Config{Shards: []int{-1, 2, 2}}
	_, err := stage.Stage(cfg)
	for _, w := range []string{"no file system", "no source", "no local directory", "shard -1 is negative", "shard 2 named twice", "0 workers"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %v, want it to contain %q", err, w)
		}
	}
	empty := t.TempDir()
	if _, err := stageOne(config(chunk.OS, empty, local, 0)); err == nil || !strings.Contains(err.Error(), empty+" is not a complete dataset") {
		t.Fatalf("stage of an empty directory: %v", err)
	}
	if _, err := stageOne(config(chunk.OS, src, local, 2)); err == nil || !strings.Contains(err.Error(), "packed in 2 shards: there is no shard 2") {
		t.Fatalf("stage of shard 2 of 2: %v", err)
	}
	if _, err := os.Stat(local); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused stages created %s (%v)", local, err)
	}
}
