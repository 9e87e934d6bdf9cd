package chunk_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/chunk"
)

// maxK is chunk.MaxK, the documented limit.
const maxK = 65536

// editManifest rewrites one "field": value line of the manifest in dir.
func editManifest(t *testing.T, dir, from, to string) string {
	t.Helper()
	name := filepath.Join(dir, chunk.ManifestName)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		t.Fatalf("%s has no %q", name, from)
	}
	if err := os.WriteFile(name, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestKBounds: pack refuses a K above MaxK or the dataset's files (K was
// truncated to 32 bits in the index and kept whole in the manifest), and
// reading a manifest or an index that records one fails before anything
// sized by K is allocated.
func TestKBounds(t *testing.T) {
	input, _ := gen(t, 40)
	for _, c := range []struct {
		k    int
		want string
	}{
		{1<<32 + 1, "chunk size K=4294967297 files is more than the limit of 65536"},
		{1_000_000_000, "chunk size K=1000000000 files is more than the limit of 65536"},
		{maxK + 1, "chunk size K=65537 files is more than the limit of 65536"},
		{41, "chunk size K=41 files is more than the dataset's 40 files"},
		{0, "chunk size K=0: a chunk holds at least 1 file"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		_, err := pack(t, input, out, packOpts{k: c.k, ranks: 1})
		expectFailure(t, out, err, c.want)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := pack(t, input, out, packOpts{k: 40, ranks: 1}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"1000000000", "4294967297"} {
		name := editManifest(t, out, `"k": 40,`, `"k": `+k+`,`)
		_, err := chunk.ReadManifest(chunk.OS, out)
		if err == nil || !strings.Contains(err.Error(), name+": chunk size K="+k+" files is more than the limit of 65536") {
			t.Errorf("manifest with K=%s: %v", k, err)
		}
		editManifest(t, out, `"k": `+k+`,`, `"k": 40,`)
	}
	// An index whose header (checksum and all) records K above MaxK.
	ix := filepath.Join(out, chunk.RankDir(0), "index.bri")
	b, err := os.ReadFile(ix)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	le.PutUint32(b[32:], maxK+1)
	le.PutUint32(b[52:], 0)
	le.PutUint32(b[52:], chunk.Checksum(b[:64]))
	if err := os.WriteFile(ix, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = chunk.OpenIndex(chunk.OS, filepath.Dir(ix), 0)
	if err == nil || !strings.Contains(err.Error(), "chunk size K=65537 files is more than the limit of 65536") {
		t.Errorf("index with K=65537: %v", err)
	}
}

// TestManifestNamesTheInconsistency: a K edited by hand in the manifest is
// reported as such, naming the file, rather than as "shard 0 does not
// follow shard -1"; so are the other inconsistencies.
func TestManifestNamesTheInconsistency(t *testing.T) {
	input, _ := gen(t, 40)
	out := filepath.Join(t.TempDir(), "out")
	if _, err := pack(t, input, out, packOpts{k: 4, ranks: 2}); err != nil {
		t.Fatal(err)
	}
	name := editManifest(t, out, `"k": 4,`, `"k": 8,`)
	_, err := chunk.ReadManifest(chunk.OS, out)
	want := name + ": corrupt: K=8 but shard 0 has 5 chunks for its 20 files (chunks of 8 files make 3)"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "does not follow") {
		t.Errorf("K edited: %v, want %q", err, want)
	}
	for _, line := range strings.Split(err.Error(), "\n") { // both shards
		if !strings.HasPrefix(line, "chunk: "+name+": ") {
			t.Errorf("K edited: %q does not name the manifest", line)
		}
	}
	editManifest(t, out, `"k": 8,`, `"k": 4,`)
	editManifest(t, out, `"first_file": 20,`, `"first_file": 18,`)
	_, err = chunk.ReadManifest(chunk.OS, out)
	if want := "shard 1 starts at file 18, but the shards before it hold 20 files"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("first file edited: %v, want %q", err, want)
	}
	editManifest(t, out, `"first_file": 18,`, `"first_file": 20,`)
	// K changed within what the chunk counts allow: verify compares the
	// indexes.
	out2 := filepath.Join(t.TempDir(), "out")
	if _, err := pack(t, input, out2, packOpts{k: 7, ranks: 1}); err != nil { // 40 files, 6 chunks
		t.Fatal(err)
	}
	name = editManifest(t, out2, `"k": 7,`, `"k": 8,`) // 40 files in chunks of 8 make 5
	editManifest(t, out2, `"chunks": 6,`, `"chunks": 5,`)
	_, rep, err := chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out2})
	want = name + ": K=8 but shard 0's index has chunks of 7 files"
	if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Error(), want) {
		t.Errorf("verify, K and chunks edited: %v %v, want %q", err, rep, want)
	}
}

