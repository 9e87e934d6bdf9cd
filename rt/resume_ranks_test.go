package rt

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// orderRun is what one in-process job delivered: per epoch, every rank's
// files in position order, and the place its clients would save.
type orderRun struct {
	orders map[uint32][][]proto.FileID
	place  Place
	stats  []EpochStats
}

// runOrders serves cfg on ranks in-process ranks with in-process
// consumers; with resume, every rank is told to resume there.
func runOrders(t *testing.T, ranks int, cfg testJob, resume *Place) (orderRun, error) {
	t.Helper()
	run := orderRun{orders: map[uint32][][]proto.FileID{}}
	var mu sync.Mutex
	cfg.Consume, cfg.Depth = 2, 4
	cfg.Order = func(e uint32, files [][]proto.FileID) {
		mu.Lock()
		defer mu.Unlock()
		run.orders[e] = files
	}
	cfg.Resume = resume != nil
	var err error
	run.stats, err = serveLocalOpened(t, ranks, cfg, func(r int, n *Node) {
		if r == 0 {
			run.place = n.JobPlace()
		}
		if resume != nil {
			reply := make(chan error, 1)
			n.Starts() <- StartOffer{Place: *resume, Reply: reply}
			go func() {
				if err := <-reply; err != nil {
					t.Logf("rank %d: start refused: %v", r, err)
				}
			}()
		}
	})
	return run, err
}

