package rt

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk/synth"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/proto"
)

// perFile sums the ranks' deliveries per file a piece at a time: the
// files of every piece, the last one short, count once each however the
// pieces fall.
func TestPerFileSumsInPieces(t *testing.T) {
	// deliveries per rank of 7 files: file 0 twice on one rank, file 3 on
	// both (a duplicate across ranks), file 5 on none, file 6 three times
	counts := [][]int32{{2, 1, 0, 1, 0, 0, 1}, {0, 0, 1, 1, 1, 0, 2}}
	for _, piece := range []int{1, 2, 3, 7, 1 << 20} {
		old := perFilePiece
		perFilePiece = piece
		comms := collectives.NewLocal(2)
		dups, distincts := make([]int64, 2), make([]int64, 2)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := &Node{comm: c}
				n.tally.counts = counts[r]
				var err error
				if dups[r], distincts[r], err = n.perFile(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		perFilePiece = old
		for r := range 2 {
			if dups[r] != 4 || distincts[r] != 6 {
				t.Errorf("pieces of %d files, rank %d: %d extra deliveries of %d distinct files; want 4 of 6", piece, r, dups[r], distincts[r])
			}
		}
	}
}

// Every rank's footprint counts what it keeps of each file of the
// dataset, not only of its shard, and rank 0's the order it measures
// (with --batch, on the window policy): on 3 ranks of 700 files, each
// counts 700 files' worth, and only rank 0, only with a batch, the order.
// Where the order is gathered to rank 0 (measured, or handed over:
// Site.Order, --order-out), every rank counts the file at each of its
// positions, and rank 0, where it is handed over, the whole order. Go's
// limit is the footprint less what lives outside its heap.
func TestFootprintCountsTheDataset(t *testing.T) {
	dir := packed(t, 700, 3, 8)
	for _, c := range []struct {
		batch int
		order bool
	}{{0, false}, {64, false}, {0, true}, {64, true}} {
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.Consume, cfg.MixBatch = dir, 0.25, 1, 2, c.batch
		if c.order {
			cfg.Site.Order = func(uint32, [][]proto.FileID) {}
		}
		fps := make([]Footprint, 3)
		for r, n := range openRanks(t, cfg, 3) {
			fps[r] = n.Footprint()
		}
		for r, f := range fps {
			if f.DatasetFiles != 700 || f.Dataset != 700*datasetFileBytes || f.Files >= 700 || f.Tables != int64(f.Files)*shardFileBytes {
				t.Errorf("%+v, rank %d: %d files of the dataset, %d B for them, %d of the shard, %d B: want 700, %d B, and its shard's",
					c, r, f.DatasetFiles, f.Dataset, f.Files, f.Tables, 700*datasetFileBytes)
			}
			if want := int64(0); r == 0 && c.batch > 0 {
				want = 700 * orderFileBytes
				if f.Order != want || !strings.Contains(f.String(), "for measuring each epoch's order") {
					t.Errorf("%+v, rank 0: %d B for the order, want %d, said: %s", c, f.Order, want, f)
				}
			} else if f.Order != want {
				t.Errorf("%+v, rank %d: %d B for the order, want none", c, r, f.Order)
			}
			gathers := c.batch > 0 || c.order
			want := map[bool]int64{true: 234 * orderShareBytes}[gathers] // 700 positions over 3 ranks
			if r == 0 && c.order {
				want += 700 * orderOutFileBytes
			}
			if f.OrderOut != want || strings.Contains(f.String(), "gathering each epoch's order") != gathers {
				t.Errorf("%+v, rank %d: %d B for gathering the order, want %d, said: %s", c, r, f.OrderOut, want, f)
			}
			if got, want := f.GoLimit(), f.Records+f.Remote+f.Tables+f.Dataset+f.Order+f.OrderOut+goProcessBytes; got < want || got > want+4096 {
				t.Errorf("%+v, rank %d: Go's limit %d, want the footprint's terms in Go's heap, %d", c, r, got, want)
			}
		}
	}
}

// TestHandedBeyondTheBudget: one rank whose budget holds its shard
// hands every file on (its files stay in memory from epoch to epoch)
// and its footprint counts no files handed on, even with --hand-mem;
// below the shard, the footprint counts every byte the bound lets the
// training processes hold (the next epoch may read their files again,
// into other buffers). Since the footprint falls where the budget
// reaches the shard, the largest budget that fits a limit is found
// above it when the shard fits, below it when it does not.
func TestHandedBeyondTheBudget(t *testing.T) {
	dir := testkit.Dataset{Gen: synth.Config{Classes: 3, Files: 300, MeanSize: 60000, Sigma: 0.5, MaxSize: 300000, Seed: 3}, K: 16, Ranks: 1, Seed: 5}.Packed(t)
	open := func(share float64, handMem int64) *Node {
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.HandMemBytes = dir, share, 1, handMem
		n, err := Open(cfg.Config, cfg.Site, collectives.NewLocal(1)[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	for _, c := range []struct {
		share   float64
		handMem int64
	}{{0.25, -1}, {0.9, -1}, {0.99, -1}, {1, -1}, {1, 4 << 20}, {0.99, 4 << 20}} {
		n := open(c.share, c.handMem)
		f, holds := n.Footprint(), c.share == 1
		switch {
		case c.handMem >= 0 && n.HandCap() != c.handMem:
			t.Errorf("%+v: files handed on bounded at %d, want --hand-mem's %d", c, n.HandCap(), c.handMem)
		case c.handMem < 0 && holds && n.HandCap() != math.MaxInt64:
			t.Errorf("%+v: the budget holds the shard, yet the files handed on are bounded at %d", c, n.HandCap())
		case c.handMem < 0 && !holds && (n.HandCap() <= 0 || n.HandCap() == math.MaxInt64):
			t.Errorf("%+v: the budget does not hold the shard, yet the files handed on are bounded at %d", c, n.HandCap())
		}
		switch said := strings.Contains(f.String(), "handed on to training processes"); {
		case holds && (f.Handed != 0 || f.Answered != 0 || said):
			t.Errorf("%+v: the budget holds the shard, yet %d B for files answered and %d for files handed on, said: %s", c, f.Answered, f.Handed, f)
		case !holds && (f.Handed < min(n.HandCap(), n.data.facts.handable) || !said):
			t.Errorf("%+v: %d B for the files handed on, under the %d B the bound lets the training processes hold, said: %s",
				c, f.Handed, min(n.HandCap(), n.data.facts.handable), f)
		}
	}
	n := open(0.25, -1)
	shard := n.data.facts.bytes
	below, at := n.footprintAt(shard-1, 0).Total(), n.footprintAt(shard, 0).Total()
	if at >= below {
		t.Fatalf("the footprint at the shard, %d, not under the footprint just below it, %d", at, below)
	}
	for _, c := range []struct {
		limit int64
		above bool
	}{{at, true}, {below + 1<<20, true}, {at - 4096, false}} {
		b := n.fitBudget(c.limit)
		if (b >= shard) != c.above || (b > 0 && n.footprintAt(b, 0).Total() > c.limit) {
			t.Errorf("in %d bytes (%d at the shard, %d just below it): the largest budget that fits is %d, of a shard of %d", c.limit, at, below, b, shard)
		}
	}
	// A shard of 1 GiB (its sizes set, not read): 80 % of what a cgroup
	// that just holds it allows falls below it, where the files handed
	// on count again and the footprint does not fit: the shard, then.
	big := open(0.25, -1)
	big.data.facts = memFacts{files: 10000, bytes: 1 << 30, placed: 1 << 30, recvd: 1 << 30, handable: 1 << 30}
	limit := big.footprintAt(1<<30, 0).Total()
	big.site.MemLimitBytes, big.cfg.Mem.Cgroup = limit, 0.8
	if big.fitsAt(limit*8/10, limit) {
		t.Fatalf("a budget of 80 %% of %d fits it: the case is not the one meant", limit)
	}
	if b, err := big.cgroupBudget(); err != nil || b != 1<<30 {
		t.Errorf("--mem 80%%cgroup in %d bytes, for a shard of 1 GiB whose footprint is that: %d (%v), want the shard", limit, b, err)
	}
}

// TestFootprintCountsOtherRanksFiles: with several ranks, each reader may
// hold files of other ranks it was answered in place, whose receive
// buffers left --remote-mem once answered (the rank takes its reads
// while those, and each read not yet answered counted as the dataset's
// largest file, fit its ring): the footprint counts a ring's worth for
// each reader, even where the budget holds the shard, and the ranks agree
// on the dataset's largest file. One rank receives nothing.
func TestFootprintCountsOtherRanksFiles(t *testing.T) {
	dir := testkit.Dataset{Gen: synth.Config{Classes: 3, Files: 300, MeanSize: 60000, Sigma: 0.5, MaxSize: 300000, Seed: 3}, K: 16, Ranks: 2, Seed: 5}.Packed(t)
	for _, ranks := range []int{1, 2} {
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.Epochs = dir, 1, 1
		nodes := openRanks(t, cfg, ranks)
		var largest int64
		for _, n := range nodes {
			largest = max(largest, n.MaxFileSize())
		}
		for r, n := range nodes {
			f := n.Footprint()
			each := int64(float64(max(RingBytes(n.MaxFileSize()), largest)) * ratio(n.data.facts.lentRecvd, n.data.facts.lent) * (1 + arenaSlack))
			switch {
			case n.LargestFile() != largest:
				t.Errorf("%d ranks, rank %d: the dataset's largest file %d B, want %d", ranks, r, n.LargestFile(), largest)
			case ranks == 1 && (f.Received != 0 || strings.Contains(f.String(), "of other ranks")):
				t.Errorf("one rank: %d B for other ranks' files answered in place, want none: %s", f.Received, f)
			case ranks > 1 && (each <= 0 || f.Received != int64(f.Readers)*each || f.Readers != 4 || !strings.Contains(f.String(), "for the files of other ranks they were answered in place")):
				t.Errorf("rank %d of %d: %d B for other ranks' files answered in place, want a ring's worth (%d B) for each of 4 readers: %s", r, ranks, f.Received, each, f)
			case ranks > 1 && (each < max(RingBytes(n.MaxFileSize()), largest) || float64(each) > 2.12*float64(max(RingBytes(n.MaxFileSize()), largest))):
				t.Errorf("rank %d of %d: %d B for each reader, want a ring's worth (or the largest file) in buffers of up to twice a file's bytes", r, ranks, each)
			case ranks > 1 && f.MPI != mpiHeld(ranks, n.MaxFileSize(), largest):
				t.Errorf("rank %d of %d: MPI's term %d B, want it counted on the dataset's largest file", r, ranks, f.MPI)
			}
		}
	}
}

// openRanks opens every rank of cfg in-process (openEach), and closes
// them when the test ends; it stops the test if one fails to open.
func openRanks(t *testing.T, cfg testJob, ranks int) []*Node {
	t.Helper()
	nodes, errs := openEach(ranks, func(int) testJob { return cfg })
	for r, n := range nodes {
		if n != nil {
			t.Cleanup(n.Close)
		} else {
			t.Fatalf("rank %d of %d: %v", r, ranks, errs[r])
		}
	}
	return nodes
}

// openEach opens ranks ranks in-process, rank r with cfgOf(r), each on
// its own goroutine (Open is collective), and returns each one's node or
// error.
func openEach(ranks int, cfgOf func(r int) testJob) ([]*Node, []error) {
	nodes := make([]*Node, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r, comm := range collectives.NewLocal(ranks) {
		wg.Go(func() {
			cfg := cfgOf(r)
			nodes[r], errs[r] = Open(cfg.Config, cfg.Site, comm)
		})
	}
	wg.Wait()
	return nodes, errs
}

// TestOneRankDoesNotFit: Open sizes every rank after they gathered the
// dataset's largest file, and agrees again: a rank whose footprint does
// not fit its node fails, naming why, and the others return at once,
// naming it, rather than wait for it in a collective.
func TestOneRankDoesNotFit(t *testing.T) {
	dir := packed(t, 300, 2, 8)
	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var nodes []*Node
		nodes, errs = openEach(2, func(r int) testJob {
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Shard, cfg.Epochs = dir, 1, 1
			if r == 1 {
				cfg.NodeMemBytes = 100 << 10
			}
			return cfg
		})
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Open still waits a minute after one rank did not fit")
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "but its node has 100 KiB of memory") {
		t.Errorf("rank 1, on a node of 100 KiB: %v; want it refused, saying why", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "ranks [1] could not start") {
		t.Errorf("rank 0: %v; want it to name rank 1", errs[0])
	}
}
