package rt

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// TestClientTraces serves two epochs whose traces come from the clients:
// split unevenly over three ranks, the first epoch's covering the dataset,
// the second's a third of it. A first offer whose traces share a file is
// refused on every rank, and so is a late offer for a finished epoch;
// then each rank answers exactly its clients' positions, no file twice.
func TestClientTraces(t *testing.T) {
	const files, ranks = 700, 3
	dir := packed(t, files, ranks, 8)
	rng := rand.New(rand.NewPCG(9, 9))
	perm := rng.Perm(files)
	cuts := [][]int{{0, 70, 490, files}, {0, 150, 150, files / 3}} // per epoch, rank r takes perm[cut[r]:cut[r+1]]
	traceOf := func(e, r int) []int32 {
		var out []int32
		for _, f := range perm[cuts[e-1][r]:cuts[e-1][r+1]] {
			out = append(out, int32(f))
		}
		return out
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := collectives.NewLocal(ranks)
	stats := make([][]EpochStats, ranks)
	errs := make([]error, ranks)
	var mu sync.Mutex
	delivered := map[int]map[int32]int{1: {}, 2: {}} // epoch → file → deliveries
	var wg sync.WaitGroup
	for r, c := range comms {
		started := make(chan int, 2)
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Epochs, cfg.ClientTraces = dir, 0.25, 100_000, 2, true
		onEpoch := func(_ uint32, n int) { started <- n }
		opened := make(chan *Node, 1)
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer func() {
				if errs[r] != nil {
					defer func() { _ = recover() }()
					c.Abort(1)
				}
			}()
			n, err := Open(cfg.Config, cfg.Site, c)
			if errs[r] = err; err != nil {
				close(opened)
				return
			}
			defer n.Close()
			n.Announce(onEpoch, nil)
			opened <- n
			stats[r], errs[r] = n.Serve(ctx)
		}()
		go func() { // the rank's clients
			defer wg.Done()
			n := <-opened
			if n == nil {
				return
			}
			offer := func(e int, trace []int32) error {
				reply := make(chan error, 1)
				n.Traces() <- TraceOffer{Epoch: uint32(e), Files: trace, Reply: reply}
				select {
				case err := <-reply:
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			fail := func(format string, args ...any) {
				t.Errorf("rank %d: "+format, append([]any{r}, args...)...)
				cancel()
			}
			// Every rank puts file perm[0] first: the traces share it.
			bad := append([]int32{int32(perm[0])}, traceOf(1, r)...)
			if r == 0 {
				bad = traceOf(1, r)
			}
			if err := offer(2+earlyEpochs, traceOf(1, r)); err == nil || !strings.Contains(err.Error(), "at most 4 epochs ahead") {
				fail("a trace for epoch %d: %v, want a refusal", 2+earlyEpochs, err)
				return
			}
			if err := offer(1, bad); err == nil || !strings.Contains(err.Error(), "appears twice") {
				fail("overlapping traces: %v, want a refusal naming the file that appears twice", err)
				return
			}
			for e := 1; e <= 2; e++ {
				if e == 2 && r == 0 {
					if err := offer(1, traceOf(1, r)); err == nil || !strings.Contains(err.Error(), "already serves epoch 2") {
						fail("a trace for a finished epoch: %v, want a refusal", err)
						return
					}
				}
				want := traceOf(e, r)
				if err := offer(e, want); err != nil {
					fail("epoch %d: %v", e, err)
					return
				}
				if got := <-started; got != len(want) {
					fail("epoch %d: %d positions, want the %d offered", e, got, len(want))
					return
				}
				replies := make(chan Delivery, len(want))
				for sn := range want {
					n.ClientEvents() <- Ask{Epoch: uint32(e), Sn: int32(sn), Reply: replies}
				}
				for range want {
					d := <-replies
					if d.Err != nil {
						fail("epoch %d, position %d: %v", e, d.Sn, d.Err)
						return
					}
					mu.Lock()
					delivered[e][int32(d.File)]++
					mu.Unlock()
					d.Release()
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	for e := 1; e <= 2; e++ {
		st := stats[0][e-1]
		want := cuts[e-1][ranks]
		if !st.OK() || st.FilesExpected != int64(want) || st.DatasetFiles != files {
			t.Errorf("epoch %d: %+v, want %d positions answered", e, st, want)
		}
		if len(delivered[e]) != want {
			t.Errorf("epoch %d: %d distinct files delivered, want %d", e, len(delivered[e]), want)
		}
		for f, k := range delivered[e] {
			if k != 1 {
				t.Errorf("epoch %d: file %d delivered %d times", e, f, k)
			}
		}
	}
	if cov := stats[0][0]; cov.DeliveredCRCSum != cov.IndexCRCSum {
		t.Errorf("epoch 1 covers the dataset, but its checksums sum to %d, the index's to %d", cov.DeliveredCRCSum, cov.IndexCRCSum)
	}
}