// TestResumeOnOtherRanks: a job of 3 ranks on a dataset of 6 shards
// stops at position p of epoch 2; jobs of 2 and of 4 ranks resume from
// its state: the files of epoch 2 the first job delivered before p and
// those the second delivers make the dataset exactly once; the second
// job's epoch 3 is a fresh job's of its size, whole; two resumes from one
// state deliver the same order; and a state saved in the middle of the
// resumed epoch resumes again, on 3 ranks, with the same guarantee.
func TestResumeOnOtherRanks(t *testing.T) {
	const files, shards = 600, 6
	dir := packed(t, files, shards, 8)
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Epochs = dir, 0.25, 100_000, 3
	full, err := runOrders(t, 3, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	const p = 80 // of each rank's 200 positions: 40 %
	place := full.place
	place.Epoch, place.Position = 2, p
	trained := make([]int, files)
	for _, fs := range full.orders[2] {
		for _, f := range fs[:p] {
			trained[f]++
		}
	}
	for _, ranks := range []int{2, 4} {
		t.Run(fmt.Sprint(ranks), func(t *testing.T) {
			fresh, err := runOrders(t, ranks, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			a, err := runOrders(t, ranks, cfg, &place)
			if err != nil {
				t.Fatal(err)
			}
			b, err := runOrders(t, ranks, cfg, &place)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(a.orders[2], b.orders[2], slices.Equal) {
				t.Error("two resumes from one state delivered epoch 2 in different orders")
			}
			once(t, "epoch 2", trained, a.orders[2])
			once(t, "epoch 3", make([]int, files), a.orders[3])
			if !slices.EqualFunc(a.orders[3], fresh.orders[3], slices.Equal) {
				t.Error("epoch 3 after the resume is not a fresh job's epoch 3")
			}
			if st := a.stats[0]; st.FilesBefore != int64(p*3) || st.FilesDelivered != int64(files-p*3) {
				t.Errorf("epoch 2 after the resume: %d files before the restart, %d delivered; want %d and %d",
					st.FilesBefore, st.FilesDelivered, p*3, files-p*3)
			}
			// the resumed job saves its state at position q of epoch 2,
			// and a job of 3 ranks takes up from there
			const q = 30
			again := a.place
			again.Epoch, again.Position = 2, q
			again.Before = []Stretch{{PlanRule: place.Plan, Position: p}}
			c, err := runOrders(t, 3, cfg, &again)
			if err != nil {
				t.Fatal(err)
			}
			twice := slices.Clone(trained)
			for _, fs := range a.orders[2] {
				for _, f := range fs[:q] {
					twice[f]++
				}
			}
			once(t, "epoch 2 resumed twice", twice, c.orders[2])
		})
	}
}

// once checks that the files before and those delivered in orders make
// every file exactly once.
func once(t *testing.T, what string, before []int, orders [][]proto.FileID) {
	t.Helper()
	n := slices.Clone(before)
	for _, fs := range orders {
		for _, f := range fs {
			if f == proto.NoFile {
				t.Fatalf("%s: a position was not answered", what)
			}
			n[f]++
		}
	}
	for f, c := range n {
		if c != 1 {
			t.Fatalf("%s: file %d delivered %d times", what, f, c)
		}
	}
}

// TestResumeRefusesOtherJobs: a state from another dataset, seed or
// policy, a papers' state on another number of ranks, and an old state
// (no plan recorded) on another number of ranks are refused with what
// to change.
func TestResumeRefusesOtherJobs(t *testing.T) {
	dir := packed(t, 300, 3, 8)
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Epochs = dir, 0.25, 100_000, 2
	run, err := runOrders(t, 3, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := run.place
	good.Epoch, good.Position = 1, 10
	for _, tc := range []struct {
		name   string
		change func(*Place)
		want   string
	}{
		{"dataset", func(p *Place) { p.Dataset = "0123456789abcdef" }, "another dataset"},
		{"seed", func(p *Place) { p.Seed = 9 }, "--seed 9"},
		{"policy", func(p *Place) { p.Policy = "paper" }, "--policy paper"},
		{"paper on other ranks", func(p *Place) { p.Policy, p.Ranks, p.Plan.Ranks = "paper", 2, 2 }, "--policy paper"},
		{"old state", func(p *Place) { *p = Place{Epoch: 1, Position: 10, Ranks: 2, Seed: p.Seed} }, "resumes only on 2 ranks"},
		{"epoch", func(p *Place) { p.Epoch = 5 }, "epochs 1 to 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.change(&p)
			c := collectives.NewLocal(1)[0]
			one := cfg
			one.Resume = true
			n, err := openOne(one, c)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if tc.name == "paper on other ranks" {
				n.cfg.Policy = "paper" // the job serves the papers' policy too, on 1 rank
			}
			_, err = n.fits(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: got %v, want an error saying %q", p, err, tc.want)
			}
		})
	}
}

// openOne opens a job of one rank.
func openOne(cfg testJob, c collectives.Comm) (*Node, error) { return Open(cfg.Config, cfg.Site, c) }

// TestResumeOldDataset resumes jobs on a dataset packed before shards
// were split over ranks (cmd/brandrt/testdata/pack-2026-11-25, 2 shards):
// a state saved before states recorded their plan resumes on the 2 ranks
// that saved it exactly as the uninterrupted job goes on, and is refused
// on 1 rank; a state of today's resumes on 1 rank, every file once.
func TestResumeOldDataset(t *testing.T) {
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Epochs = "../cmd/brandrt/testdata/pack-2026-11-25", 0.5, 100_000, 2
	full, err := runOrders(t, 2, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := Place{Epoch: 2, Position: 10, Ranks: 2, Seed: cfg.Seed}
	got, err := runOrders(t, 2, cfg, &old)
	if err != nil {
		t.Fatal(err)
	}
	for r, fs := range got.orders[2] {
		for sn, f := range fs {
			if want := full.orders[2][r][sn]; sn < 10 && f != proto.NoFile || sn >= 10 && f != want {
				t.Fatalf("rank %d, position %d: %d, the uninterrupted order has %d", r, sn, f, want)
			}
		}
	}
	one := cfg
	one.Resume = true
	n, err := Open(one.Config, one.Site, collectives.NewLocal(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.fits(old); err == nil || !strings.Contains(err.Error(), "it resumes only on 2 ranks") {
		t.Errorf("an old state of 2 ranks on 1: %v", err)
	}
	n.Close()
	now := full.place
	now.Epoch, now.Position = 2, 10
	rest, err := runOrders(t, 1, cfg, &now)
	if err != nil {
		t.Fatal(err)
	}
	trained := make([]int, len(full.orders[2][0])+len(full.orders[2][1]))
	for _, fs := range full.orders[2] {
		for _, f := range fs[:10] {
			trained[f]++
		}
	}
	once(t, "epoch 2 on 1 rank", trained, rest.orders[2])
}
