package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/internal/testkit"
)

func genInput(t *testing.T, files int) (string, []synth.File) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "input")
	fs, err := synth.Generate(dir, synth.Config{Classes: 4, Files: files, MeanSize: 4000, Sigma: 0.7, MaxSize: 60000, Zero: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return dir, fs
}

func TestPackVerifyInspectExtract(t *testing.T) {
	input, files := genInput(t, 500)
	out := filepath.Join(t.TempDir(), "chunks")
	stdout, errs, status := runCLI(t, "pack", "--input", input, "--out", out, "--chunk-files", "16", "--ranks", "2", "--workers", "3")
	if status != 0 || !strings.Contains(stdout, "packed 500 files") || !strings.Contains(errs, "100.0%") {
		t.Fatalf("pack: status %d\n%s%s", status, stdout, errs)
	}
	stdout, errs, status = runCLI(t, "verify", "--chunks", out)
	if status != 0 || !strings.Contains(stdout, "checked 500 files") || !strings.Contains(stdout, "ok: every checksum matches") {
		t.Fatalf("verify: status %d\n%s%s", status, stdout, errs)
	}
	stdout, _, status = runCLI(t, "inspect", "--chunks", out)
	for _, want := range []string{"files    500", "K=16, 2 shards", "shard 0 ", "shard 1 ", "sizes    min 0 B", "classes  4: class-000 (125)", "layout imagefolder"} {
		if status != 0 || !strings.Contains(stdout, want) {
			t.Errorf("inspect lacks %q:\n%s", want, stdout)
		}
	}
	dst := filepath.Join(t.TempDir(), "x.bin")
	for _, what := range []string{files[321].Rel, "7"} {
		_, errs, status := runCLI(t, "inspect", "--chunks", out, "--file", what, "--out", dst, "--force")
		if status != 0 {
			t.Fatalf("extract %s: %s", what, errs)
		}
		got, _ := os.ReadFile(dst)
		e, err := chunk.Find(chunk.OS, out, what)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.ReadFile(filepath.Join(input, e.Path))
		if !bytes.Equal(got, src) {
			t.Fatalf("extract %s: %d bytes differ from %s", what, len(got), e.Path)
		}
	}
	if _, errs, status := runCLI(t, "inspect", "--chunks", out, "--file", "7", "--out", dst); status == 0 || !strings.Contains(errs, "exists; pass --force") {
		t.Fatalf("extract over an existing file: %d %s", status, errs)
	}
	// --list: every input once, in id order, with its label and size.
	stdout, errs, status = runCLI(t, "inspect", "--chunks", out, "--list")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if status != 0 || len(lines) != 501 || lines[0] != "id\tlabel\tsize\trank\tpath" {
		t.Fatalf("inspect --list: status %d, %d lines\n%s", status, len(lines), errs)
	}
	inputs := map[string]synth.File{}
	for _, f := range files {
		inputs[f.Rel] = f
	}
	for i, line := range lines[1:] {
		var id, label, size, rank int
		var path string
		if n, _ := fmt.Sscanf(line, "%d\t%d\t%d\t%d\t%s", &id, &label, &size, &rank, &path); n != 5 || id != i {
			t.Fatalf("inspect --list, line %d: %q", i+1, line)
		}
		f, ok := inputs[path]
		if e, _ := chunk.Find(chunk.OS, out, fmt.Sprint(id)); !ok || e.Path != path || int64(size) != f.Size || e.Label != int32(label) || e.Rank != rank {
			t.Errorf("inspect --list, line %d: %q; the index has %+v", i+1, line, e)
		}
		delete(inputs, path)
	}
	if len(inputs) != 0 {
		t.Errorf("inspect --list left out %d files", len(inputs))
	}
}

func TestPackAndVerifyErrors(t *testing.T) {
	input, _ := genInput(t, 40)
	empty := t.TempDir()
	used := t.TempDir()
	os.WriteFile(filepath.Join(used, "x"), nil, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pack", "--out", t.TempDir() + "/o"}, "pack needs --input DIR or --manifest FILE"},
		{[]string{"pack", "--input", input}, `Required flag "out" not set`},
		{[]string{"pack", "--input", empty, "--out", t.TempDir() + "/o"}, "no files found in " + empty},
		{[]string{"pack", "--input", "/nonexistent", "--out", t.TempDir() + "/o"}, "/nonexistent: no such file or directory"},
		{[]string{"pack", "--input", input, "--out", used}, "is not empty (1 entries); pass --force"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o", "--chunk-files", "0"}, "flag -chunk-files: 0 is less than the minimum of 1"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o", "--chunk-files", "4294967297"}, "flag -chunk-files: 4294967297 is more than the limit of 65536"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o", "--chunk-files", "1000000000"}, "flag -chunk-files: 1000000000 is more than the limit of 65536"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o", "--chunk-files", "41"}, "chunk size K=41 files is more than the dataset's 40 files"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o", "--layout", "flat"}, `unknown layout "flat"`},
		{[]string{"verify", "--chunks", empty}, empty + " is not a complete dataset"},
		{[]string{"inspect", "--chunks", empty}, "not a complete dataset"},
		{[]string{"pack", "--input", input, "--out", t.TempDir() + "/o{rank}", "--ranks", "2", "--chunk-files", "4"}, "needs one process per rank"},
	} {
		_, errs, status := runCLI(t, c.args...)
		if status == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: status %d, stderr %q, want %q", c.args, status, errs, c.want)
		}
	}
}

