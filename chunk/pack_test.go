package chunk_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/synth"
)

const genSeed = 7

// gen writes a small labelled dataset: 5 classes, n files of about 3 KB,
// a few of them empty.
func gen(t *testing.T, n int) (string, []synth.File) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "input")
	files, err := synth.Generate(root, synth.Config{Classes: 5, Files: n, MeanSize: 3000, Sigma: 0.8, MaxSize: 40000, Zero: 3, Seed: genSeed})
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}

type packOpts struct {
	fsys    chunk.FS
	k       int
	ranks   int
	workers int
	force   bool
	layout  chunk.Layout
	bytes   int64 // chunks cut by size (PackParams.ChunkBytes)
}

func pack(t *testing.T, input, out string, o packOpts) (*chunk.Manifest, error) {
	t.Helper()
	if o.fsys == nil {
		o.fsys = chunk.OS
	}
	if o.layout == "" {
		o.layout = chunk.LayoutAuto
	}
	inputs, classes, layout, err := chunk.ScanDir(o.fsys, input, o.layout)
	if err != nil {
		return nil, err
	}
	plan, err := chunk.NewPlan(inputs, classes, o.k, o.ranks, 1, chunk.PackParams{Input: input, Layout: string(layout), ChunkBytes: o.bytes})
	if err != nil {
		return nil, err
	}
	return chunk.Pack(chunk.PackConfig{FS: o.fsys, Out: out, Input: input, Force: o.force, Workers: max(1, o.workers)}, plan)
}