// TestManifestChunkRuns: a manifest of chunks cut by size lists each
// shard's chunks; a list that disagrees with the shard's counts, a chunk
// of more than K files, or a version that does not fit how the chunks
// were cut is refused, naming the shard; and an index whose chunks differ
// from the list is refused when the shard is opened.
func TestManifestChunkRuns(t *testing.T) {
	input, _ := gen(t, 60)
	out := filepath.Join(t.TempDir(), "out")
	m, err := pack(t, input, out, packOpts{k: 60, ranks: 2, bytes: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 || len(m.Shards[0].ChunkFiles) == 0 || len(m.ChunkFiles(1)) != m.Shards[1].Chunks {
		t.Fatalf("version %d, shard 0 lists %v, shard 1 has %d chunks listed of %d", m.Version, m.Shards[0].ChunkFiles, len(m.ChunkFiles(1)), m.Shards[1].Chunks)
	}
	b, err := os.ReadFile(filepath.Join(out, chunk.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := m.Shards[0].ChunkFiles.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	first := m.Shards[0].ChunkFiles[0][0]
	for _, c := range []struct{ from, to, want string }{
		{string(runs), fmt.Sprintf(`"%d %s`, first+1, runs[1:]), "shard 0 lists chunks of"},
		{string(runs), fmt.Sprintf(`"%d %s`, m.K+1, runs[1:]), fmt.Sprintf("chunks hold 1 to K=%d files", m.K)},
		{string(runs), `"12 seven"`, `"seven" is not FILES or FILESxCHUNKS`},
		{string(runs), `"4x4611686018427387904 5"`, "lists 4611686018427387904 chunks of 4 files"},
		{`"version": 2`, `"version": 1`, "version 2 is for chunks cut by size"},
	} {
		if err := os.WriteFile(filepath.Join(out, chunk.ManifestName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		name := editManifest(t, out, c.from, c.to)
		if _, err := chunk.ReadManifest(chunk.OS, out); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s → %s: %v, want %q", c.from, c.to, err, c.want)
		}
	}
	// the same chunks in another order: the counts agree, the index not
	toks := strings.Fields(strings.Trim(string(runs), `"`))
	toks = append(toks[1:], toks[0])
	if err := os.WriteFile(filepath.Join(out, chunk.ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	editManifest(t, out, string(runs), `"`+strings.Join(toks, " ")+`"`)
	m2, err := chunk.ReadManifest(chunk.OS, out)
	if err != nil || slices.Equal(m2.ChunkFiles(0), m.ChunkFiles(0)) {
		t.Fatalf("reversed runs %v: %v (the test needs chunks of different sizes)", toks, err)
	}
	if _, err := chunk.OpenHome(chunk.OS, []string{out}, m2, 0); err == nil || !strings.Contains(err.Error(), "does not match the manifest") {
		t.Errorf("an index whose chunks the manifest lists in another order: %v", err)
	}
	// chunks of K files: a shard but the last holds whole chunks
	out1 := filepath.Join(t.TempDir(), "out")
	if _, err := pack(t, input, out1, packOpts{k: 8, ranks: 3}); err != nil { // 60 files: 8 chunks, shards of 2, 3, 3
		t.Fatal(err)
	}
	editManifest(t, out1, `"files": 16,`, `"files": 15,`)
	editManifest(t, out1, `"first_file": 16,`, `"first_file": 15,`)
	editManifest(t, out1, `"files": 24,`, `"files": 25,`)
	if _, err := chunk.ReadManifest(chunk.OS, out1); err == nil || !strings.Contains(err.Error(), "shard 0 holds 15 files, not whole chunks of K=8, and is not the last") {
		t.Errorf("a first shard of 15 files in chunks of 8: %v", err)
	}
}
