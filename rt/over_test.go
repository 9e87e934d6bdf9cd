package rt

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// TestTrainingOver: a job of up to 50 epochs ends when the training
// beside every rank is over. Rank 0's training ends after epoch 1; rank
// 1's reads epoch 2 whole (rank 0 still serving its files), then ends:
// Serve returns on both ranks after two epochs, the second with rank 1's
// positions alone, and reports no third.
func TestTrainingOver(t *testing.T) {
	const files, ranks = 400, 2
	dir := packed(t, files, ranks, 8)
	for _, policy := range []Policy{PolicyWindow, PolicyPaper} {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stats := make([][]EpochStats, ranks)
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for r, c := range collectives.NewLocal(ranks) {
				started := make(chan int, 64)
				cfg := defaultJob()
				cfg.Chunks, cfg.Mem.Shard, cfg.Policy, cfg.Epochs = dir, 0.25, policy, 50
				cfg.MixBatch = 16 // rank 0 measures the whole epoch's order, not the one ended early
				cfg.Fresh = true  // the training waits for the epoch to start
				onEpoch := func(_ uint32, n int) { started <- n }
				opened := make(chan *Node, 1)
				wg.Add(2)
				go func() { // Open and Serve run on every rank at once
					defer wg.Done()
					n, err := Open(cfg.Config, cfg.Site, c)
					if errs[r] = err; err != nil {
						close(opened)
						cancel()
						return
					}
					defer n.Close()
					n.Announce(onEpoch, nil)
					opened <- n
					if stats[r], errs[r] = n.Serve(ctx); errs[r] != nil {
						cancel()
					}
				}()
				go func() { // the rank's training
					defer wg.Done()
					n := <-opened
					if n == nil {
						return
					}
					last := 1 + r // rank 0 trains one epoch, rank 1 two
					for e := 1; e <= last; e++ {
						positions := <-started
						replies := make(chan Delivery, positions)
						for sn := range positions {
							n.ClientEvents() <- Ask{Epoch: uint32(e), Sn: int32(sn), Reply: replies}
						}
						for range positions {
							d := <-replies
							if d.Err != nil {
								t.Errorf("rank %d, epoch %d, position %d: %v", r, e, d.Sn, d.Err)
							}
							d.Release()
						}
					}
					n.TrainingOver()
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if len(stats[0]) != 2 || len(stats[1]) != 2 {
				t.Fatalf("epochs served: %d and %d, want 2 on each rank", len(stats[0]), len(stats[1]))
			}
			one, two := stats[0][0], stats[0][1]
			if !one.OK() || one.FilesDelivered != files || one.EndedEarly || one.RanksTrainingOver == 2 { // rank 0 may be over by the end
				t.Errorf("epoch 1: %+v", one)
			}
			// rank 1's training may end before or after the epoch's
			// statistics are taken (its last reply ends the epoch)
			if two.FilesDelivered == 0 || two.FilesDelivered >= files || !two.EndedEarly || two.RanksTrainingOver < 1 || two.DuplicateDeliveries != 0 {
				t.Errorf("epoch 2: %d files delivered (rank 1's share of %d), ended early %v, %d ranks over: %+v",
					two.FilesDelivered, files, two.EndedEarly, two.RanksTrainingOver, two)
			}
			if (one.Order != nil) != (policy == PolicyWindow) || two.Order != nil {
				t.Errorf("the order measured: %+v in epoch 1 (want figures with the window policy), %+v in epoch 2, which ended early (want none)", one.Order, two.Order)
			}
		})
	}
}

// TestStaleEnd: an End for an epoch already over (a slow client's) is
// ignored, and one for a later epoch waits for it: the job serves both
// epochs whole. (The loop once answered a stale End as it answers a stale
// Ask, on its nil reply channel, and waited there forever.)
func TestStaleEnd(t *testing.T) {
	const files = 200
	dir := packed(t, files, 1, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.Policy, cfg.Epochs, cfg.Fresh = dir, 0.25, "window", 2, true // the training waits for the epoch to start
	started := make(chan int, 4)
	onEpoch := func(_ uint32, n int) { started <- n }
	n, err := Open(cfg.Config, cfg.Site, collectives.NewLocal(1)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.Announce(onEpoch, nil)
	done := make(chan error, 1)
	var stats []EpochStats
	go func() {
		var err error
		stats, err = n.Serve(ctx)
		done <- err
	}()
	for e := uint32(1); e <= 2; e++ {
		positions := <-started
		if e == 2 {
			n.ClientEvents() <- End{Epoch: 1} // over already
			n.ClientEvents() <- End{Epoch: 3} // past the job's last
		}
		replies := make(chan Delivery, positions)
		for sn := range positions {
			n.ClientEvents() <- Ask{Epoch: e, Sn: int32(sn), Reply: replies}
		}
		for range positions {
			select {
			case d := <-replies:
				if d.Err != nil {
					t.Fatalf("epoch %d, position %d: %v", e, d.Sn, d.Err)
				}
				d.Release()
			case <-time.After(30 * time.Second):
				t.Fatalf("epoch %d: no delivery for 30 s", e)
			}
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve still running 30 s after the last delivery")
	}
	if len(stats) != 2 || !stats[0].OK() || !stats[1].OK() || stats[1].EndedEarly {
		t.Fatalf("%d epochs: %+v", len(stats), stats)
	}
}
