package stage_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/chunk/stage"
	"github.com/brandrt/brandrt/internal/testkit"
)

// TestStageReplacesADamagedCopy damages a verified copy in each way a
// disk can (one byte flipped in a file, in a chunk header, in the index,
// in the manifest; a chunk file cut, grown or lost; the marker lost) and
// puts the index of another pack of the same files in it: the
// next Stage says which file and chunk, copies again, and the new copy is
// intact and reused after that.
func TestStageReplacesADamagedCopy(t *testing.T) {
	src, other := packed(t, 300, 2, 1), packed(t, 300, 2, 2)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) // the copy's directory
		want   []string
	}{
		{"byte flipped in a file", func(t *testing.T, dir string) {
			testkit.Flip(t, filepath.Join(dir, "rank-00000", "chunk-00000002.brc"), fileOffset(t, dir, 2)+1)
		}, []string{"shard 0 chunk 2", "chunk-00000002.brc", "checksum"}},
		{"byte flipped in a chunk header", func(t *testing.T, dir string) {
			testkit.Flip(t, filepath.Join(dir, "rank-00000", "chunk-00000001.brc"), 13)
		}, []string{"shard 0 chunk 1", "chunk-00000001.brc", "header"}},
		{"chunk file cut", func(t *testing.T, dir string) {
			name := filepath.Join(dir, "rank-00000", "chunk-00000003.brc")
			fi, _ := os.Stat(name)
			if err := os.Truncate(name, fi.Size()-1); err != nil {
				t.Fatal(err)
			}
		}, []string{"shard 0 chunk 3", "chunk-00000003.brc", "the index says"}},
		{"chunk file grown", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "rank-00000", "chunk-00000004.brc"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{0})
			f.Close()
		}, []string{"shard 0 chunk 4", "chunk-00000004.brc", "the index says"}},
		{"chunk file lost", func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "rank-00000", "chunk-00000005.brc"))
		}, []string{"shard 0 chunk 5", "chunk-00000005.brc", "no such file"}},
		{"byte flipped in the index", func(t *testing.T, dir string) {
			testkit.Flip(t, filepath.Join(dir, "rank-00000", chunk.IndexName), 100)
		}, []string{"index.bri", "checksum"}},
		{"index of another pack", func(t *testing.T, dir string) {
			data, err := os.ReadFile(filepath.Join(other, "rank-00000", chunk.IndexName))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "rank-00000", chunk.IndexName), data, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"index.bri", "not the manifest's index"}},
		{"byte flipped in the manifest", func(t *testing.T, dir string) {
			testkit.Flip(t, filepath.Join(dir, chunk.ManifestName), 5)
		}, []string{"manifest.json differs from the source's"}},
		{"marker lost", func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, stage.MarkerName))
		}, []string{"has no marker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := t.TempDir()
			cfg := config(chunk.OS, src, local, 0)
			first := mustStage(t, cfg)
			tc.damage(t, first.Dir)
			res := mustStage(t, cfg)
			if res.Reused || res.Dir != first.Dir || res.Bytes != first.Bytes || res.CopiedBytes != first.Bytes {
				t.Fatalf("after damage: %+v", res)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Replaced, w) {
					t.Fatalf("why the copy was replaced lacks %q: %s", w, res.Replaced)
				}
			}
			checkCopy(t, src, res.Dir, 0)
			if res := mustStage(t, cfg); !res.Reused {
				t.Fatalf("the new copy was not reused: %s", res.Replaced)
			}
		})
	}
}

// fileOffset returns the offset of the first non-empty file of chunk c
// of rank 0 in the copy dir.
func fileOffset(t *testing.T, dir string, c int) int64 {
	t.Helper()
	sh, err := chunk.OpenShard(chunk.OS, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	ix := sh.Index()
	for i := c * ix.K(); i < (c+1)*ix.K(); i++ {
		if e := ix.Record(i); e.Size > 0 {
			return e.Offset
		}
	}
	t.Fatalf("chunk %d has only empty files", c)
	return 0
}

func remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

// TestStageInterrupted stops or fails a stage in the middle of the copy
// in several ways: the error says what happened, naming the file, nothing
// is left in the local directory but the lock, and the next Stage copies
// anew.
func TestStageInterrupted(t *testing.T) {
	src := packed(t, 300, 2, 1)
	chunk4 := filepath.Join(src, "rank-00001", "chunk-00000004.brc")
	for _, tc := range []struct {
		name string
		fsys func(stop chan struct{}) chunk.FS
		want []string
	}{
		{"stopped", func(stop chan struct{}) chunk.FS {
			return &hookFS{FS: chunk.OS, path: "chunk-00000003.brc", hook: func() { close(stop) }}
		}, []string{"stage: interrupted"}},
		{"read error", func(chan struct{}) chunk.FS {
			return chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: chunk4, Err: syscall.EIO})
		}, []string{"storage unreachable: read at byte 0 of " + chunk4, "input/output error (EIO)"}},
		{"disk full", func(chan struct{}) chunk.FS {
			return chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpWrite, Path: "chunk-00000002.brc", Err: syscall.ENOSPC, After: 100})
		}, []string{"write ", "rank-00001/chunk-00000002.brc", "no space left on device"}},
		{"sync error", func(chan struct{}) chunk.FS {
			return chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpSync, Path: chunk.IndexName, Err: syscall.EIO})
		}, []string{"write ", "rank-00001/index.bri", "input/output error"}},
		{"damaged on every read", func(chan struct{}) chunk.FS {
			return chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: chunk4, Flip: 300})
		}, []string{"failed verification twice", "shard 1 chunk 4", "chunk-00000004.brc", "checksum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := t.TempDir()
			stop := make(chan struct{})
			cfg := config(tc.fsys(stop), src, local, 1)
			cfg.Stop = stop
			_, err := stage.Stage(cfg)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("error %v, want it to contain %q", err, w)
				}
			}
			if tc.name == "stopped" && !errors.Is(err, stage.ErrInterrupted) {
				t.Fatalf("error %v is not ErrInterrupted", err)
			}
			nothingLeft(t, local)
			res := mustStage(t, config(chunk.OS, src, local, 1))
			if res.Reused || res.Replaced != "" {
				t.Fatalf("after the failed stage: %+v", res)
			}
			checkCopy(t, src, res.Dir, 1)
		})
	}
}

