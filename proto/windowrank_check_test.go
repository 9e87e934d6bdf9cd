package proto

import (
	"strings"
	"testing"
)

// CheckInvariants finds each kind of broken count it names: a rank in a
// consistent state passes, and one with a counter or flag set wrong fails
// with the invariant that broke.
func TestWindowRankInvariants(t *testing.T) {
	m, err := NewMapping(Dataset{K: 2, Shards: []Shard{{Files: 4, Bytes: 4, MemBytes: 2}, {Files: 4, Bytes: 4, MemBytes: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	sizes := [][]int64{{1, 1, 1, 1}, {1, 1, 1, 1}}
	fresh := func() *WindowRank {
		w, err := NewWindowRank(WindowConfig{Rank: 0, Mapping: m, Sizes: sizes, Seed: 1, Window: 4, Remote: []int64{2, 2}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Step(EpochStart{Epoch: 1, Traces: Traces(m.Files(), m.Ranks(), 1, 1)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Step(ClientRequest{Sn: 0}); err != nil {
			t.Fatal(err)
		}
		if err := w.CheckInvariants(); err != nil {
			t.Fatalf("a fresh rank: %v", err)
		}
		return w
	}
	remote := func(w *WindowRank) int {
		for sn, f := range w.plan.Files[0] {
			if m.Home(f) != 0 {
				return sn
			}
		}
		t.Fatal("no remote position")
		return 0
	}
	for _, c := range []struct {
		name  string
		spoil func(w *WindowRank)
		want  string
	}{
		{"held", func(w *WindowRank) { w.held++ }, "own files being read or in memory hold"},
		{"budget", func(w *WindowRank) {
			for i := range w.state {
				w.state[i] = inMemory
			}
			w.held = 4
		}, "over its budget"},
		{"buffered", func(w *WindowRank) { w.buffered++ }, "files arrived ahead hold"},
		{"granted", func(w *WindowRank) { w.grantBytes++ }, "pushes granted and not yet asked for hold"},
		{"limit", func(w *WindowRank) {
			sn := remote(w)
			w.planned[sn], w.asked[sn], w.arrived[sn], w.fetched[sn] = true, false, true, false
			w.told, w.granted = max(w.told, int32(sn)), max(w.granted, int32(sn))
			w.low = min(w.low, int32(sn))
			w.buffered, w.grantBytes = 1, 0
			for s, f := range w.plan.Files[0] {
				if w.planned[s] && !w.asked[s] && int32(s) >= w.low && int32(s) <= w.granted {
					w.grantBytes += w.size(f)
				}
			}
			w.cfg.Remote = []int64{0, 0}
		}, "over its limit"},
		{"ungranted", func(w *WindowRank) {
			sn := remote(w)
			w.planned[sn], w.asked[sn], w.arrived[sn], w.fetched[sn], w.buffered = true, false, true, false, 1
			w.told = int32(sn) - 1
		}, "arrived, but asked for already, not pushed or not granted"},
		{"own fetched", func(w *WindowRank) {
			for sn, f := range w.plan.Files[0] {
				if m.Home(f) == 0 {
					w.fetched[sn] = true
					return
				}
			}
		}, "its own file"},
		{"waiter", func(w *WindowRank) {
			for i, s := range w.state {
				if s == notRead || s == reading {
					w.held -= map[bool]int64{true: 1}[s == reading]
					w.state[i] = gone
					w.waiters[w.first+FileID(i)] = []waiter{{from: -1}}
					return
				}
			}
			t.Fatal("every file is in")
		}, "requests wait for file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := fresh()
			c.spoil(w)
			err := w.CheckInvariants()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
