package sim

import (
	"runtime"

	"github.com/brandrt/brandrt/proto"
)

// window is the window policy: each epoch planned whole by
// proto.PlanWindow, each next epoch reading into the room the previous
// one's drain frees. A position answered by another rank's file counts as
// prefetched (and hit) when the plan pushes it ahead, else as a remote
// request. PlanBytes is what the planner allocated.
type window struct {
	in proto.WindowInput
}

func init() {
	register("window", "window", func(cfg Config, sizes [][]int64, m *proto.Mapping) (Policy, error) {
		in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: cfg.Seed, Lead: cfg.Lead, Ramp: cfg.Ramp, Window: cfg.Window}
		for r := range sizes {
			in.Budget = append(in.Budget, m.MemBytes(r))
			in.Remote = append(in.Remote, remoteBytes(cfg, m))
		}
		return &window{in: in}, nil
	})
}

func (w *window) Epoch(e int, traces [][]proto.FileID, _ func(done, total int64)) ([][]proto.FileID, Result, error) {
	w.in.Epoch, w.in.Traces = uint32(e), traces
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := proto.PlanWindow(w.in)
	runtime.ReadMemStats(&after)
	if err != nil {
		return nil, Result{}, err
	}
	res := w.result(p)
	res.PlanBytes = int64(after.TotalAlloc - before.TotalAlloc)
	w.in.After = p.Drains
	return p.Files, res, nil
}

func (w *window) result(p *proto.WindowPlan) Result {
	in := w.in
	res := Result{FillRate: 1}
	for r := range in.Mapping.Ranks() {
		for _, rd := range p.Reads[r] {
			res.ChunkReads++
			if rd.Issue < 0 {
				res.ReadsAhead++
			}
			res.BytesRead += in.ChunkBytes(rd.PC)
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
	return res
}
