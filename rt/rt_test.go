package rt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/proto"
)

// packed generates a dataset of files files and packs it for ranks ranks
// with k files per chunk.
func packed(t testing.TB, files, ranks, k int) string {
	t.Helper()
	return testkit.Dataset{Gen: synth.Config{Classes: 7, Files: files, MeanSize: 4000, Sigma: 0.9, MaxSize: 60000, Zero: 2, Seed: 3},
		K: k, Ranks: ranks, Seed: 5}.Packed(t)
}

// testJob is a rank's configuration and site, as a test sets them.
type testJob struct {
	Config
	Site
}

// defaultJob is the defaults, on the default site.
func defaultJob() testJob { return testJob{Config: DefaultConfig()} }

// serveLocal runs every rank of cfg in-process and returns rank 0's
// statistics.
func serveLocal(t *testing.T, ranks int, cfg testJob) []EpochStats {
	t.Helper()
	stats, err := serveLocalErr(t, ranks, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// serveLocalErr is serveLocal returning the ranks' errors.
func serveLocalErr(t *testing.T, ranks int, cfg testJob) ([]EpochStats, error) {
	t.Helper()
	return serveLocalOpened(t, ranks, cfg, nil)
}

// serveLocalOpened is serveLocalErr calling opened, when set, with each
// rank's node once it is open and before it serves.
func serveLocalOpened(t *testing.T, ranks int, cfg testJob, opened func(r int, n *Node)) ([]EpochStats, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := collectives.NewLocal(ranks)
	stats := make([][]EpochStats, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if errs[r] != nil { // end the others' waits, as MPI_Abort would
					defer func() { _ = recover() }()
					c.Abort(1)
				}
			}()
			n, err := Open(cfg.Config, cfg.Site, c)
			if err != nil {
				errs[r] = err
				return
			}
			defer n.Close()
			if opened != nil {
				opened(r, n)
			}
			stats[r], errs[r] = n.Serve(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for r := 1; r < ranks; r++ {
		if fmt.Sprint(stats[r]) != fmt.Sprint(stats[0]) {
			t.Fatalf("rank %d reports %+v, rank 0 %+v", r, stats[r], stats[0])
		}
	}
	return stats[0], nil
}

// lentMemory is a chunk.Memory that counts what it lends, as the arena
// shared with clients would lend it.
type lentMemory struct {
	mu          sync.Mutex
	allocs, out int
	bytes, peak int64 // lent now, and at most
}

func (m *lentMemory) Alloc(n int64) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, int(max(n, 1)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err == nil {
		m.mu.Lock()
		m.allocs, m.out = m.allocs+1, m.out+1
		m.bytes += int64(len(b))
		m.peak = max(m.peak, m.bytes)
		m.mu.Unlock()
	}
	return b, err
}

func (m *lentMemory) Free(b []byte) {
	m.mu.Lock()
	m.out--
	m.bytes -= int64(len(b))
	m.mu.Unlock()
	_ = syscall.Munmap(b)
}

// serveLent serves 700 files on three in-process ranks for two epochs,
// with memFraction of each shard in memory and chunks read through fsys
// into a lentMemory; it checks each epoch and returns the memory and
// rank 0's statistics.
func serveLent(t *testing.T, memFraction float64, fsys chunk.FS) (*lentMemory, []EpochStats) {
	t.Helper()
	mem := &lentMemory{}
	cfg := defaultJob()
	cfg.FS = fsys
	cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes = packed(t, 700, 3, 8), memFraction, 200_000
	cfg.Epochs, cfg.Consume, cfg.Depth, cfg.Memory = 2, 3, 3, mem
	stats := serveLocal(t, 3, cfg)
	for _, st := range stats {
		if !st.OK() || st.FilesExpected != 700 {
			t.Fatalf("epoch %d: %+v", st.Epoch, st)
		}
	}
	return mem, stats
}

// TestServeFromLentMemory: with memory lent to the runtime (Site.Memory),
// each file of a chunk read goes into a buffer of its own from it:
// copied from the chunk's buffer where the file system needs aligned
// reads (O_DIRECT on the test's disk), straight from the chunk file
// where it does not (OSNoDirect: through the page cache, as over FUSE
// or NFS). Every file arrives intact, and every buffer goes back.
func TestServeFromLentMemory(t *testing.T) {
	for _, fsys := range []chunk.FS{chunk.OS, chunk.OSNoDirect} {
		mem, stats := serveLent(t, 0.25, fsys)
		reads := 0
		for _, st := range stats {
			reads += int(st.ChunkReads)
		}
		if mem.allocs <= reads || mem.out != 0 {
			t.Fatalf("%d chunk reads, %d buffers lent (want more: a file each), %d not returned", reads, mem.allocs, mem.out)
		}
	}
}

// TestLentMemoryFollowsTheBudget: one rank, a quarter of its files in
// memory, chunks of 32 files read into lent memory. What it lends at most
// stays within what proto holds at most plus the chunks in flight: a file
// gives its memory back when it goes, whatever else came from its chunk
// read. (When the files kept from a read shared one buffer, held until the
// last of them went, the peak was over twice that.)
func TestLentMemoryFollowsTheBudget(t *testing.T) {
	mem := &lentMemory{}
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.Consume, cfg.Depth, cfg.Memory = packed(t, 3000, 1, 32), 0.25, 2, 2, 4, mem
	stats := serveLocal(t, 1, cfg)
	var peak int64
	for _, st := range stats {
		if !st.OK() {
			t.Fatalf("epoch %d: %+v", st.Epoch, st)
		}
		peak = max(peak, st.PeakMemBytes)
	}
	// A quarter more for the files' rounding, and the largest chunk for
	// each I/O worker and one more being sorted out.
	var chunkMax int64
	filepath.WalkDir(cfg.Chunks, func(path string, d fs.DirEntry, err error) error {
		if fi, err := os.Stat(path); err == nil && strings.HasSuffix(path, ".brc") {
			chunkMax = max(chunkMax, fi.Size())
		}
		return nil
	})
	bound := peak + peak/4 + int64(cfg.IOWorkers+1)*chunkMax
	if mem.peak > bound || mem.out != 0 {
		t.Fatalf("lent at most %d bytes; proto held at most %d, bound %d; %d buffers not returned", mem.peak, peak, bound, mem.out)
	}
	t.Logf("lent at most %d bytes; proto held at most %d", mem.peak, peak)
}

// TestReceiveIntoLentMemory: files from other ranks are received into the
// lent memory once they reach recvLentMin (lowered here to the test
// files' sizes), arrive intact, and every buffer goes back.
func TestReceiveIntoLentMemory(t *testing.T) {
	defer func(m int) { recvLentMin = m }(recvLentMin)
	recvLentMin = 4 << 10
	mem, stats := serveLent(t, 1, nil)
	remote, reads := 0, 0
	for _, st := range stats {
		remote += int(st.RemoteFiles)
		reads += int(st.StorageReads)
	}
	// With everything in memory each chunk is read from storage once and
	// each of its 700 files copied into a buffer of its own, kept; every
	// other buffer lent is for received files (the pool reuses them, so
	// there are fewer than files).
	if remote == 0 || reads == 0 || mem.allocs <= 700 || mem.out != 0 {
		t.Fatalf("%d files from other ranks, %d chunks read from storage, %d buffers lent (want more), %d not returned", remote, reads, mem.allocs, mem.out)
	}
}

func TestServeExactlyOnce(t *testing.T) {
	dir := packed(t, 700, 3, 8)
	cases := []struct {
		name    string
		variant proto.Variant
		mem     float64
		window  int
	}{
		{"full, a quarter in memory", proto.Full, 0.25, 64},
		{"full, everything in memory", proto.Full, 1, 64},
		{"no prefetch", proto.NoPrefetching, 0.25, 64},
		{"random selection, small window", proto.RandomSelection, 0.3, 4},
		{"no optimization", proto.NoOptimization, 0.1, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes = dir, tc.mem, 200_000
			cfg.Policy = "paper" // the window policy: TestServeWindowReadsEachChunkOnce
			cfg.Variant, cfg.Window, cfg.Epochs, cfg.Consume, cfg.Depth = tc.variant, tc.window, 2, 3, 3
			for _, st := range serveLocal(t, 3, cfg) {
				t.Logf("epoch %d: %d files, %d local hits, %d chunk reads, %d remote requests, %d pushes, %d prefetch hits", st.Epoch, st.FilesDelivered, st.LocalHits, st.ChunkReads, st.RemoteRequests, st.Prefetched, st.PrefetchHits)
				if !st.OK() || st.FilesExpected != 700 {
					t.Fatalf("epoch %d: %+v", st.Epoch, st)
				}
				if tc.variant.Prefetch() != (st.Prefetched > 0) {
					t.Errorf("epoch %d: %d pushes with %s", st.Epoch, st.Prefetched, tc.variant)
				}
				if st.RemoteFiles == 0 || st.ChunkReads == 0 {
					t.Errorf("epoch %d: no remote files or no reads: %+v", st.Epoch, st)
				}
			}
		})
	}
}

// The window policy delivers every file exactly once and reads each
// chunk once per epoch (from storage, or from memory when the budget
// holds the whole shard), for any rank count, budget and window.
func TestServeWindowReadsEachChunkOnce(t *testing.T) {
	for _, tc := range []struct {
		ranks  int
		mem    float64
		window int
	}{{1, 0.25, 64}, {2, 0.25, 64}, {3, 0.25, 8}, {2, 0.1, 0}, {3, 1, 64}} {
		t.Run(fmt.Sprintf("%d ranks, %.0f%% in memory, window %d", tc.ranks, 100*tc.mem, tc.window), func(t *testing.T) {
			dir := packed(t, 700, tc.ranks, 8)
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Keep = dir, tc.mem, 20_000, 0 // nothing carried (TestPartialResidency)
			cfg.Window, cfg.Epochs, cfg.Consume, cfg.Depth = tc.window, 2, 3, 3
			for _, st := range serveLocal(t, tc.ranks, cfg) {
				if !st.OK() || st.FilesExpected != 700 || st.ChunkBytes != st.BytesDelivered {
					t.Fatalf("epoch %d: %+v", st.Epoch, st)
				}
				// amplification is what storage paid per byte delivered:
				// nothing once the whole shard stays in memory
				if amp := float64(st.StorageBytes) / float64(st.BytesDelivered); st.ReadAmplification != amp || tc.mem == 1 && st.Epoch > 1 && amp != 0 {
					t.Fatalf("epoch %d: read amplification %.3f, %d bytes read from storage for %d delivered", st.Epoch, st.ReadAmplification, st.StorageBytes, st.BytesDelivered)
				}
				// chunk files hold their index and padding besides the files
				if tc.mem < 1 && (st.StorageBytes < st.BytesDelivered || float64(st.StorageBytes) > 1.02*float64(st.BytesDelivered)) {
					t.Fatalf("epoch %d: %d bytes read from storage for %d delivered", st.Epoch, st.StorageBytes, st.BytesDelivered)
				}
				if (tc.ranks > 1) != (st.RemoteFiles > 0) || (tc.window > 0 && tc.ranks > 1) != (st.Prefetched > 0) {
					t.Fatalf("epoch %d: %d files from other ranks, %d fetched ahead", st.Epoch, st.RemoteFiles, st.Prefetched)
				}
			}
		})
	}
}

// A budget smaller than a chunk cannot run the window policy; the error
// says what to change.
func TestWindowBudgetBelowAChunk(t *testing.T) {
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Bytes = packed(t, 100, 1, 8), 100
	n, err := Open(cfg.Config, cfg.Site, collectives.NewLocal(1)[0])
	if err == nil {
		n.Close()
		t.Fatal("a 100-byte budget opened")
	}
	if !strings.Contains(err.Error(), "more than the rank's budget") || !strings.Contains(err.Error(), "--policy paper") {
		t.Fatalf("error %q", err)
	}
}

// TestBudgetLargerThanNode: a rank whose own files in memory (--mem, as
// far as its shard fills it) and other ranks' (--remote-mem) need more
// than its node has is refused at Open, with the numbers; a --mem far
// above the shard is not.
func TestBudgetLargerThanNode(t *testing.T) {
	dir := packed(t, 300, 1, 8)
	for _, tc := range []struct {
		name        string
		mem, remote int64
		fraction    float64
		node        int64
		refused     bool
		say         string
	}{
		{"remote", 0, 3 << 20, 0.25, 2 << 20, true, "and up to 3.0 MiB of other ranks' (--remote-mem), "},
		{"own", 0, 0, 1, 100 << 10, true, "but its node has 100 KiB of memory: lower --mem or --remote-mem"},
		{"above the shard", 1 << 40, 0, 0, 64 << 20, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Bytes, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.NodeMemBytes = dir, tc.mem, tc.fraction, tc.remote, tc.node
			n, err := Open(cfg.Config, cfg.Site, collectives.NewLocal(1)[0])
			if err == nil {
				n.Close()
			}
			if (err != nil) != tc.refused || err != nil && !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("%v; want refused %v, saying %q", err, tc.refused, tc.say)
			}
		})
	}
}

