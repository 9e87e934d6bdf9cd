package chunk_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/internal/testkit"
)

// packed returns a packed dataset of n generated files, 2 ranks, K=8.
func packed(t *testing.T, n int) (string, []synth.File) {
	t.Helper()
	input, files := gen(t, n)
	out := filepath.Join(t.TempDir(), "chunks")
	if _, err := pack(t, input, out, packOpts{k: 8, ranks: 2, workers: 2}); err != nil {
		t.Fatal(err)
	}
	return out, files
}

func TestCorruptionIsNamed(t *testing.T) {
	out, _ := packed(t, 100)
	s, err := chunk.OpenShard(chunk.OS, out, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := s.Index().Entry(2*8 + 3) // chunk 2, slot 3 of rank 1
	for e.Size == 0 {
		t.Fatal("the chosen file is empty; pick another")
	}
	name := filepath.Join(out, "rank-00001", "chunk-00000002.brc")
	testkit.Flip(t, name, e.Offset+int64(e.Size)/2)
	want := []string{"shard 1 chunk 2", name, "slot 3", e.Path, "checksum"}
	_, err = s.ReadChunk(2)
	mustContain(t, "whole read", err, want...)
	if !chunk.ErrCorrupt(err) {
		t.Errorf("whole read: %v is not marked corrupt", err)
	}
	_, err = s.ReadSlots(2, []int{3})
	mustContain(t, "selective read", err, want...)
	if ch, err := s.ReadSlots(2, []int{0, 7}); err != nil {
		t.Fatalf("other slots of the damaged chunk: %v", err)
	} else {
		ch.Release()
	}
	_, rep, err := chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out, Workers: 2})
	if err != nil || len(rep.Problems) != 1 {
		t.Fatalf("verify: %v, problems %v", err, rep.Problems)
	}
	mustContain(t, "verify", rep.Problems[0], want...)
	// A damaged header is caught too.
	testkit.Flip(t, filepath.Join(out, "rank-00000", "chunk-00000001.brc"), 13)
	_, rep, _ = chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out, Workers: 2})
	if len(rep.Problems) != 2 {
		t.Fatalf("verify after header damage: %v", rep.Problems)
	}
}

func TestDamagedIndexAndMissingPieces(t *testing.T) {
	out, _ := packed(t, 60)
	testkit.Flip(t, filepath.Join(out, "rank-00000", "index.bri"), 100)
	_, err := chunk.OpenShard(chunk.OS, out, 0)
	mustContain(t, "damaged index", err, "index", "rank-00000", "checksum")
	_, rep, err := chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out, Workers: 1})
	if err != nil || len(rep.Problems) != 1 || rep.Ranks != 1 {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	if err := os.Remove(filepath.Join(out, "rank-00001", "chunk-00000000.brc")); err != nil {
		t.Fatal(err)
	}
	_, rep, _ = chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out, Workers: 1})
	mustContain(t, "missing chunk", joinErrs(rep.Problems), "shard 1 chunk 0", "no such file")
	if err := os.RemoveAll(filepath.Join(out, "rank-00001")); err != nil {
		t.Fatal(err)
	}
	_, rep, _ = chunk.Verify(chunk.VerifyConfig{FS: chunk.OS, Dir: out, Workers: 1, Local: true})
	if len(rep.Skipped) != 1 || rep.Skipped[0] != 1 {
		t.Fatalf("a node-local verify must skip the absent rank: %+v", rep)
	}
}

// TestUncachedReadsLeaveNoPageCache reads chunks through O_DIRECT and
// through the fallback (read, then fadvise DONTNEED) and checks with
// fincore that none of the chunk file stays in the page cache.
func TestUncachedReadsLeaveNoPageCache(t *testing.T) {
	if _, err := exec.LookPath("fincore"); err != nil {
		t.Skip("fincore (util-linux) not installed")
	}
	out, files := packed(t, 200)
	for name, fsys := range map[string]chunk.FS{"O_DIRECT": chunk.OS, "fadvise fallback": chunk.OSNoDirect} {
		file := filepath.Join(out, "rank-00000", "chunk-00000003.brc")
		dropCache(t, file)
		s, err := chunk.OpenShard(fsys, out, 0)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := s.ReadChunk(3)
		if err != nil {
			t.Fatal(err)
		}
		if res := resident(t, file); res != 0 {
			t.Errorf("%s: %d bytes of the chunk file stay in the page cache after a whole read", name, res)
		}
		part, err := s.ReadSlots(3, []int{1, 5})
		if err != nil {
			t.Fatal(err)
		}
		if res := resident(t, file); res != 0 {
			t.Errorf("%s: %d bytes stay in the page cache after a selective read", name, res)
		}
		ch.Release()
		part.Release()
		s.Close()
	}
	checkDataset(t, chunk.OSNoDirect, out, files)
}

