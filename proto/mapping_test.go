package proto

import (
	"strings"
	"testing"
)

func TestGroupOfInvertsGroupStart(t *testing.T) {
	for pcs := 1; pcs <= 60; pcs++ {
		for vcs := 1; vcs <= pcs; vcs++ {
			for j := 0; j < pcs; j++ {
				g := groupOf(j, vcs, pcs)
				if g < 0 || g >= vcs || groupStart(g, vcs, pcs) > j || groupStart(g+1, vcs, pcs) <= j {
					t.Fatalf("pcs=%d vcs=%d: pc %d in group %d = [%d, %d)", pcs, vcs, j, g,
						groupStart(g, vcs, pcs), groupStart(g+1, vcs, pcs))
				}
			}
			if sz0, sz1 := groupStart(1, vcs, pcs), groupStart(vcs, vcs, pcs)-groupStart(vcs-1, vcs, pcs); sz0-sz1 > 1 || sz1-sz0 > 1 {
				t.Fatalf("pcs=%d vcs=%d: group sizes %d and %d differ by more than one", pcs, vcs, sz0, sz1)
			}
		}
	}
}

func TestMappingLayout(t *testing.T) {
	// Rank 0: 10 files of 10 bytes, K=4 → pcs 0-2 (the last holds 2 files),
	// budget 40 bytes → 1 VC. Rank 1: 8 files of 5 bytes, budget 40 → 2 VCs.
	m, err := NewMapping(Dataset{K: 4, Shards: []Shard{{Files: 10, Bytes: 100, MemBytes: 40}, {Files: 8, Bytes: 40, MemBytes: 40}}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Files() != 18 || m.PCs() != 5 || m.VCs() != 3 {
		t.Fatalf("files %d pcs %d vcs %d, want 18 5 3", m.Files(), m.PCs(), m.VCs())
	}
	for f := FileID(0); f < 18; f++ {
		h, x := m.Locate(f)
		first, _ := m.RankVCs(h)
		if h != m.Home(f) || int(x) != m.GlobalSlot(f)-first*m.K() {
			t.Fatalf("file %d: Locate = (%d, %d), Home %d, GlobalSlot %d", f, h, x, m.Home(f), m.GlobalSlot(f))
		}
		lo, hi := m.PCFiles(m.PC(f))
		if f < lo || f >= hi || int(f-lo) != m.Slot(f) {
			t.Fatalf("file %d: pc %d holds [%d, %d), slot %d", f, m.PC(f), lo, hi, m.Slot(f))
		}
		if pl, ph := m.PCS(m.VC(f)); m.PC(f) < pl || m.PC(f) >= ph {
			t.Fatalf("file %d: pc %d not in PCS(%d) = [%d, %d)", f, m.PC(f), m.VC(f), pl, ph)
		}
	}
	if lo, hi := m.PCFiles(2); lo != 8 || hi != 10 {
		t.Fatalf("last pc of rank 0 holds [%d, %d), want [8, 10)", lo, hi)
	}
	if h := m.Home(10); h != 1 {
		t.Fatalf("file 10 lives on rank %d, want 1", h)
	}
}

func TestVCCount(t *testing.T) {
	for _, c := range []struct {
		s        Shard
		k, pcs   int
		want     int
		scenario string
	}{
		{Shard{Files: 100, Bytes: 1000, MemBytes: 250}, 5, 20, 5, "a quarter of the shard"},
		{Shard{Files: 100, Bytes: 1000, MemBytes: 1 << 40}, 5, 20, 20, "more memory than data: one VC per PC"},
		{Shard{Files: 100, Bytes: 1000, MemBytes: 0}, 5, 20, 1, "no memory: still one VC"},
		{Shard{Files: 0}, 5, 0, 0, "no files"},
		{Shard{Files: 10, Bytes: 0, MemBytes: 0}, 5, 2, 2, "empty files take no memory"},
	} {
		if got := vcCount(c.s, c.k, c.pcs); got != c.want {
			t.Errorf("%s: %d VCs, want %d", c.scenario, got, c.want)
		}
	}
}

func TestDatasetValidateReportsEverything(t *testing.T) {
	err := Dataset{K: 0, Shards: []Shard{{Files: -1}, {Bytes: -5}, {MemBytes: -1}}}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"K = 0", "rank 0 has -1 files", "rank 1 holds -5 bytes", "rank 2 has a memory budget of -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestConfigValidateReportsEverything(t *testing.T) {
	m, err := NewMapping(Dataset{K: 2, Shards: []Shard{{Files: 2, Bytes: 3, MemBytes: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Mapping: m, Rank: 0, Sizes: []int64{1, 1}, Window: -1, Variant: 9, RemoteMemBytes: -1}
	err = cfg.Validate()
	for _, want := range []string{"sizes sum to 2 bytes, shard says 3", "unknown variant 9", "window -1", "remote memory -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := NewRank(Config{Mapping: m, Rank: 1}); err == nil || !strings.Contains(err.Error(), "rank 1 out of range") {
		t.Errorf("rank out of range: %v", err)
	}
}

// TestMappingListedChunks: PCs of the files each shard lists (chunks cut
// by size) map files to PCs, slots and VCs consistently, and a list that
// does not add up to the shard's files, or holds an empty chunk or one of
// more than K, is refused.
func TestMappingListedChunks(t *testing.T) {
	// Rank 0: PCs of 3, 1, 4 files; rank 1: fixed K=4 over 6 files (2 PCs).
	d := Dataset{K: 4, Shards: []Shard{{Files: 8, Bytes: 80, MemBytes: 30, Chunks: []int{3, 1, 4}}, {Files: 6, Bytes: 60, MemBytes: 60}}}
	m, err := NewMapping(d)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Sized() || m.PCs() != 5 || m.Files() != 14 {
		t.Fatalf("sized %v, %d PCs, %d files; want true, 5, 14", m.Sized(), m.PCs(), m.Files())
	}
	wantPC := []int{0, 0, 0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4}
	wantSlot := []int{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1}
	for f := FileID(0); f < 14; f++ {
		pc, slot := m.PC(f), m.Slot(f)
		lo, hi := m.PCFiles(pc)
		h, x := m.Locate(f)
		first, _ := m.RankVCs(h)
		if pc != wantPC[f] || slot != wantSlot[f] || f < lo || f >= hi || int(f-lo) != slot || int(x) != m.GlobalSlot(f)-first*m.K() {
			t.Fatalf("file %d: PC %d slot %d (want %d %d), PC files [%d, %d), Locate (%d, %d)", f, pc, slot, wantPC[f], wantSlot[f], lo, hi, h, x)
		}
	}
	// rank 0: 30 bytes of a mean PC of 80/3 bytes: 1 VC
	if _, n := m.RankVCs(0); n != 1 {
		t.Fatalf("rank 0 has %d VCs, want 1", n)
	}
	for _, c := range []struct {
		chunks []int
		want   string
	}{
		{[]int{3, 1, 3}, "chunks hold 7 files, it has 8"},
		{[]int{3, 0, 5}, "a chunk of 0 files"},
		{[]int{3, 5}, "a chunk of 5 files (K = 4)"},
	} {
		d.Shards[0].Chunks = c.chunks
		if _, err := NewMapping(d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chunks %v: %v, want %q", c.chunks, err, c.want)
		}
	}
}