// TestPartialResidency: a rank whose budget holds part of its shard
// begins each epoch after the first with the chunks the one before read
// last, and reads from storage exactly the chunks the plan reads
// (proto.FreshPlan, as simulate plans): with 99.7 % of the shard in
// memory, at most 0.3 % of it and a chunk. It says so at start-up; one
// whose budget holds all of it reads it once, and --keep 0 reads the
// whole shard every epoch.
func TestPartialResidency(t *testing.T) {
	dir := packed(t, 300, 1, 8)
	m, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	sizes, chunkMax := fileSizes(t, dir, 300, 8)
	shard := m.Shards[0].Bytes
	for _, tc := range []struct {
		mem  int64
		keep float64
		most int64 // bytes read from storage in epoch 2, at most
	}{
		{shard * 997 / 1000, proto.KeepShare, shard*3/1000 + chunkMax},
		{shard * 95 / 100, proto.KeepShare, shard},
		{shard / 4, proto.KeepShare, shard},
		{shard / 4, 0, shard},
		{shard, proto.KeepShare, 0},
	} {
		log := new(testkit.Log)
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Bytes, cfg.Keep, cfg.Epochs, cfg.Consume, cfg.Log = dir, tc.mem, tc.keep, 3, 2, log
		stats := serveLocal(t, 1, cfg)
		in, err := windowInput(m, sizes, cfg.Seed, PlanRule{Ranks: 1, MemBytes: tc.mem, Ramp: cfg.Ramp, Keep: tc.keep})
		if err != nil {
			t.Fatal(err)
		}
		for e := uint32(2); e <= 3; e++ {
			p, err := proto.FreshPlan(in, e)
			if err != nil {
				t.Fatal(err)
			}
			var reads, bytes int64
			for _, rd := range p.Reads[0] {
				if !rd.Resident {
					reads, bytes = reads+1, bytes+in.ChunkBytes(rd.PC)
				}
			}
			got := stats[e-1]
			if !got.OK() || got.StorageReads != reads || bytes > tc.most || tc.keep == 0 && bytes != shard {
				t.Errorf("--mem %d of a %d-byte shard, --keep %g: epoch %d read %d chunks from storage, the plan %d of %d bytes (at most %d)",
					tc.mem, shard, tc.keep, e, got.StorageReads, reads, bytes, tc.most)
			}
		}
		said := strings.Contains(log.String(), "each epoch after the first begins with up to")
		if said != (tc.mem < shard) {
			t.Errorf("--mem %d of a %d-byte shard: said %v what it keeps:\n%s", tc.mem, shard, said, log)
		}
	}
}

// fileSizes returns the sizes of the files of the one-rank dataset in
// dir (files of them, k per chunk), and its largest chunk's bytes.
func fileSizes(t *testing.T, dir string, files, k int) ([]int64, int64) {
	t.Helper()
	s, err := chunk.OpenShard(chunk.OS, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := make([]int64, files)
	var chunkMax, c int64
	for i := range sizes {
		sizes[i] = int64(s.Index().Record(i).Size)
		if c += sizes[i]; (i+1)%k == 0 || i == files-1 {
			chunkMax, c = max(chunkMax, c), 0
		}
	}
	return sizes, chunkMax
}
