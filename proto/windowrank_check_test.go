package proto

import (
	"slices"
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
		traces := Traces(m.Files(), m.Ranks(), 1, 1)
		if err := w.Step(EpochStart{Epoch: 1, Traces: traces}); err != nil {
			t.Fatal(err)
		}
		other, err := PlanHome(w.input(1, traces), 1) // rank 1's answers to rank 0's positions: its share
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Step(Message{Type: MsgAnswers, From: 1, To: 0, Epoch: 1, Answers: other.ByRank(2)[0]}); err != nil {
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
		for sn, f := range w.share.Files {
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
			for s, f := range w.share.Files {
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
			for sn, f := range w.share.Files {
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

// A rank takes each home's answers, and each rank's positions pushed
// ahead, once, and refuses those that do not fit its plan: its share is
// what the homes' pools say, and nothing else.
func TestWindowRankRefusesBadPlanMessages(t *testing.T) {
	m, err := NewMapping(Dataset{K: 2, Shards: []Shard{{Files: 4, Bytes: 4, MemBytes: 2}, {Files: 4, Bytes: 4, MemBytes: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	sizes := [][]int64{{1, 1, 1, 1}, {1, 1, 1, 1}}
	traces := Traces(m.Files(), m.Ranks(), 1, 1)
	fresh := func() (*WindowRank, []Answer) {
		w, err := NewWindowRank(WindowConfig{Rank: 0, Mapping: m, Sizes: sizes, Seed: 1, Window: 4, Remote: []int64{2, 2}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Step(EpochStart{Epoch: 1, Traces: traces}); err != nil {
			t.Fatal(err)
		}
		if w.Share() != nil || w.Plan() != nil {
			t.Fatal("rank 0 has its share before rank 1's answers came, or a whole plan it was not asked for")
		}
		other, err := PlanHome(w.input(1, traces), 1)
		if err != nil {
			t.Fatal(err)
		}
		return w, other.ByRank(2)[0]
	}
	changed := func(as []Answer, change func([]Answer)) []Answer {
		as = slices.Clone(as)
		change(as)
		return as
	}
	answers := func(as []Answer) Message {
		return Message{Type: MsgAnswers, From: 1, To: 0, Epoch: 1, Answers: as}
	}
	w, good := fresh()
	if err := w.Step(answers(good)); err != nil || w.Share() == nil {
		t.Fatalf("rank 1's answers: %v; share %v", err, w.Share())
	}
	if err := w.Step(answers(good)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("the same answers again: %v, want refused", err)
	}
	own := w.answers[1] // rank 0's files that answer rank 1's positions
	if len(own) < 2 {
		t.Fatalf("rank 0's files answer %d of rank 1's positions; the case needs 2", len(own))
	}
	for _, c := range []struct {
		name string
		m    Message
		want string
	}{
		{"answers short of the first", answers(good[1:]), "its next position asking for a file of rank 1's is"},
		{"answers short of the last", answers(good[:len(good)-1]), "unanswered"},
		{"answer of another size", answers(changed(good, func(a []Answer) { a[0].Size++ })), "its index says"},
		{"one file for two positions", answers(changed(good, func(a []Answer) { a[1].File = a[0].File })), "two positions with file"},
		{"answers of another rank's position", answers(append([]Answer{{Rank: 1, Sn: good[0].Sn, File: good[0].File}}, good[1:]...)), "to it"},
		{"answer with a file of rank 0", answers(append([]Answer{{Rank: 0, Sn: good[0].Sn, File: 0}}, good[1:]...)), "not one of its own"},
		{"ahead of a position rank 0 does not answer", Message{Type: MsgAhead, From: 1, To: 0, Epoch: 1, Ahead: []int32{int32(len(traces[1]))}}, "no file of this rank answers"},
		{"ahead out of order", Message{Type: MsgAhead, From: 1, To: 0, Epoch: 1, Ahead: []int32{own[1].Sn, own[0].Sn}}, "out of order"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, _ := fresh()
			if err := w.Step(c.m); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	w, _ = fresh()
	ahead := Message{Type: MsgAhead, From: 1, To: 0, Epoch: 1, Ahead: []int32{own[0].Sn}}
	if err := w.Step(ahead); err != nil {
		t.Fatal(err)
	}
	if err := w.Step(ahead); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("the same positions ahead again: %v, want refused", err)
	}
}

// A position asked for before the homes' answers came, by clients that
// then end the epoch, is not asked of its home after the rank's done:
// the home would drop it.
func TestWindowRankAsksNothingAfterItsDone(t *testing.T) {
	m, err := NewMapping(Dataset{K: 2, Shards: []Shard{{Files: 4, Bytes: 4, MemBytes: 2}, {Files: 4, Bytes: 4, MemBytes: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	traces := Traces(m.Files(), m.Ranks(), 1, 1)
	w, err := NewWindowRank(WindowConfig{Rank: 0, Mapping: m, Sizes: [][]int64{{1, 1, 1, 1}, {1, 1, 1, 1}}, Seed: 1, Window: 4, Remote: []int64{2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Step(EpochStart{Epoch: 1, Traces: traces}); err != nil {
		t.Fatal(err)
	}
	sn := slices.IndexFunc(traces[0], func(f FileID) bool { return m.Home(f) == 1 })
	if sn < 0 {
		t.Fatal("rank 0's trace asks for no file of rank 1's")
	}
	other, err := PlanHome(w.input(1, traces), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []Event{ClientRequest{Sn: int32(sn)}, ClientsDone{},
		Message{Type: MsgAnswers, From: 1, To: 0, Epoch: 1, Answers: other.ByRank(2)[0]}} {
		if err := w.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range w.Ready().Sends {
		if s.Type != MsgAnswers && s.Type != MsgDone {
			t.Errorf("rank 0 sent %v after its done", s)
		}
	}
}