// hookFS calls hook when a file whose path contains path is created.
type hookFS struct {
	chunk.FS
	path string
	hook func()
}

func (h *hookFS) Create(name string) (chunk.File, error) {
	if strings.Contains(name, h.path) {
		h.hook()
	}
	return h.FS.Create(name)
}

// TestStageRecopiesWhatFailsOnce damages one read of a chunk file from
// the source: the copy fails verification, that file is copied again,
// and the stage succeeds, having read it twice.
func TestStageRecopiesWhatFailsOnce(t *testing.T) {
	src := packed(t, 300, 2, 1)
	chunk4 := filepath.Join(src, "rank-00001", "chunk-00000004.brc")
	fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: chunk4, Flip: 300, Times: 1})
	res := mustStage(t, config(fsys, src, t.TempDir(), 1))
	fi, err := os.Stat(chunk4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused || res.SourceBytes-res.Bytes != fi.Size() {
		t.Fatalf("read %d bytes from the source for a copy of %d, want %d more (the chunk file again)", res.SourceBytes, res.Bytes, fi.Size())
	}
	checkCopy(t, src, res.Dir, 1)
}

// TestStageLeftoversOfACrash leaves what a stage killed just before its
// rename would leave (a complete temporary copy, with its marker) and a
// copy being retired: the next Stage uses neither, removes both and
// copies anew.
func TestStageLeftoversOfACrash(t *testing.T) {
	src := packed(t, 300, 2, 1)
	local := t.TempDir()
	cfg := config(chunk.OS, src, local, 1)
	res := mustStage(t, cfg)
	name := filepath.Base(res.Dir)
	if err := os.Rename(res.Dir, filepath.Join(local, "."+name+".tmp-999999")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(local, "."+name+".old-999999", "rank-00001"), 0o755); err != nil {
		t.Fatal(err)
	}
	res = mustStage(t, cfg)
	if res.Reused || res.Replaced != "" || res.CopiedBytes != res.Bytes {
		t.Fatalf("after a crash: %+v", res)
	}
	if got := testkit.Entries(t, local); !slices.Equal(got, []string{filepath.Base(res.Dir)}) {
		t.Fatalf("%s holds %v, want the copy alone", local, got)
	}
	checkCopy(t, src, res.Dir, 1)
}

// TestStageDiskFillsUp fills the disk (ENOSPC) while the last of four
// shards is copied, past the check of the space: the error says that
// the directory filled up, with what the shards needed and what was
// free, and nothing is left in the local directory, not the shards
// copied before nor any lock.
func TestStageDiskFillsUp(t *testing.T) {
	src := packed(t, 400, 4, 1)
	local := t.TempDir()
	fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpWrite, Path: "rank-00003/chunk-00000002.brc", Err: syscall.ENOSPC, After: 1000})
	_, err := stage.Stage(config(fsys, src, local, 0, 1, 2, 3))
	for _, w := range []string{local + " filled up while copying shard 3 of " + src, "copying shards 0–3 needs ", " were free when it began",
		"rank-00003/chunk-00000002.brc", "no space left on device", "removed what it copied"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %v, want it to contain %q", err, w)
		}
	}
	if left := testkit.Entries(t, local); len(left) != 0 {
		t.Fatalf("the failed stage left %v in %s", left, local)
	}
}

// TestStageDamagedCopySourceGone damages a verified copy and takes the
// source's shard away: the stage that finds the copy damaged cannot copy
// it again, and its error says both, the damage found in the copy and
// that the source cannot be read, with the errno.
func TestStageDamagedCopySourceGone(t *testing.T) {
	src := packed(t, 300, 2, 1)
	local := t.TempDir()
	first := mustStage(t, config(chunk.OS, src, local, 0))
	testkit.Flip(t, filepath.Join(first.Dir, "rank-00000", "chunk-00000002.brc"), fileOffset(t, first.Dir, 2)+1)
	if err := os.Rename(filepath.Join(src, "rank-00000"), filepath.Join(src, "gone")); err != nil {
		t.Fatal(err)
	}
	_, err := stage.Stage(config(chunk.OS, src, local, 0))
	for _, w := range []string{"the copy of shard 0 in " + first.Dir + " is damaged", "chunk 2", "checksum",
		"the source cannot be read to copy it again", "storage unreachable", filepath.Join(src, "rank-00000", chunk.IndexName), "(ENOENT)"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %v, want it to contain %q", err, w)
		}
	}
}
