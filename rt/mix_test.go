package rt

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// TestOrderMeasuredFromShares: with a batch (--batch), rank 0 measures
// each epoch's order from what every rank delivered, gathered at the
// epoch's end, where no rank plans the whole epoch; its figures are those
// of the whole plan (proto.FreshPlan, what rank 0 planned before for the
// measure) against the seed's traces, the pairs that meet again from the
// epoch before included. The other ranks measure nothing.
func TestOrderMeasuredFromShares(t *testing.T) {
	const ranks, epochs, batch = 3, 3, 16
	dir := packed(t, 700, 3, 8)
	cfg := defaultJob()
	cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.Consume, cfg.MixBatch = dir, 0.25, epochs, 2, batch
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats, errs := make([][]EpochStats, ranks), make([]error, ranks)
	var in proto.WindowInput
	var wg sync.WaitGroup
	for r, c := range collectives.NewLocal(ranks) {
		wg.Go(func() {
			n, err := Open(cfg.Config, cfg.Site, c)
			if err != nil {
				errs[r] = err
				return
			}
			defer n.Close()
			if r == 0 {
				in = n.data.window.Input()
			}
			stats[r], errs[r] = n.Serve(ctx)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	var prev proto.Orders
	for e := range uint32(epochs) {
		p, err := proto.FreshPlan(in, e+1)
		if err != nil {
			t.Fatal(err)
		}
		cur := proto.Orders{Files: p.Files, Traces: proto.Traces(in.Mapping.Files(), ranks, in.Seed, e+1)}
		want := proto.MeasureMix(in.Mapping, batch, nil, cur, prev)
		want.Batch = batch
		prev = cur
		got := stats[0][e].Order
		if got == nil || !reflect.DeepEqual(*got, want) || e > 0 && got.PairsAgain == nil {
			t.Errorf("epoch %d: rank 0 measured %+v, want the whole plan's %+v", e+1, got, want)
		}
		for r := 1; r < ranks; r++ {
			if stats[r][e].Order != nil {
				t.Errorf("epoch %d: rank %d measured the order too", e+1, r)
			}
		}
	}
}

// TestSettingsDiffer: ranks given different settings that they must share
// (here one measures the order and the other does not, so that only one
// would gather it as each epoch ends) are refused at Open, every rank
// naming its own, instead of one waiting for ever.
func TestSettingsDiffer(t *testing.T) {
	dir := packed(t, 200, 2, 8)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range collectives.NewLocal(2) {
		wg.Go(func() {
			cfg := defaultJob()
			cfg.Chunks, cfg.Mem.Shard, cfg.Consume, cfg.MixBatch = dir, 0.25, 2, 64*(1-r)
			n, err := Open(cfg.Config, cfg.Site, c)
			if err == nil {
				n.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		want := fmt.Sprintf("the order measured %v (--batch)", r == 0)
		if err == nil || !strings.Contains(err.Error(), "the ranks were not all given the same settings") || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want the settings refused, naming %q", r, err, want)
		}
	}
}