// TestPackOutputInsideInput: pack --out inside --input, then again with
// --force, packed the first output as a new class. Both are refused, with
// --input or with --manifest (whose relative paths --input roots).
func TestPackOutputInsideInput(t *testing.T) {
	input, files := genInput(t, 40)
	out := filepath.Join(input, "chunks")
	list := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(list, []byte(files[0].Rel+"\n"+files[1].Rel+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "the output directory " + out + " is inside the input directory " + input
	for _, extra := range [][]string{{"--input", input}, {"--input", input, "--force"}, {"--manifest", list, "--input", input, "--force"}} {
		args := append([]string{"pack", "--out", out, "--chunk-files", "1", "--ranks", "1"}, extra...)
		if _, errs, status := runCLI(t, args...); status == 0 || !strings.Contains(errs, want) {
			t.Errorf("%v: status %d, stderr %q, want %q", args, status, errs, want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: %s was created", args, out)
		}
	}
}

// TestHugeKRefused: a manifest whose K was raised by hand to 10⁹ is
// refused by every command that reads it, before anything sized by K is
// allocated (simulate and serve grew to 14 GB and never started).
func TestHugeKRefused(t *testing.T) {
	input, _ := genInput(t, 40)
	out := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", out, "--chunk-files", "40", "--ranks", "1"); status != 0 {
		t.Fatal(errs)
	}
	name := filepath.Join(out, chunk.ManifestName)
	b, _ := os.ReadFile(name)
	// Still one chunk: the manifest is consistent in itself.
	if err := os.WriteFile(name, bytes.Replace(b, []byte(`"k": 40,`), []byte(`"k": 1000000000,`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	want := name + ": chunk size K=1000000000 files is more than the limit of 65536"
	// Fatal at once: simulate, last, is what grew without bound.
	for _, args := range [][]string{{"verify", "--chunks", out}, {"inspect", "--chunks", out}, {"simulate", "--chunks", out}} {
		if _, errs, status := runCLI(t, args...); status == 0 || !strings.Contains(errs, want) {
			t.Fatalf("%v: status %d, stderr %q, want %q", args, status, errs, want)
		}
	}
}

func TestVerifyReportsDamage(t *testing.T) {
	input, _ := genInput(t, 100)
	out := filepath.Join(t.TempDir(), "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", out, "--chunk-files", "8", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(out, "rank-00001"), 1)
	if err != nil {
		t.Fatal(err)
	}
	e := ix.Entry(8*2 + 5)
	ix.Close()
	name := filepath.Join(out, "rank-00001", chunk.ChunkName(2))
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xAA, 0xBB}, e.Offset+int64(e.Size)/2)
	f.Close()
	gone := filepath.Join(out, "rank-00000", chunk.ChunkName(1))
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	stdout, errs, status := runCLI(t, "verify", "--chunks", out)
	for _, want := range []string{
		fmt.Sprintf("damaged: chunk: shard 1 chunk 2 (%s): corrupt: slot 5 (%s), bytes %d–%d: checksum", name, e.Path, e.Offset, e.Offset+int64(e.Size)),
		fmt.Sprintf("unreachable: chunk: shard 0 chunk 1: storage unreachable: open %s: no such file or directory (ENOENT)", gone),
	} {
		if status != 1 || !strings.Contains(stdout, want) || !strings.Contains(errs, "verify: 2 problem(s)") || !strings.Contains(errs, "1 damaged, 1 unreachable") {
			t.Fatalf("status %d, want %q\n%s%s", status, want, stdout, errs)
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary built for the tests.
func TestMain(m *testing.M) {
	// Open MPI keeps a session directory per mpirun; one that is killed
	// leaves it behind. Keep them all in a directory removed at the end.
	session, err := os.MkdirTemp("", "brandrt-test-ompi-")
	if err == nil {
		os.Setenv("OMPI_MCA_orte_tmpdir_base", session)
	}
	// A training process that is killed (the tests of clients gone, of
	// a stalled or lost rank) leaves its multiprocessing directory
	// (pymp-*) in Python's temporary directory: the processes the tests
	// start get one removed at the end. Python takes TEMP when TMPDIR is
	// not set; TMPDIR itself stays, since Go's own temporary paths, and
	// with them the attach sockets' (at most 108 bytes) and munge's
	// (which wants /tmp's permissions), follow it.
	var tmp string
	if os.Getenv("TMPDIR") == "" {
		if tmp, err = os.MkdirTemp("", "brandrt-test-py-"); err == nil {
			os.Setenv("TEMP", tmp)
			os.Setenv("TMP", tmp)
		}
	}
	// Every test job runs its ranks on this one machine; the check that
	// refuses that has a test of its own (TestSharedNodeRefused).
	os.Setenv("BRANDRT_ALLOW_SHARED_NODE", "1")
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	if session != "" {
		os.RemoveAll(session)
	}
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

// binary builds brandrt once for the tests that run it as a process,
// with the tests' hooks (the testhooks tag: rt/job/hooks_on.go).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "brandrt-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "brandrt")
		out, err := exec.Command("go", "build", "-tags", "testhooks", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// mpirunArgv is mpirun's arguments for np ranks of the brandrt under
// test with args.
func mpirunArgv(t *testing.T, np int, args ...string) []string {
	t.Helper()
	return append(append([]string{}, testkit.MpirunArgs...), append([]string{"-np", fmt.Sprint(np), binary(t)}, args...)...)
}

// mpirun runs brandrt with args on np ranks and returns its output; the
// test fails if it fails.
func mpirun(t *testing.T, np int, args ...string) string {
	t.Helper()
	out, err := mpirunStatus(t, np, args...)
	if err != nil {
		t.Fatalf("mpirun -np %d brandrt %v: %v\n%s", np, args, err, out)
	}
	return out
}

// TestPackUnderMpirun packs the same input with one process and with three
// under mpirun (shared output, then node-local outputs): the indexes must
// be byte for byte the same, and every node-local manifest the same. By
// default both write a shard per chunk (38, fewer than 240), the
// node-local pack one per process.
func TestPackUnderMpirun(t *testing.T) {
	input, _ := genInput(t, 300)
	tmp := t.TempDir()
	solo, many := filepath.Join(tmp, "solo"), filepath.Join(tmp, "many")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", solo, "--chunk-files", "8", "--ranks", "3"); status != 0 {
		t.Fatal(errs)
	}
	if out, errs, status := runCLI(t, "pack", "--input", input, "--out", many, "--chunk-files", "8"); status != 0 || !strings.Contains(out, "in 38 shards") {
		t.Fatalf("pack without --shards: %s%s", out, errs)
	}
	shared := filepath.Join(tmp, "shared")
	if out := mpirun(t, 3, "pack", "--input", input, "--out", shared, "--chunk-files", "8"); !strings.Contains(out, "packed 300 files (") || !strings.Contains(out, "in 38 shards") {
		t.Fatalf("mpirun pack:\n%s", out)
	}
	for r := range 38 {
		want, err := os.ReadFile(filepath.Join(many, chunk.RankDir(r), "index.bri"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(shared, chunk.RankDir(r), "index.bri")); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("shard %d: the index of mpirun's pack differs from the single-process pack's (%v)", r, err)
		}
	}
	local := filepath.Join(tmp, "local-{rank}")
	mpirun(t, 3, "pack", "--input", input, "--out", local, "--chunk-files", "8")
	out := mpirun(t, 3, "verify", "--chunks", local)
	if strings.Count(out, "ok: every checksum matches") != 3 {
		t.Fatalf("node-local verify:\n%s", out)
	}
	var hashes []uint64
	for r := 0; r < 3; r++ {
		want, err := os.ReadFile(filepath.Join(solo, chunk.RankDir(r), "index.bri"))
		if err != nil {
			t.Fatal(err)
		}
		dir := strings.ReplaceAll(local, "{rank}", fmt.Sprint(r))
		if got, err := os.ReadFile(filepath.Join(dir, chunk.RankDir(r), "index.bri")); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s rank %d: index differs from the single-process pack (%v)", dir, r, err)
		}
		m, err := chunk.ReadManifest(chunk.OS, strings.ReplaceAll(local, "{rank}", fmt.Sprint(r)))
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, m.Hash())
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("node-local manifests differ: %x", hashes)
	}
}

// TestPackOnAFullDisk packs onto a 1 MiB tmpfs: the error names the file
// and the reason, and nothing is left behind.
func TestPackOnAFullDisk(t *testing.T) {
	input, _ := genInput(t, 400) // about 1.6 MB
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v); the injected disk-full test in chunk still runs", err)
	}
	defer syscall.Unmount(dir, 0)
	out := filepath.Join(dir, "chunks")
	_, errs, status := runCLI(t, "pack", "--input", input, "--out", out, "--chunk-files", "16", "--ranks", "1")
	if status == 0 || !strings.Contains(errs, "no space left on device") || !strings.Contains(errs, filepath.Join(out, "rank-00000")) {
		t.Fatalf("status %d: %s", status, errs)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 0 {
		t.Fatalf("a failed pack left %d entries in %s", len(entries), out)
	}
}