func dropCache(t *testing.T, name string) {
	f, err := chunk.OS.Open(name, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.DropCache(); err != nil {
		t.Fatal(err)
	}
}

// resident returns the bytes of name in the page cache, per fincore.
func resident(t *testing.T, name string) int64 {
	t.Helper()
	out, err := exec.Command("fincore", "--bytes", "--noheadings", "--output", "RES", name).Output()
	if err != nil {
		t.Fatalf("fincore: %v", err)
	}
	var n int64
	if _, err := fmt.Sscan(string(out), &n); err != nil {
		t.Fatalf("fincore output %q: %v", out, err)
	}
	return n
}

func TestInjectedReadErrors(t *testing.T) {
	out, _ := packed(t, 60)
	fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: "chunk-00000001.brc", Flip: 200})
	s, err := chunk.OpenShard(fsys, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.ReadChunk(1)
	mustContain(t, "flipped byte in transit", err, "shard 0 chunk 1", "checksum")
	if ch, err := s.ReadChunk(0); err != nil {
		t.Fatal(err)
	} else {
		ch.Release()
	}
}

func TestFindAndExtract(t *testing.T) {
	out, files := packed(t, 40)
	var byPath = map[string]int{}
	for i, f := range files {
		byPath[f.Rel] = i
	}
	e, err := chunk.Find(chunk.OS, out, "37")
	if err != nil || e.ID != 37 || e.Rank != 1 {
		t.Fatalf("find 37: %+v %v", e, err)
	}
	i := byPath[e.Path]
	data, err := chunk.Extract(chunk.OS, out, e)
	if err != nil || !bytes.Equal(data, synth.Content(nil, genSeed, i, files[i].Size)) {
		t.Fatalf("extract %s: %v", e.Path, err)
	}
	e2, err := chunk.Find(chunk.OS, out, e.Path)
	if err != nil || e2 != e {
		t.Fatalf("find by path: %+v %v", e2, err)
	}
	_, err = chunk.Find(chunk.OS, out, "40")
	mustContain(t, "id beyond the dataset", err, "no file 40", "files 0 to 39")
	_, err = chunk.Find(chunk.OS, out, "class-009/none.bin")
	mustContain(t, "unknown path", err, `no file "class-009/none.bin"`)
	sum, err := chunk.Summarize(chunk.OS, out)
	if err != nil || len(sum.Present) != 2 || sum.Sizes.Min != 0 || sum.ClassFiles[0] != 8 {
		t.Fatalf("summary: %+v %v", sum, err)
	}
}

func mustContain(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one containing %q", what, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q lacks %q", what, err, w)
		}
	}
}

func joinErrs(errs []error) error {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return fmt.Errorf("%s", strings.Join(s, "; "))
}

