package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/internal/human"
	"github.com/brandrt/brandrt/rt"
)

// timeModel holds the rates of the epoch's time model: what the storage gives all the nodes
// together and a node's link each way, in bytes per second; what a rank
// serves and a node's training consumes, in files per second. 0: not
// given, bounds nothing. With cpu, the CPU a node spends on its epoch
// over its cores bounds it too.
type timeModel struct {
	storage, link, serve, train float64
	cpu                         *cpuCosts
	cores                       float64
}

func planRates(c *cli.Context) timeModel {
	get := func(name string) float64 {
		if !c.IsSet(name) {
			return 0
		}
		switch v := c.Generic(name).(type) {
		case *byteSize:
			return float64(v.n)
		case *count:
			return float64(v.n)
		}
		return 0
	}
	return timeModel{storage: get("storage-rate"), link: get("link-rate"), serve: get("serve-rate"), train: get("train-rate"),
		cores: c.Float64("cores")}
}

// given reports whether any rate was given.
func (r timeModel) given() bool {
	return r.storage > 0 || r.link > 0 || r.serve > 0 || r.train > 0 || r.cpu != nil
}

// usable is the cores' seconds per second the node's CPU bound takes:
// --cores, as busy as the calibration kept them.
func (r timeModel) usable() float64 {
	if r.cpu == nil {
		return 0
	}
	return r.cores * r.cpu.Busy
}

// cpuSeconds returns the CPU each rank's node spends on its share of
// epoch e of p; nil without costs.
func (r timeModel) cpuSeconds(p planned, e plannedEpoch) []float64 {
	if r.cpu == nil {
		return nil
	}
	out := make([]float64, len(e.Ranks))
	for i, rf := range e.Ranks {
		out[i] = r.cpu.seconds(rf, e.Epoch == 1, min(p.MemBytes[i], p.ShardBytes[i]), p.HandCap[i])
	}
	return out
}

// links returns what each rank's link carries in and out to move the
// files of ranks' forecasts, with the costs' additions; nil without
// costs.
func (r timeModel) links(ranks []rt.RankForecast) (in, out []int64) {
	if r.cpu == nil {
		return nil, nil
	}
	for _, rf := range ranks {
		in = append(in, r.cpu.linkBytes(rf.ReceivedFiles, rf.ReceivedBytes))
		out = append(out, r.cpu.linkBytes(rf.SentFiles, rf.SentBytes))
	}
	return in, out
}

// moved is what rank rf's link carries the most of, in or out: the
// files' bytes, and what the costs add to move them.
func (r timeModel) moved(rf rt.RankForecast) int64 {
	return max(r.cpu.linkBytes(rf.ReceivedFiles, rf.ReceivedBytes), r.cpu.linkBytes(rf.SentFiles, rf.SentBytes))
}

// epoch returns, for epoch e of p, the CPU seconds of each rank's node
// (nil without costs), how long the epoch takes at these rates, and what
// bounds it: the storage (every rank's reads share it), the network (the
// busiest link, each way, with what the costs add to the files' bytes),
// the rank's CPU (at --serve-rate), the training (the node with the most
// positions) or the busiest node's CPU over its cores. The first epoch
// adds the job's start (with costs). 0 and "" with no rate.
func (r timeModel) epoch(p planned, e plannedEpoch) ([]float64, float64, string) {
	cpu := r.cpuSeconds(p, e)
	secs, bound := r.bound(e.Ranks, cpu)
	if e.Epoch == 1 && r.cpu != nil {
		secs += r.cpu.Start
	}
	return cpu, secs, bound
}

// bound returns how long an epoch of ranks' forecasts, whose nodes spend
// cpu, takes at these rates, and which one bounds it.
func (r timeModel) bound(ranks []rt.RankForecast, cpu []float64) (float64, string) {
	var read, moved, files int64
	for _, rf := range ranks {
		read += rf.ReadBytes
		moved = max(moved, r.moved(rf))
		files = max(files, rf.Files)
	}
	busiest := 0.0
	for _, s := range cpu {
		busiest = max(busiest, s)
	}
	secs, bound := 0.0, ""
	for _, t := range []struct {
		what       string
		amount, at float64
	}{{"storage", float64(read), r.storage}, {"network", float64(moved), r.link}, {"the rank's CPU", float64(files), r.serve},
		{boundTraining, float64(files), r.train}, {"the node's CPU", busiest, r.usable()}} {
		if t.at > 0 && t.amount/t.at > secs {
			secs, bound = t.amount/t.at, t.what
		}
	}
	return secs, bound
}

