package sim

import (
	"fmt"
	"runtime"
	"slices"
	"time"

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
		in := proto.WindowInput{Mapping: m, Sizes: sizes, Seed: cfg.Seed, Lead: cfg.Lead, Ramp: cfg.Ramp, Window: cfg.Window, Keep: cfg.Keep}
		for r := range sizes {
			in.Budget = append(in.Budget, m.MemBytes(r))
			in.Remote = append(in.Remote, int64(cfg.RemoteFraction*float64(m.MemBytes(r)))) // as serve's --remote-mem default
		}
		return &window{in: in}, nil
	})
}

func (w *window) Epoch(e int, traces [][]proto.FileID, _ func(done, total int64)) ([][]proto.FileID, Result, error) {
	w.in.Epoch, w.in.Traces = uint32(e), traces
	homeSeconds, homeBytes, err := cost(func() error { _, err := proto.PlanHome(w.in, 0); return err })
	if err != nil {
		return nil, Result{}, err
	}
	var p *proto.WindowPlan
	_, planBytes, err := cost(func() (err error) { p, err = proto.PlanWindow(w.in); return err })
	if err != nil {
		return nil, Result{}, err
	}
	res := w.result(p)
	res.PlanBytes = planBytes
	// rank 0's positions put together from what the homes tell it (here
	// taken from the whole plan, where serve's ranks send them), and the
	// pushes it tells them of
	told := make([][]proto.Answer, w.in.Mapping.Ranks())
	for sn, f := range p.Files[0] {
		h := w.in.Mapping.Home(f)
		told[h] = append(told[h], proto.Answer{Rank: 0, Sn: int32(sn), File: f, At: p.At[0][sn], Size: w.in.FileSize(f)})
	}
	shareSeconds, shareBytes, err := cost(func() error {
		share, err := proto.PlanShare(w.in, 0, told)
		if err == nil {
			share.AheadBy(w.in.Mapping)
		}
		return err
	})
	if err != nil {
		return nil, Result{}, err
	}
	res.HomeSeconds, res.HomeBytes = homeSeconds+shareSeconds, homeBytes+shareBytes
	w.in.After, w.in.Resident = p.Drains, p.Resident
	return p.Files, res, nil
}

// cost runs f and returns the wall time it took and the bytes it
// allocated.
func cost(f func() error) (float64, int64, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := f()
	secs := time.Since(start).Seconds()
	runtime.ReadMemStats(&after)
	return secs, int64(after.TotalAlloc - before.TotalAlloc), err
}

func (w *window) result(p *proto.WindowPlan) Result {
	in := w.in
	res := Result{FillRate: 1}
	for r := range in.Mapping.Ranks() {
		for _, rd := range p.Reads[r] {
			if rd.Resident {
				res.ResidentReads++
				continue
			}
			res.ChunkReads++
			if rd.Issue < 0 {
				res.ReadsAhead++
			}
			res.ChunkBytes += in.ChunkBytes(rd.PC)
		}
		res.PeakMemBytes = max(res.PeakMemBytes, p.PeakBytes[r])
		res.WaitSteps += p.WaitSteps[r]
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

// resumer is a policy that can take up an epoch in its middle.
type resumer interface {
	// Resume serves the rest of epoch r.Epoch and returns every rank's
	// order (proto.NoFile before its start) and its traces.
	Resume(r Resume) ([][]proto.FileID, [][]proto.FileID, Result, error)
}

var _ resumer = (*window)(nil)

func (w *window) Resume(r Resume) ([][]proto.FileID, [][]proto.FileID, Result, error) {
	m := w.in.Mapping
	var p *proto.WindowPlan
	var err error
	if r.Delivered != nil {
		p, err = proto.RestPlan(w.in, r.Epoch, r.Delivered)
		w.in.Traces = proto.RestTraces(m.Files(), m.Ranks(), w.in.Seed, r.Epoch, r.Delivered)
	} else {
		p, err = proto.FreshPlan(w.in, r.Epoch)
		w.in.Traces = proto.Traces(m.Files(), m.Ranks(), w.in.Seed, r.Epoch)
	}
	if err != nil {
		return nil, nil, Result{}, err
	}
	w.in.Epoch, w.in.After, w.in.Resident = r.Epoch, p.Drains, p.Resident
	res := w.result(p)
	files := make([][]proto.FileID, len(p.Files))
	for h, fs := range p.Files {
		files[h] = slices.Clone(fs)
		if r.Start != nil {
			if int(r.Start[h]) > len(fs) {
				return nil, nil, Result{}, fmt.Errorf("rank %d resumes at position %d of its %d", h, r.Start[h], len(fs))
			}
			for sn := range r.Start[h] {
				files[h][sn] = proto.NoFile
			}
		}
	}
	return files, w.in.Traces, res, nil
}