// TestReadWholeKeepsWhatIsIntact damages chunks in each way a disk can
// (a flipped byte, a flipped header byte, a cut) and checks that a
// lenient whole read names exactly the files lost, with their place in
// the chunk file, and hands over every other one intact. A deleted chunk
// file is no damage but unreachable storage, for both reads.
// ReadWhole keeps what is intact, and so does ReadInto: each file in the
// buffer lent for it where the file system scatters (OSNoDirect:
// through the page cache), else in a chunk buffer, as ReadWhole (OS:
// O_DIRECT on a local disk).
func TestReadWholeKeepsWhatIsIntact(t *testing.T) {
	out, _ := packed(t, 100)
	name := func(c int) string { return filepath.Join(out, "rank-00000", fmt.Sprintf("chunk-%08d.brc", c)) }
	idx, err := chunk.OpenShard(chunk.OS, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	entry := func(c, slot int) chunk.Entry { return idx.Index().Entry(c*8 + slot) }
	e := entry(1, 5)
	testkit.Flip(t, name(1), e.Offset+int64(e.Size)/2)
	testkit.Flip(t, name(2), 13) // the header's rank field
	cut := entry(3, 6)
	if err := os.Truncate(name(3), cut.Offset+1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(name(4)); err != nil {
		t.Fatal(err)
	}
	for _, fsys := range []struct {
		name     string
		fs       chunk.FS
		scatters bool
	}{{"OS", chunk.OS, false}, {"OSNoDirect", chunk.OSNoDirect, true}} {
		f, err := fsys.fs.Open(name(5), true)
		if err != nil {
			t.Fatal(err)
		}
		if sc, ok := f.(chunk.Scatterer); !ok || sc.Scatters() != fsys.scatters {
			t.Errorf("%s: a chunk file scatters: %v, want %v", fsys.name, ok && sc.Scatters(), fsys.scatters)
		}
		f.Close()
		s, err := chunk.OpenShard(fsys.fs, out, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		whole := func(c int) (*chunk.Chunk, []chunk.Damage, [][]byte, error) {
			ch, damage, err := s.ReadWhole(c)
			return ch, damage, nil, err
		}
		into := func(c int) (*chunk.Chunk, []chunk.Damage, [][]byte, error) {
			lent := make([][]byte, 8)
			ch, damage, err := s.ReadInto(c, func(i, n int) []byte {
				if lent[i] != nil || n != int(entry(c, i).Size) {
					t.Errorf("%s chunk %d: lent slot %d %d bytes (again: %v), its file has %d", fsys.name, c, i, n, lent[i] != nil, entry(c, i).Size)
				}
				lent[i] = make([]byte, n+3)
				return lent[i]
			})
			return ch, damage, lent, err
		}
		for _, read := range []struct {
			name string
			read func(c int) (*chunk.Chunk, []chunk.Damage, [][]byte, error)
		}{{"ReadWhole", whole}, {"ReadInto", into}} {
			what := fsys.name + " " + read.name
			for _, tc := range []struct {
				c     int
				slots []int
				why   string
			}{
				{1, []int{5}, "checksum"},
				{2, []int{-1}, "rank"},
				{3, []int{6, 7}, "ends at"},
				{5, nil, ""},
			} {
				ch, damage, lent, err := read.read(tc.c)
				if err != nil {
					t.Fatalf("%s chunk %d: %v", what, tc.c, err)
				}
				var got []int
				for _, d := range damage {
					got = append(got, d.Slot)
					want := []string{"shard 0 chunk", name(tc.c), tc.why}
					if d.Slot >= 0 {
						x := entry(tc.c, d.Slot)
						want = append(want, x.Path, fmt.Sprintf("bytes %d–%d", x.Offset, x.Offset+int64(x.Size)))
						if d.ID != x.ID || d.Lo != x.Offset || d.Hi != x.Offset+int64(x.Size) {
							t.Errorf("%s chunk %d: %+v for %+v", what, tc.c, d, x)
						}
					}
					mustContain(t, fmt.Sprintf("%s chunk %d", what, tc.c), &d, want...)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.slots) {
					t.Errorf("%s chunk %d: damaged slots %v, want %v", what, tc.c, got, tc.slots)
				}
				if ch.BytesRead == 0 {
					t.Errorf("%s chunk %d: read no bytes", what, tc.c)
				}
				if lent != nil && ch.Scattered() != fsys.scatters {
					t.Errorf("%s chunk %d: scattered %v, want %v", what, tc.c, ch.Scattered(), fsys.scatters)
				}
				if lent != nil && !fsys.scatters && slices.ContainsFunc(lent, func(b []byte) bool { return b != nil }) {
					t.Errorf("%s chunk %d: lent buffers for a chunk read whole", what, tc.c)
				}
				for i := range ch.Slots() {
					lost := slices.Contains(tc.slots, i)
					f := ch.File(i)
					if lost != (f == nil) || !lost && chunk.Checksum(f) != entry(tc.c, i).CRC {
						t.Errorf("%s chunk %d slot %d: lost %v, got %d bytes", what, tc.c, i, lost, len(f))
					}
					if lent != nil && fsys.scatters && len(f) > 0 && &f[0] != &lent[i][0] {
						t.Errorf("%s chunk %d slot %d: the file is not in the buffer lent for it", what, tc.c, i)
					}
				}
				ch.Release()
				if _, err := s.ReadChunk(tc.c); (err != nil) != (len(tc.slots) > 0) || err != nil && !chunk.ErrCorrupt(err) {
					t.Errorf("%s chunk %d: strict read: %v", what, tc.c, err)
				}
			}
			// A missing chunk file is not damage: storage could not be reached.
			_, _, _, err := read.read(4)
			mustContain(t, what+" chunk 4", err, "shard 0 chunk 4", "storage unreachable: open "+name(4), "no such file or directory (ENOENT)")
			if !chunk.Unreachable(err) || chunk.ErrCorrupt(err) {
				t.Errorf("%s chunk 4: %v: unreachable %v, corrupt %v", what, err, chunk.Unreachable(err), chunk.ErrCorrupt(err))
			}
		}
		_, err = s.ReadChunk(4)
		mustContain(t, "ReadChunk 4", err, "shard 0 chunk 4", "storage unreachable: open "+name(4), "no such file or directory (ENOENT)")
	}
}

// A held chunk gives its files as given, and nothing back on Release.
func TestHeldChunk(t *testing.T) {
	files := [][]byte{[]byte("a"), nil, []byte("cc")}
	ch := chunk.Held(2, 7, files)
	ch.Release()
	if ch.Rank != 2 || ch.Index != 7 || ch.Slots() != 3 || string(ch.File(0)) != "a" || ch.File(1) != nil || string(ch.File(2)) != "cc" {
		t.Fatalf("held chunk %d/%d of %d slots: %q %q %q", ch.Rank, ch.Index, ch.Slots(), ch.File(0), ch.File(1), ch.File(2))
	}
}