// boundTraining is the bound of an epoch the training's rate sets.
const boundTraining = "the training"

// perNode is one figure of an epoch's busiest node.
type perNode func(e plannedEpoch) float64

func maxRank(get func(rt.RankForecast) int64) perNode {
	return func(e plannedEpoch) float64 {
		var m int64
		for _, rf := range e.Ranks {
			m = max(m, get(rf))
		}
		return float64(m)
	}
}

// firstAndAfter returns f of epoch 1 and its mean over the epochs after.
func firstAndAfter(p planned, f perNode) (float64, float64) {
	first, after := f(p.Epochs[0]), 0.0
	for _, e := range p.Epochs[1:] {
		after += f(e)
	}
	if n := len(p.Epochs) - 1; n > 0 {
		after /= float64(n)
	}
	return first, after
}

// printPlan writes the table of every number of nodes planned, and the
// smallest whose memory holds the dataset.
func printPlan(w io.Writer, all []planned, r timeModel, share bool) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	peaks := all[0].Peak != nil
	head := "nodes\t--mem per node\tof its shard\tfootprint\t"
	if peaks {
		head += "likely peak\t"
	}
	head += "storage read per node, epoch 1 / after\tnetwork per node (in or out), epoch 1 / after\t"
	if r.given() {
		head += "epoch time, 1 / after\tbound by (after)\t"
	}
	fmt.Fprintln(tw, head)
	for _, p := range all {
		memMin, shareMin, fpMax, peakMax := p.MemBytes[0], 1.0, int64(0), int64(0)
		for i := range p.MemBytes {
			memMin, fpMax = min(memMin, p.MemBytes[i]), max(fpMax, p.Footprint[i])
			shareMin = min(shareMin, float64(p.MemBytes[i])/float64(max(p.ShardBytes[i], 1)))
			if peaks {
				peakMax = max(peakMax, p.Peak[i])
			}
		}
		r1, r2 := firstAndAfter(p, maxRank(func(rf rt.RankForecast) int64 { return rf.ReadBytes }))
		n1, n2 := firstAndAfter(p, maxRank(r.moved))
		line := fmt.Sprintf("%d\t%s\t%.0f %%\t%s\t", p.Nodes, ibytes(memMin), 100*shareMin, ibytes(fpMax))
		if peaks {
			line += ibytes(peakMax) + "\t"
		}
		line += fmt.Sprintf("%s / %s\t%s / %s\t", ibytes(int64(r1)), ibytes(int64(r2)), ibytes(int64(n1)), ibytes(int64(n2)))
		if r.given() {
			t1, t2 := firstAndAfter(p, func(e plannedEpoch) float64 { return e.Seconds })
			line += fmt.Sprintf("%s / %s\t%s\t", human.Seconds(t1), human.Seconds(t2), p.Epochs[len(p.Epochs)-1].Bound)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if peaks {
		fmt.Fprintln(w, "likely peak: the largest of the ranks' likely peaks, what the kernel will probably count, with their bounds on files in flight as full as the calibration's runs kept them (--cpu-costs); the footprint is the most a rank may take, what its cgroup must allow")
	}
	fmt.Fprintln(w, holdsLine(all, share))
}

// holdsLine says the smallest number of nodes planned whose memory holds
// the dataset, or about how many would; share says that --mem is a share
// of each shard, which no number of nodes changes.
func holdsLine(all []planned, share bool) string {
	for _, p := range all {
		if p.Holds {
			return fmt.Sprintf("the nodes' memory holds the whole dataset from %s on: from epoch 2 they read nothing from storage", human.Plural(int64(p.Nodes), "node"))
		}
	}
	if share {
		return "--mem as a share of each shard holds that share on any number of nodes: give it in bytes, or give --node-mem, to find how many nodes hold the whole dataset"
	}
	last := all[len(all)-1]
	var shards, mem int64
	for i := range last.MemBytes {
		shards, mem = shards+last.ShardBytes[i], mem+last.MemBytes[i]
	}
	need := (shards*int64(last.Nodes) + mem - 1) / max(mem, 1)
	return fmt.Sprintf("none of these holds the whole dataset (%d nodes hold %.0f %% of it); about %d nodes of this memory would (plan them to be sure: the footprint grows with the shard)",
		last.Nodes, 100*float64(mem)/float64(shards), need)
}
