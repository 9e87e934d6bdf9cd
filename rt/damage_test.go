package rt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunktest"
	"github.com/brandrt/brandrt/internal/testkit"
)

// A chunk read that finds a file damaged is made again: a fault on the
// way that does not repeat costs nothing; one that does is the job's
// error (OnDamage "fail") or costs that file alone ("skip"), for both
// policies, with the budget holding a quarter of the shard or all of it
// (later epochs then serve the chunk from memory: the file stays out).
func TestServeRereadsDamage(t *testing.T) {
	dir := packed(t, 400, 2, 8)
	ix, err := chunk.OpenIndex(chunk.OS, dir+"/"+chunk.RankDir(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	e := ix.Entry(3*8 + 2) // rank 1, chunk 3, slot 2
	ix.Close()
	for e.Size == 0 {
		t.Fatal("the damaged file is empty")
	}
	// Read whole (O_DIRECT on the test's disk), or with memory lent and
	// each file read straight into its own buffer (OSNoDirect scatters).
	for _, lent := range []bool{false, true} {
		for _, policy := range []Policy{PolicyWindow, PolicyPaper} {
			for _, mem := range []float64{0.25, 1} {
				for _, tc := range []struct {
					times    int
					onDamage string
				}{{1, "fail"}, {0, "fail"}, {0, "skip"}} {
					t.Run(fmt.Sprintf("lent=%v/%s/%g/%d/%s", lent, policy, mem, tc.times, tc.onDamage), func(t *testing.T) {
						serveDamaged(t, dir, e, lent, policy, mem, tc.times, tc.onDamage)
					})
				}
			}
		}
	}
}

// serveDamaged serves dir on 2 ranks for 2 epochs, with the read of
// file e (rank 1, chunk 3, slot 2) flipping a byte times times (0:
// always), and checks what TestServeRereadsDamage says.
func serveDamaged(t *testing.T, dir string, e chunk.Entry, lent bool, policy Policy, mem float64, times int, onDamage string) {
	log := new(testkit.Log)
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.Policy, cfg.Epochs, cfg.Consume, cfg.Log, cfg.OnDamage = dir, mem, policy, 2, 2, log, onDamage
	base, lentMem := chunk.OS, &lentMemory{}
	if lent {
		base, cfg.Memory = chunk.OSNoDirect, lentMem
	}
	cfg.FS = chunktest.New(base, chunktest.Rule{Op: chunktest.OpRead, Path: "rank-00001/chunk-00000003.brc",
		Flip: e.Offset + int64(e.Size)/2, Times: times})
	stats, err := serveLocalErr(t, 2, cfg)
	if err == nil && lentMem.out != 0 { // (a job that fails ends its process: not counted)
		t.Errorf("%d buffers of lent memory not given back", lentMem.out)
	}
	named := fmt.Sprintf("slot 2 (%s), bytes %d–%d: checksum", e.Path, e.Offset, e.Offset+int64(e.Size))
	switch {
	case times == 1:
		if err != nil || !strings.Contains(log.String(), "read again, the chunk was intact") {
			t.Fatalf("%v\n%s", err, log)
		}
		for _, s := range stats {
			if !s.OK() || s.FilesSkipped != 0 || s.FilesDelivered != 400 {
				t.Errorf("epoch %d: %+v", s.Epoch, s)
			}
		}
	case onDamage == "fail":
		if err == nil || !strings.Contains(err.Error(), named) || !strings.Contains(err.Error(), "read twice") {
			t.Fatalf("error %v", err)
		}
	default:
		if err != nil || strings.Count(log.String(), named) != 1 {
			t.Fatalf("%v\n%s", err, log)
		}
		for _, s := range stats {
			if !s.OK() || s.FilesSkipped != 1 || s.FilesDelivered != 399 || s.SkippedCRCSum != int64(e.CRC) {
				t.Errorf("epoch %d: %+v", s.Epoch, s)
			}
		}
	}
}

// A chunk file that cannot be opened for a while (ENOENT, as a network
// file system's client gives when it loses a file for a moment) is not
// damage: it is read again after waits that double from 250 ms, and the
// rank says that it waits and that storage answers again. Three failed
// opens cost 1.75 s and no file; one that stays unreadable past
// StorageWait is the job's error, naming the file and the errno.
func TestServeRetriesIOErrors(t *testing.T) {
	dir := packed(t, 400, 2, 8)
	for _, tc := range []struct {
		times int
		ok    bool
	}{{3, true}, {0, false}} {
		t.Run(fmt.Sprint(tc.times), func(t *testing.T) {
			log := new(testkit.Log)
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.Consume, cfg.Log, cfg.StorageWait = dir, 0.25, 1, 2, log, 2*time.Second
			cfg.FS = chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpOpen, Path: "rank-00001/chunk-00000003.brc",
				Err: syscall.ENOENT, Times: tc.times})
			start := time.Now()
			stats, err := serveLocalErr(t, 2, cfg)
			took := time.Since(start)
			said := "rank-00001/chunk-00000003.brc: no such file or directory (ENOENT); waiting up to 2s for it to come back (--storage-wait)"
			if strings.Count(log.String(), said) != 1 || strings.Contains(log.String(), "damaged") {
				t.Errorf("log:\n%s", log)
			}
			if tc.ok {
				if err != nil || !strings.Contains(log.String(), "storage answers again after") || took < 1750*time.Millisecond {
					t.Fatalf("after %v: %v\n%s", took, err, log)
				}
				for _, s := range stats {
					if !s.OK() || s.FilesDelivered != 400 {
						t.Errorf("epoch %d: %+v", s.Epoch, s)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "storage unreachable: open ") || !strings.Contains(err.Error(), "(ENOENT), still after waiting 2s") {
				t.Fatalf("error %v", err)
			}
		})
	}
}

// A rank that reads a staged copy of the dataset (Source names the
// dataset it was copied from) and finds a chunk damaged in it, on every
// read, reads that chunk from the source instead, and says so once:
// every file arrives intact, in every epoch. When the source's shard
// cannot be opened either (ENOENT, past StorageWait), the damage stands,
// and what says so names both the damage of the copy and the source's
// error: the job's error (OnDamage "fail"), or the line that leaves the
// file out ("skip").
func TestServeStagedCopyFallsBack(t *testing.T) {
	src := packed(t, 400, 2, 8)
	staged := filepath.Join(t.TempDir(), "staged")
	if err := os.CopyFS(staged, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	ix, err := chunk.OpenIndex(chunk.OS, filepath.Join(staged, chunk.RankDir(1)), 1)
	if err != nil {
		t.Fatal(err)
	}
	e := ix.Entry(3*8 + 2) // shard 1, chunk 3, slot 2
	ix.Close()
	copied := filepath.Join(staged, "rank-00001", "chunk-00000003.brc")
	fromSource := "read the chunk from the source, " + filepath.Join(src, "rank-00001", "chunk-00000003.brc") + ", instead"
	both := "its staged copy is damaged and the source cannot be read either: chunk: shard 1 index: storage unreachable: open " +
		filepath.Join(src, "rank-00001", chunk.IndexName) + ": no such file or directory (ENOENT)"
	for _, tc := range []struct{ name, onDamage string }{{"source", "fail"}, {"source gone", "fail"}, {"source gone", "skip"}} {
		t.Run(tc.name+"/"+tc.onDamage, func(t *testing.T) {
			log := new(testkit.Log)
			cfg := defaultJob()
			cfg.Chunks, cfg.Source, cfg.Mem.Shard, cfg.Epochs, cfg.Consume, cfg.Log = staged, src, 0.25, 2, 2, log
			cfg.OnDamage, cfg.StorageWait = tc.onDamage, time.Second
			fsys := chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpRead, Path: copied, Flip: e.Offset + int64(e.Size)/2})
			if tc.name == "source gone" {
				fsys.Add(chunktest.Rule{Op: chunktest.OpOpen, Path: filepath.Join(src, "rank-00001"), Err: syscall.ENOENT})
			}
			cfg.FS = fsys
			stats, err := serveLocalErr(t, 2, cfg)
			said := lineWith(log.String(), "its staged copy")
			switch {
			case tc.name == "source":
				if err != nil || strings.Count(log.String(), "its staged copy of shard 1 chunk 3 is damaged (read twice): ") != 1 ||
					!strings.Contains(said, copied) || !strings.Contains(said, fromSource) {
					t.Fatalf("%v\n%s", err, log)
				}
				for _, s := range stats {
					if !s.OK() || s.FilesSkipped != 0 || s.FilesDelivered != 400 {
						t.Errorf("epoch %d: %+v", s.Epoch, s)
					}
				}
			case tc.onDamage == "fail":
				if err == nil || !strings.Contains(err.Error(), copied) || !strings.Contains(err.Error(), both) {
					t.Fatalf("error %v, want it to name %s and contain %q\n%s", err, copied, both, log)
				}
			default:
				if err != nil || strings.Count(log.String(), both) != 1 || !strings.Contains(lineWith(log.String(), both), copied) {
					t.Fatalf("%v\n%s", err, log)
				}
				for _, s := range stats {
					if !s.OK() || s.FilesSkipped != 1 || s.FilesDelivered != 399 {
						t.Errorf("epoch %d: %+v", s.Epoch, s)
					}
				}
			}
		})
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

// TestChangedManifest: Node.changed, which tells a dataset packed again
// from damage, says nothing when the manifest cannot be read (storage's
// fault) and names a manifest gone or another one; asked at an epoch's
// start (gone false), a manifest gone is no answer (a mount gone looks
// the same), another one still is.
func TestChangedManifest(t *testing.T) {
	dir := packed(t, 40, 1, 8)
	man, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{}
	n.data.hash, n.data.man = man.Hash(), man
	for _, tc := range []struct {
		name string
		fs   chunk.FS
		want string
	}{
		{"the same", chunk.OS, ""},
		{"unreadable", chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpOpen, Path: chunk.ManifestName, Err: syscall.EIO}), ""},
		{"gone", chunktest.New(chunk.OS, chunktest.Rule{Op: chunktest.OpOpen, Path: chunk.ManifestName, Err: syscall.ENOENT}), "its manifest is gone"},
	} {
		n.site.FS = tc.fs
		if got := n.changed(dir, true); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if got := n.changed(dir, false); got != "" {
			t.Errorf("%s, at an epoch's start: %q, want nothing", tc.name, got)
		}
	}
	n.site.FS, n.data.hash = chunk.OS, man.Hash()+1
	for _, gone := range []bool{true, false} {
		if got := n.changed(dir, gone); !strings.Contains(got, "its manifest says it was packed at") {
			t.Errorf("another manifest (gone %v): %q", gone, got)
		}
	}
}
