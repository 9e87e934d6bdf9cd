package sim

import (
	"fmt"
	"time"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/prototest"
)

// runWindow plans each epoch with the window policy (proto.PlanWindow) on
// the traces the paper's variants get, and reports it like them: every
// chunk is read once; a position answered by another rank's file counts
// as prefetched (and hit) when the plan pushes it ahead, else as a remote
// request; Seconds is the planning time.
func runWindow(cfg Config, sizes [][]int64, emit func(Result)) error {
	m, err := prototest.Mapping(prototest.Options{K: cfg.ChunkFiles, Sizes: sizes, MemFraction: cfg.MemFraction})
	if err != nil {
		return err
	}
	in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: cfg.Seed, Lead: cfg.Lead, Ramp: cfg.Ramp, Window: cfg.Window}
	for r := range sizes {
		in.Budget = append(in.Budget, m.MemBytes(r))
		in.Remote = append(in.Remote, remoteBytes(cfg, m))
	}
	var prev orders
	for e := 1; e <= cfg.Epochs; e++ {
		in.Epoch = uint32(e)
		in.Traces = proto.Traces(m.Files(), m.Ranks(), cfg.Seed, uint32(e))
		start := time.Now()
		p, err := proto.PlanWindow(in)
		planned := time.Since(start)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", e, err)
		}
		if cfg.Order != nil {
			cfg.Order("window", e, p.Files)
		}
		res := windowResult(cfg, in, p, e)
		res.Seconds = planned.Seconds()
		cur := orders{p.Files, in.Traces}
		mix(&res, m, cfg.Batch, cur, prev)
		prev = cur
		emit(res)
	}
	return nil
}

func windowResult(cfg Config, in proto.WindowInput, p *proto.WindowPlan, e int) Result {
	m := in.Mapping
	res := Result{Variant: "window", Epoch: e, Ranks: cfg.Ranks, Files: cfg.Files, ChunkFiles: cfg.ChunkFiles,
		MemFraction: cfg.MemFraction, Window: cfg.Window, Inflight: cfg.Inflight, MemBytes: m.MemBytes(0),
		RemoteMemBytes: in.Remote[0], FillRate: 1}
	for r := range m.Ranks() {
		res.Bytes += m.ShardBytes(r)
		for _, rd := range p.Reads[r] {
			res.ChunkReads++
			lo, hi := m.PCFiles(rd.PC)
			for f := lo; f < hi; f++ {
				res.BytesRead += in.FileSize(f)
			}
		}
		res.PeakMemBytes = max(res.PeakMemBytes, p.PeakBytes[r])
		res.Waits += p.Waits[r]
		for sn, f := range p.Files[r] {
			res.Requests++
			res.Delivered++
			res.BytesDelivered += in.FileSize(f)
			switch push := p.PushAt[r][sn]; {
			case push < 0:
				res.LocalHits++
			case push == int32(sn):
				res.RemoteRequests++ // sent on demand
			default:
				res.Prefetched++
				res.PrefetchHits++
			}
		}
	}
	res.ReadAmplification = ratio(res.BytesRead, res.BytesDelivered)
	return res
}
