package rt

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// TestLateStartsAnswered resumes a job of two ranks at epoch 2 of 3 and
// offers each rank its start a second time after the rank took it, as a
// second Client of a training process does: the same start is accepted,
// another refused, saying where the job resumed; neither waits. The rest
// of epoch 2 and the whole of epoch 3 are then read: no file twice, and
// epoch 3 whole.
func TestLateStartsAnswered(t *testing.T) {
	const files, ranks = 400, 2
	dir := packed(t, files, ranks, 8)
	at := []int32{70, 131} // each rank's resume position in epoch 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	delivered := map[uint32]map[proto.FileID]int{2: {}, 3: {}}
	stats := make([][]EpochStats, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r, c := range collectives.NewLocal(ranks) {
		started := make(chan int, 3)
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.RemoteMemBytes, cfg.Epochs, cfg.Resume = dir, 0.25, 100_000, 3, true
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
		go func() { // the rank's training process
			defer wg.Done()
			n := <-opened
			if n == nil {
				return
			}
			fail := func(format string, args ...any) {
				t.Errorf("rank %d: "+format, append([]any{r}, args...)...)
				cancel()
			}
			offer := func(e uint32, pos int32) error {
				reply := make(chan error, 1)
				n.Starts() <- StartOffer{Place: Place{Epoch: e, Position: pos, Ranks: ranks, Seed: cfg.Seed}, Reply: reply}
				select {
				case err := <-reply:
					return err
				case <-time.After(10 * time.Second):
					return errors.New("no answer within 10 s")
				}
			}
			if err := offer(2, at[r]); err != nil {
				fail("the first start: %v", err)
				return
			}
			length := <-started
			if err := offer(2, at[r]); err != nil {
				fail("the same start again: %v, want it accepted", err)
				return
			}
			if err := offer(3, 0); err == nil || !strings.Contains(err.Error(), "already resumed from another state, at epoch 2, position") {
				fail("another start: %v, want a refusal saying where the job resumed", err)
				return
			}
			for e := uint32(2); e <= 3; e++ {
				from := int(at[r])
				if e == 3 {
					length, from = <-started, 0
				}
				replies := make(chan Delivery, length)
				for sn := from; sn < length; sn++ {
					n.ClientEvents() <- Ask{Epoch: e, Sn: int32(sn), Reply: replies}
				}
				for range length - from {
					d := <-replies
					if d.Err != nil {
						fail("epoch %d, position %d: %v", e, d.Sn, d.Err)
						return
					}
					mu.Lock()
					delivered[e][d.File]++
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
	if want := files - int(at[0]+at[1]); len(delivered[2]) != want {
		t.Errorf("epoch 2: %d distinct files after the restart, want %d", len(delivered[2]), want)
	}
	if len(delivered[3]) != files {
		t.Errorf("epoch 3: %d distinct files, want %d", len(delivered[3]), files)
	}
	for e, got := range delivered {
		for f, k := range got {
			if k != 1 {
				t.Errorf("epoch %d: file %d delivered %d times", e, f, k)
			}
		}
	}
	if len(stats[0]) != 2 || !stats[0][0].OK() || !stats[0][1].OK() {
		t.Errorf("statistics %+v, want epochs 2 and 3 checked", stats[0])
	}
}