// checkDataset reads every file of the dataset in out, whole-chunk and
// selectively, and compares it with what the generator wrote.
func checkDataset(t *testing.T, fsys chunk.FS, out string, files []synth.File) {
	t.Helper()
	m, err := chunk.ReadManifest(fsys, out)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]int{}
	for i, f := range files {
		byPath[f.Rel] = i
	}
	if m.Files != int64(len(files)) {
		t.Fatalf("manifest counts %d files, the input has %d", m.Files, len(files))
	}
	seen := make([]bool, len(files))
	rng := rand.New(rand.NewPCG(1, 1))
	for r := 0; r < m.Ranks; r++ {
		s, err := chunk.OpenShard(fsys, out, r)
		if err != nil {
			t.Fatal(err)
		}
		ix := s.Index()
		if ix.First() != m.Shards[r].FirstFile || int64(ix.Len()) != m.Shards[r].Files {
			t.Fatalf("rank %d: index holds files [%d, +%d), manifest says [%d, +%d)", r, ix.First(), ix.Len(), m.Shards[r].FirstFile, m.Shards[r].Files)
		}
		for c := 0; c < ix.Chunks(); c++ {
			whole, err := s.ReadChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			var slots []int
			for i := 0; i < whole.Slots(); i++ {
				if rng.IntN(2) == 0 {
					slots = append(slots, i)
				}
			}
			part, err := s.ReadSlots(c, slots)
			if err != nil {
				t.Fatal(err)
			}
			for slot := 0; slot < whole.Slots(); slot++ {
				e := ix.Entry(ix.ChunkFirst(c) + slot)
				i, ok := byPath[e.Path]
				if !ok || seen[i] {
					t.Fatalf("file %d: path %q unknown or seen twice", e.ID, e.Path)
				}
				seen[i] = true
				want := synth.Content(nil, genSeed, i, files[i].Size)
				if !bytes.Equal(whole.File(slot), want) || e.Label != files[i].Label {
					t.Fatalf("file %d (%s): %d bytes label %d, want %d bytes label %d", e.ID, e.Path, len(whole.File(slot)), e.Label, len(want), files[i].Label)
				}
				if got := part.File(slot); (got != nil || len(want) == 0) && !bytes.Equal(got, want) {
					t.Fatalf("file %d (%s): selective read differs", e.ID, e.Path)
				}
			}
			whole.Release()
			part.Release()
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("%s was not packed", files[i].Rel)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	input, files := gen(t, 301)
	for _, c := range []struct {
		k, ranks, workers int
		bytes             int64
	}{{4, 3, 3, 0}, {64, 1, 1, 0}, {1, 2, 2, 0}, {7, 5, 4, 0}, {64, 3, 2, 12000}, {5, 2, 2, 1 << 20}} {
		out := filepath.Join(t.TempDir(), "chunks")
		m, err := pack(t, input, out, packOpts{k: c.k, ranks: c.ranks, workers: c.workers, bytes: c.bytes})
		if err != nil {
			t.Fatalf("K=%d ranks=%d: %v", c.k, c.ranks, err)
		}
		if m.Ranks != c.ranks || len(m.Classes) != 5 || m.Classes[2] != "class-002" {
			t.Fatalf("manifest: %d ranks, classes %v", m.Ranks, m.Classes)
		}
		lo, hi := m.Shards[0].Files, m.Shards[0].Files
		for _, s := range m.Shards {
			lo, hi = min(lo, s.Files), max(hi, s.Files)
		}
		if hi-lo > int64(c.k) && c.bytes == 0 {
			t.Fatalf("K=%d: ranks hold between %d and %d files, more than a chunk apart", c.k, lo, hi)
		}
		checkDataset(t, chunk.OS, out, files)
		leftovers, _ := filepath.Glob(filepath.Join(out, ".brandrt-pack-*"))
		if len(leftovers) > 0 {
			t.Fatalf("temporary directories left behind: %v", leftovers)
		}
	}
}

func TestPlainLayoutAndManifestInput(t *testing.T) {
	input, files := gen(t, 40)
	out := filepath.Join(t.TempDir(), "plain")
	m, err := pack(t, input, out, packOpts{k: 8, ranks: 2, layout: chunk.LayoutPlain})
	if err != nil {
		t.Fatal(err)
	}
	s, err := chunk.OpenShard(chunk.OS, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(m.Classes) != 0 || s.Index().Entry(0).Label != -1 {
		t.Fatalf("plain layout: classes %v, label %d", m.Classes, s.Index().Entry(0).Label)
	}
	// A manifest mixing both line forms, with labels of its own.
	var lines []string
	for i, f := range files {
		if i%2 == 0 {
			lines = append(lines, f.Rel+"\t"+string(rune('0'+i%10)))
		} else {
			lines = append(lines, `{"path": "`+f.Rel+`", "label": `+string(rune('0'+i%10))+`}`)
		}
	}
	mf := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(mf, []byte(strings.Join(lines, "\n")+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inputs, err := chunk.ScanManifest(chunk.OS, mf, input)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		if in.Label != int32(i%10) || in.Rel != files[i].Rel || in.Size != files[i].Size {
			t.Fatalf("manifest line %d: %+v", i+1, in)
		}
	}
}

// expectFailure checks that a failed pack names what it must and left
// nothing that looks like a dataset, nor temporary directories.
func expectFailure(t *testing.T, out string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("pack succeeded, want an error with %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if _, err := chunk.ReadManifest(chunk.OS, out); err == nil {
		t.Errorf("%s holds a manifest after a failed pack", out)
	}
	if ranks, _ := filepath.Glob(filepath.Join(out, "rank-*")); len(ranks) > 0 {
		t.Errorf("rank directories after a failed pack: %v", ranks)
	}
	if tmps, _ := filepath.Glob(filepath.Join(out, ".brandrt-pack-*")); len(tmps) > 0 {
		t.Errorf("temporary directories after a failed pack: %v", tmps)
	}
}

func TestBadInputs(t *testing.T) {
	input, _ := gen(t, 30)
	victim := filepath.Join(input, "class-001", "img-0000010.bin")
	outDir := func() string { return filepath.Join(t.TempDir(), "out") }

	t.Run("unreadable file", func(t *testing.T) {
		fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpOpen, Path: "img-0000010.bin", Err: syscall.EACCES})
		out := outDir()
		_, err := pack(t, input, out, packOpts{fsys: fsys, k: 4, ranks: 2, workers: 2})
		expectFailure(t, out, err, victim, "permission denied")
	})
	t.Run("unreadable directory", func(t *testing.T) {
		fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpReadDir, Path: "class-003", Err: syscall.EACCES})
		out := outDir()
		_, err := pack(t, input, out, packOpts{fsys: fsys, k: 4, ranks: 2})
		expectFailure(t, out, err, "class-003", "permission denied")
	})
	t.Run("empty input", func(t *testing.T) {
		out := outDir()
		_, err := pack(t, t.TempDir(), out, packOpts{k: 4, ranks: 1})
		expectFailure(t, out, err, "no files found")
	})
	t.Run("file too large", func(t *testing.T) {
		dir, _ := gen(t, 10)
		big := filepath.Join(dir, "class-000", "huge.bin")
		if err := os.WriteFile(big, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(big, chunk.MaxFileSize+1); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		out := outDir()
		_, err := pack(t, dir, out, packOpts{k: 4, ranks: 1})
		expectFailure(t, out, err, big, "more than the format's limit")
	})
	t.Run("name not UTF-8", func(t *testing.T) {
		dir, _ := gen(t, 10)
		if err := os.WriteFile(filepath.Join(dir, "class-000", "bad\xff.bin"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := outDir()
		_, err := pack(t, dir, out, packOpts{k: 4, ranks: 1})
		expectFailure(t, out, err, `bad\xff.bin`, "not valid UTF-8")
	})
	t.Run("symlinks", func(t *testing.T) {
		dir, _ := gen(t, 10)
		if err := os.Symlink(filepath.Join(dir, "class-000", "img-0000000.bin"), filepath.Join(dir, "class-001", "linked.bin")); err != nil {
			t.Fatal(err)
		}
		out := outDir()
		m, err := pack(t, dir, out, packOpts{k: 4, ranks: 1})
		if err != nil || m.Files != 11 {
			t.Fatalf("a symlink to a file must be packed: %v, %+v", err, m)
		}
		if err := os.Symlink(filepath.Join(dir, "class-000"), filepath.Join(dir, "class-001", "dirlink")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "class-002", "broken")); err != nil {
			t.Fatal(err)
		}
		out = outDir()
		_, err = pack(t, dir, out, packOpts{k: 4, ranks: 1})
		expectFailure(t, out, err, "dirlink: symlink to a directory", "broken: broken symlink")
	})
	t.Run("disk full", func(t *testing.T) {
		fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpWrite, Path: "chunk-00000002.brc", After: 100, Err: syscall.ENOSPC})
		out := outDir()
		_, err := pack(t, input, out, packOpts{fsys: fsys, k: 4, ranks: 1, workers: 2})
		expectFailure(t, out, err, filepath.Join(out, "rank-00000", "chunk-00000002.brc"), "no space left on device")
	})
	t.Run("file changes while packing", func(t *testing.T) {
		fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: "img-0000010.bin", Err: syscall.EIO})
		out := outDir()
		_, err := pack(t, input, out, packOpts{fsys: fsys, k: 4, ranks: 1})
		expectFailure(t, out, err, victim, "input/output error")
	})
	for _, change := range []struct {
		name string
		do   func(path string, size int64) error
		want string
	}{
		{"file grows between scan and pack", func(p string, _ int64) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write(make([]byte, 5000))
			return err
		}, "file grew while packing"},
		{"file shrinks between scan and pack", func(p string, size int64) error { return os.Truncate(p, size/2) }, "file shrank to"},
	} {
		t.Run(change.name, func(t *testing.T) {
			dir, _ := gen(t, 20)
			inputs, classes, _, err := chunk.ScanDir(chunk.OS, dir, chunk.LayoutAuto)
			if err != nil {
				t.Fatal(err)
			}
			victim := inputs[9]
			if err := change.do(victim.Source, victim.Size); err != nil {
				t.Fatal(err)
			}
			plan, err := chunk.NewPlan(inputs, classes, 2, 1, 1, chunk.PackParams{})
			if err != nil {
				t.Fatal(err)
			}
			out := outDir()
			_, err = chunk.Pack(chunk.PackConfig{FS: chunk.OS, Out: out, Workers: 2}, plan)
			expectFailure(t, out, err, victim.Source, change.want)
		})
	}
	t.Run("more ranks than chunks", func(t *testing.T) {
		out := outDir()
		_, err := pack(t, input, out, packOpts{k: 16, ranks: 3})
		expectFailure(t, out, err, "30 files make 2 chunks of 16, too few for 3 shards")
	})
}

