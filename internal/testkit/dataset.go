package testkit

import (
	"path/filepath"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/synth"
)

// Dataset is a generated input (Gen) and how a test packs it: K files
// per chunk, for Ranks ranks, shuffled with Seed.
type Dataset struct {
	Gen   synth.Config
	K     int
	Ranks int
	Seed  uint64
}

// Generate writes d's input under dir/input and returns that directory
// and its files.
func (d Dataset) Generate(t testing.TB, dir string) (string, []synth.File) {
	t.Helper()
	input := filepath.Join(dir, "input")
	files, err := synth.Generate(input, d.Gen)
	if err != nil {
		t.Fatal(err)
	}
	return input, files
}

// Pack packs input into out as d says, replacing what brandrt packed
// there before, and returns the manifest.
func (d Dataset) Pack(t testing.TB, input, out string) *chunk.Manifest {
	t.Helper()
	inputs, classes, layout, err := chunk.ScanDir(chunk.OS, input, chunk.LayoutAuto)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := chunk.NewPlan(inputs, classes, d.K, d.Ranks, d.Seed, chunk.PackParams{Input: input, Layout: string(layout)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := chunk.Pack(chunk.PackConfig{FS: chunk.OS, Out: out, Input: input, Force: true, Workers: 2}, plan)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Packed generates d in a directory of the test's and packs it into its
// chunks/ beside the input, which it returns.
func (d Dataset) Packed(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	input, _ := d.Generate(t, dir)
	out := filepath.Join(dir, "chunks")
	d.Pack(t, input, out)
	return out
}

// Flip inverts byte off of the file name (a damaged disk).
func Flip(t testing.TB, name string, off int64) {
	t.Helper()
	if err := chunktest.FlipByte(name, off); err != nil {
		t.Fatal(err)
	}
}