func TestManifestProblems(t *testing.T) {
	input, files := gen(t, 10)
	mf := filepath.Join(t.TempDir(), "list.tsv")
	text := files[0].Rel + "\t0\n" + files[1].Rel + "\tcat\n" + files[2].Rel + "\n" + files[0].Rel + "\t1\n" +
		`{"path": 3}` + "\n" + `{"label": 2}` + "\n" + "class-000/nope.bin\t1\n"
	if err := os.WriteFile(mf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := chunk.ScanManifest(chunk.OS, mf, input)
	for _, want := range []string{
		mf + `:2: label "cat" is not a non-negative integer`,
		mf + ":4: " + files[0].Rel + " is listed again (first on line 1)",
		mf + ":5: not a JSON object",
		mf + `:6: JSON line without a "path"`,
		mf + ":7: chunk: lstat " + filepath.Join(input, "class-000/nope.bin") + ": no such file or directory",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestOutputDirectory(t *testing.T) {
	input, files := gen(t, 50)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(out, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pack(t, input, out, packOpts{k: 4, ranks: 3})
	if err == nil || !strings.Contains(err.Error(), "not empty (1 entries); pass --force") {
		t.Fatalf("non-empty output without --force: %v", err)
	}
	if _, err := pack(t, input, out, packOpts{k: 4, ranks: 3, force: true}); err != nil {
		t.Fatal(err)
	}
	// Replace it with fewer ranks: the stale rank directory must go, the
	// user's file must stay.
	if _, err := pack(t, input, out, packOpts{k: 5, ranks: 2, force: true}); err != nil {
		t.Fatal(err)
	}
	checkDataset(t, chunk.OS, out, files)
	if _, err := os.Stat(filepath.Join(out, "rank-00002")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale rank-00002 after repacking with 2 ranks: %v", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Fatalf("--force touched a file that is not brandrt's: %v", err)
	}
	// An interrupted pack leaves a temporary directory: the output is not
	// complete without the manifest, and a new pack needs --force.
	if err := os.Rename(filepath.Join(out, chunk.ManifestName), filepath.Join(t.TempDir(), "m")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, ".brandrt-pack-dead-0", "rank-00000"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.ReadManifest(chunk.OS, out); err == nil {
		t.Fatal("a dataset without manifest reads as complete")
	}
	_, err = pack(t, input, out, packOpts{k: 4, ranks: 2})
	if err == nil || !strings.Contains(err.Error(), "an interrupted pack (.brandrt-pack-dead-0)") {
		t.Fatalf("pack over an interrupted one: %v", err)
	}
	if _, err := pack(t, input, out, packOpts{k: 4, ranks: 2, force: true}); err != nil {
		t.Fatal(err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(out, ".brandrt-pack-*")); len(tmps) > 0 {
		t.Fatalf("--force left the interrupted pack: %v", tmps)
	}
	checkDataset(t, chunk.OS, out, files)
}

// TestReadInputs: the benchmark's read of the inputs reads every byte
// once, and a file that changed since the scan is an error naming it.
func TestReadInputs(t *testing.T) {
	input, files := gen(t, 200)
	inputs, _, _, err := chunk.ScanDir(chunk.OS, input, chunk.LayoutAuto)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, f := range files {
		want += f.Size
	}
	if got, err := chunk.ReadInputs(chunk.OS, inputs, 3); err != nil || got != want {
		t.Fatalf("read %d bytes, want %d: %v", got, want, err)
	}
	grown := inputs[77].Source
	if err := os.WriteFile(grown, make([]byte, inputs[77].Size+5), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.ReadInputs(chunk.OS, inputs, 3); err == nil || !strings.Contains(err.Error(), grown) || !strings.Contains(err.Error(), "grew") {
		t.Fatalf("a grown input: %v", err)
	}
}

// TestOutputApartFromInput: an output inside the input (packed again with
// --force, the old dataset became a new class), an input inside the
// output, and manifest inputs inside the output are refused before
// anything is written, naming both paths.
func TestOutputApartFromInput(t *testing.T) {
	input, files := gen(t, 20)
	parent := filepath.Dir(input)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(input, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		input, out string
		force      bool
		want       string
	}{
		{input, filepath.Join(input, "out"), false, "the output directory " + filepath.Join(input, "out") + " is inside the input directory " + input},
		{input, filepath.Join(input, "out"), true, "the output directory " + filepath.Join(input, "out") + " is inside the input directory " + input},
		{input, filepath.Join(input, "class-001", "a", "b"), false, "is inside the input directory " + input},
		{input, input, true, "the output directory " + input + " is the input directory " + input},
		{input, parent, true, "the input directory " + input + " is inside the output directory " + parent},
		{link, filepath.Join(input, "out"), false, "is inside the input directory " + link + " (" + input + ")"},
		{input, filepath.Join(link, "out"), false, "the output directory " + filepath.Join(link, "out") + " (" + filepath.Join(input, "out") + ") is inside"},
		{input, filepath.Join(input, "out-{rank}"), false, "the output directory " + filepath.Join(input, "out-0") + " is inside the input directory " + input},
	} {
		before := listTree(t, parent)
		_, err := pack(t, c.input, c.out, packOpts{k: 4, ranks: 1, force: c.force})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--input %s --out %s: %v, want %q", c.input, c.out, err, c.want)
		}
		if after := listTree(t, parent); after != before {
			t.Errorf("--input %s --out %s: the refused pack changed %s:\n%s\nnow:\n%s", c.input, c.out, parent, before, after)
		}
	}
	// A manifest may list files from anywhere: none inside the output.
	inputs, err := chunk.ScanManifest(chunk.OS, writeList(t, files[0].Rel, files[1].Rel), input)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := chunk.NewPlan(inputs, nil, 1, 1, 1, chunk.PackParams{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Dir(filepath.Join(input, files[1].Rel))
	_, err = chunk.Pack(chunk.PackConfig{FS: chunk.OS, Out: out, Force: true}, plan)
	if want := "input file " + filepath.Join(input, files[1].Rel) + " is inside the output directory " + out; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("manifest input inside the output: %v, want %q", err, want)
	}
}

// listTree lists the paths below dir, one a line.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		b.WriteString(p + "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// writeList writes a manifest listing paths and returns its name.
func writeList(t *testing.T, paths ...string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(name, []byte(strings.Join(paths, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestFailedPackLeavesNothing: a pack that fails while writing the
// manifest, or while renaming its result into place, leaves no chunk, no
// index and no temporary directory; it removes the output directory (and
// parents) it created, and a dataset it was replacing (--force) survives
// byte for byte.
func TestFailedPackLeavesNothing(t *testing.T) {
	input, files := gen(t, 60)
	failures := []struct {
		name string
		rule chunktest.Rule
		want string
	}{
		{"manifest write, disk full", chunktest.Rule{Op: chunktest.OpWrite, Path: chunk.ManifestName, After: 100, Err: syscall.ENOSPC}, "manifest.json: no space left on device"},
		{"manifest create", chunktest.Rule{Op: chunktest.OpCreate, Path: chunk.ManifestName, Err: syscall.EROFS}, "manifest.json: read-only file system"},
		{"manifest sync", chunktest.Rule{Op: chunktest.OpSync, Path: chunk.ManifestName, Err: syscall.EIO}, "manifest.json: input/output error"},
		{"manifest rename", chunktest.Rule{Op: chunktest.OpRename, Path: "-0/" + chunk.ManifestName, Err: syscall.EIO}, "input/output error"},
		{"second shard's rename", chunktest.Rule{Op: chunktest.OpRename, Path: "-0/rank-00001", Err: syscall.EIO}, "input/output error"},
	}
	for _, f := range failures {
		t.Run(f.name+", new output", func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "new")
			out := filepath.Join(parent, "chunks")
			_, err := pack(t, input, out, packOpts{fsys: chunktest.New(chunk.OS, f.rule), k: 4, ranks: 3, workers: 2})
			expectFailure(t, out, err, f.want)
			if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the directories pack created are still there: %s", listTree(t, parent))
			}
		})
		t.Run(f.name+", replacing a dataset", func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "chunks")
			if _, err := pack(t, input, out, packOpts{k: 5, ranks: 2}); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, out)
			_, err := pack(t, input, out, packOpts{fsys: chunktest.New(chunk.OS, f.rule), k: 4, ranks: 3, workers: 2, force: true})
			if err == nil || !strings.Contains(err.Error(), f.want) {
				t.Fatalf("error %v, want %q", err, f.want)
			}
			if after := snapshot(t, out); after != before {
				t.Fatalf("the previous dataset changed:\n%s\nnow:\n%s", before, after)
			}
			checkDataset(t, chunk.OS, out, files)
		})
	}
	t.Run("existing empty output", func(t *testing.T) {
		out := t.TempDir()
		_, err := pack(t, input, out, packOpts{fsys: chunktest.New(chunk.OS, failures[0].rule), k: 4, ranks: 1})
		expectFailure(t, out, err, failures[0].want)
		if _, err := os.Stat(out); err != nil {
			t.Fatalf("pack removed an output directory it did not create: %v", err)
		}
	})
}

// snapshot lists every file below dir with its size and checksum.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			b.WriteString(p + "/\n")
			return err
		}
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %d %08x\n", p, len(data), chunk.Checksum(data))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestUnreadableInputsReportedTogether: inputs that cannot be opened or
// read while packing (the scan only stats them) are reported together,
// up to ten, each with its path and cause, then how many more.
func TestUnreadableInputsReportedTogether(t *testing.T) {
	input, files := gen(t, 200)
	rules := func(n int, op chunktest.Op, err error) []chunktest.Rule {
		var rs []chunktest.Rule
		for i := 0; i < n; i++ {
			rs = append(rs, chunktest.Rule{Op: op, Path: files[i*13].Rel, Err: err})
		}
		return rs
	}
	for _, c := range []struct {
		name  string
		rules []chunktest.Rule
		named int
		more  string
	}{
		{"three unopenable", rules(3, chunktest.OpOpen, syscall.EACCES), 3, ""},
		{"open and read errors", append(rules(2, chunktest.OpOpen, syscall.EACCES), rules(4, chunktest.OpRead, syscall.EIO)[2:]...), 4, ""},
		{"fifteen unopenable", rules(15, chunktest.OpOpen, syscall.EACCES), 10, "… and 5 more problems"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, err := pack(t, input, out, packOpts{fsys: chunktest.New(chunk.OS, c.rules...), k: 4, ranks: 2, workers: 3})
			expectFailure(t, out, err)
			named := 0
			for _, r := range c.rules {
				src := filepath.Join(input, r.Path)
				cause := map[chunktest.Op]string{chunktest.OpOpen: "open " + src + ": permission denied", chunktest.OpRead: "read " + src + ": input/output error"}[r.Op]
				if strings.Contains(err.Error(), cause) {
					named++
				}
			}
			if named != c.named || !strings.Contains(err.Error(), c.more) {
				t.Fatalf("%d of the %d unreadable inputs named, want %d (and %q):\n%v", named, len(c.rules), c.named, c.more, err)
			}
		})
	}
}

// TestLargeFiles packs files larger than what a pack worker holds of a
// chunk at once: such chunks are written in pieces, header last, and read
// back whole and by slots as any other; a write that fails in the middle
// of one leaves nothing behind.
func TestLargeFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "input")
	files, err := synth.Generate(root, synth.Config{Classes: 2, Files: 7, MeanSize: 9 << 20, Sigma: 0.5, MaxSize: 30 << 20, Zero: 1, Seed: genSeed})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 3} {
		out := filepath.Join(t.TempDir(), "chunks")
		if _, err := pack(t, root, out, packOpts{k: k, ranks: 2, workers: 2}); err != nil {
			t.Fatalf("K=%d: %v", k, err)
		}
		checkDataset(t, chunk.OS, out, files)
	}
	parent := filepath.Join(t.TempDir(), "new")
	out := filepath.Join(parent, "chunks")
	rule := chunktest.Rule{Op: chunktest.OpWrite, Path: "chunk-", After: 9 << 20, Err: syscall.ENOSPC}
	_, err = pack(t, root, out, packOpts{fsys: chunktest.New(chunk.OS, rule), k: 3, ranks: 1})
	expectFailure(t, out, err, "no space left on device")
	if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directories pack created are still there: %s", listTree(t, parent))
	}
}
