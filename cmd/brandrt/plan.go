package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/internal/human"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

func planCommand() *cli.Command {
	d := rt.DefaultConfig()
	return &cli.Command{
		Name:  "plan",
		Usage: "size a job before asking for it: per node count, the memory each rank takes and what it reads, sends and receives each epoch",
		Description: "For each number of nodes in --nodes, plan opens the packed dataset as that many\n" +
			"ranks would (one per node), each with --mem or, given --node-mem, the most\n" +
			"--mem its footprint leaves room for beside --leave (as serve --mem 100%cgroup\n" +
			"does in a cgroup of --node-mem), and plans the first --epochs epochs exactly as\n" +
			"serve's window policy will serve them. Per node it prints the budget and the\n" +
			"share of its shard it holds, the footprint (the memory the rank takes, as\n" +
			"serve's start-up line says it), the bytes read from storage and those sent to\n" +
			"and received from the other nodes, in epoch 1 and on average after, and the\n" +
			"smallest number of nodes whose memory holds the whole dataset.\n\n" +
			"Bytes are the plan's, which serve follows byte for byte (each read rounds up\n" +
			"to a page with O_DIRECT). Between nodes they are the files' bytes, or with\n" +
			"--cpu-costs what the links carry to move them: the costs file also holds the\n" +
			"bytes a link carries beyond a file's, per file and per byte (the frames, MPI's\n" +
			"and TCP/IP's headers, the acknowledgements), fitted with the CPU costs.\n\n" +
			"With rates (--storage-rate, --link-rate, --serve-rate, --train-rate,\n" +
			"--cpu-costs with --cores) it also prints the epoch's time as the slowest of\n" +
			"them allows, and which one bounds it; a rate not given bounds nothing.\n" +
			"--cpu-costs holds the CPU seconds a node spends per file and per byte, fitted\n" +
			"on the target machine from runs of the loader benchmark\n" +
			"(examples/bench/calibrate.py; README, \"Sizing a job before asking for it\").\n" +
			"With the fills it may hold too (how full the calibration's runs kept the\n" +
			"footprint's bounds), plan prints each rank's likely peak: what the kernel\n" +
			"will probably count, which depends on the training; the footprint is what\n" +
			"serve checks the cgroup against.\n\n" +
			"Example: brandrt plan --chunks /scratch/chunks --nodes 1,2,4,8 --node-mem 64GiB --storage-rate 1.2GB\n" +
			"         --link-rate 12GB --cpu-costs costs.json --cores 32",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "the packed dataset"},
			&cli.StringFlag{Name: "nodes", Value: "1,2,3,4", Usage: "the numbers of nodes to plan for, one rank each (each at most the dataset's shards)"},
			withDefault(&cli.GenericFlag{Name: "mem", Value: &memBudget{positive: true, allowCgroup: true}, Usage: "each rank's memory for its own files, as serve takes it: bytes (12GiB), a percentage of its shard (25%) or of what --node-mem leaves (90%cgroup)"}, "with --node-mem, the most its footprint leaves room for"),
			withDefault(&cli.GenericFlag{Name: "node-mem", Value: &memBudget{}, Usage: "each node's memory for the rank and its training processes (its memory cgroup's limit, Slurm's --mem): the rank's footprint must fit it beside --leave"}, "none: nothing is checked"),
			withDefault(&cli.GenericFlag{Name: "leave", Value: &memBudget{bytes: 0}, Usage: "what the rank leaves of --node-mem for the training processes, as serve --leave"}, "0"),
			withDefault(intFlag("readers", 0, 1, maxReaders, whyReaders, "the clients that read from each rank at once, as serve --readers"), "4 for each training process"),
			intFlag("nproc-per-node", 1, 1, maxProcsPerNode, "processes on one node", "training processes on each node, as serve --nproc-per-node"),
			&cli.GenericFlag{Name: "remote-mem", Value: &memBudget{bytes: -1}, Usage: "memory for files other ranks push ahead, in bytes, as serve --remote-mem (default a tenth of --mem)"},
			withDefault(&cli.GenericFlag{Name: "hand-mem", Value: &memBudget{bytes: -1}, Usage: "the most memory the files DataLoader workers hand on in place may take, in bytes, as serve --hand-mem (0 for a training whose workers decode the files: it hands none on)"}, "as serve's"),
			withDefault(&cli.GenericFlag{Name: "read-mem", Value: &memBudget{bytes: -1, positive: true}, Usage: "the most memory chunk reads in flight take at once, in bytes, as serve --read-mem"}, "as serve's"),
			intFlag("io-workers", int64(d.IOWorkers), 1, rt.MaxIOWorkers, whyWorkers, "chunk reads in flight at once, as serve --io-workers"),
			intFlag("ramp", int64(d.Ramp), 0, maxFiles, whyFiles, "as serve --ramp"),
			floatFlag("keep", d.Keep, 0, 1, false, "as serve --keep"),
			intFlag("batch", serveBatch, 0, maxFiles, whyFiles, "as serve --batch: rank 0's footprint counts what it holds to measure the order (0: nothing)"),
			intFlag("window", int64(d.Window), 0, maxFiles, whyFiles, "as serve --window"),
			seedFlag("seed", d.Seed, "as serve --seed"),
			intFlag("epochs", 3, 1, proto.MaxEpochs, whyEpochs, "epochs to plan"),
			&cli.GenericFlag{Name: "storage-rate", Value: &byteSize{intValue{lo: 1, hi: maxMemory, why: whyMemory}}, Usage: "bytes per second the storage gives all the nodes together (a NAS, a parallel file system; brandrt bench storage measures a disk)"},
			&cli.GenericFlag{Name: "link-rate", Value: &byteSize{intValue{lo: 1, hi: maxMemory, why: whyMemory}}, Usage: "bytes per second a node's link carries each way"},
			&cli.GenericFlag{Name: "serve-rate", Value: &count{intValue{lo: 1, hi: maxFiles, why: whyFiles}}, Usage: "files per second a rank serves from memory (its CPU: brandrt bench serve measures it)"},
			&cli.GenericFlag{Name: "train-rate", Value: &count{intValue{lo: 1, hi: maxFiles, why: whyFiles}}, Usage: "files per second a node's training consumes"},
			&cli.StringFlag{Name: "cpu-costs", Usage: "a JSON file of the CPU seconds a node spends per file and per byte (the rank's, the storage client's, the training processes' reading through it) and of the bytes its link carries beyond the files' it moves, measured on the target machine by examples/bench/calibrate.py; with --cores, the busiest node's CPU bounds the epoch's time (and with the memory fills it may hold, each rank's likely peak is printed)"},
			floatFlag("cores", 0, 0, 65536, true, "the cores of a node that the rank and the processes reading through it share, with --cpu-costs"),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per number of nodes instead of the table"},
		},
		Action: runPlan,
	}
}

// planned is one number of nodes planned: each rank's budget, shard and
// footprint (its total, and its terms as rt.Footprint names them), and
// each epoch's forecast.
type planned struct {
	Nodes      int            `json:"nodes"`
	MemBytes   []int64        `json:"mem_bytes"`
	ShardBytes []int64        `json:"shard_bytes"`
	Footprint  []int64        `json:"footprint_bytes"`
	Terms      []rt.Footprint `json:"footprint_terms"`
	Holds      bool           `json:"holds_dataset"`
	// HandCap is each rank's bound on the files its DataLoader workers
	// hand on in place (--hand-mem; -1: none, every file that can be is
	// handed on).
	HandCap []int64 `json:"hand_cap_bytes"`
	// Peak is what each rank likely takes at its peak (memFills.likelyPeak):
	// with costs that have the fills only.
	Peak   []int64        `json:"peak_bytes,omitempty"`
	Epochs []plannedEpoch `json:"epochs"`
}

// plannedEpoch is one epoch's forecast; with costs, what each rank's
// link carries in and out (the files' bytes and what the costs add to
// move them) and the CPU of its node; its time where rates were given:
// Seconds, and what bounds it.
type plannedEpoch struct {
	Epoch   int               `json:"epoch"`
	Ranks   []rt.RankForecast `json:"ranks"`
	LinkIn  []int64           `json:"link_in_bytes,omitempty"`
	LinkOut []int64           `json:"link_out_bytes,omitempty"`
	CPU     []float64         `json:"cpu_seconds,omitempty"`
	Seconds float64           `json:"seconds,omitempty"`
	Bound   string            `json:"bound,omitempty"`
}

func runPlan(c *cli.Context) error {
	if err := noArgs(c, ""); err != nil {
		return err
	}
	counts, err := nodeCounts(c.String("nodes"))
	if err != nil {
		return badUsage(c, err)
	}
	cfg, site, err := planConfig(c)
	if err != nil {
		return badUsage(c, err)
	}
	model := planRates(c)
	if model.cpu, err = planCosts(c); err != nil {
		return badUsage(c, err)
	}
	var all []planned
	for _, n := range counts {
		p, err := planNodes(cfg, site, n, c.Int("epochs"))
		if err != nil {
			return fmt.Errorf("%s: %w", human.Plural(int64(n), "node"), err)
		}
		for i := range p.Epochs {
			e := &p.Epochs[i]
			e.LinkIn, e.LinkOut = model.links(e.Ranks)
			e.CPU, e.Seconds, e.Bound = model.epoch(p, *e)
		}
		p.Peak = likelyPeaks(model.cpu, p)
		all = append(all, p)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		for _, p := range all {
			if err := enc.Encode(p); err != nil {
				return err
			}
		}
		return nil
	}
	printPlan(c.App.Writer, all, model, cfg.Mem.Shard > 0)
	return nil
}

// planCosts reads --cpu-costs, which needs --cores.
func planCosts(c *cli.Context) (*cpuCosts, error) {
	switch {
	case !c.IsSet("cpu-costs") && c.IsSet("cores"):
		return nil, errors.New("--cores goes with --cpu-costs: the node's CPU seconds that its cores share")
	case !c.IsSet("cpu-costs"):
		return nil, nil
	case !c.IsSet("cores"):
		return nil, errors.New("--cpu-costs needs --cores: the cores of a node that the rank and its training processes share")
	}
	return readCPUCosts(c.String("cpu-costs"))
}

// nodeCounts parses a list of node counts: "1,2,4".
func nodeCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("--nodes %q: want numbers of nodes from 1 to 4096, separated by commas", s)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// arenaPlaces is the memory plan's ranks are opened with: it places
// their files as the memory serve shares with its training processes
// does (shm.Placed: slots, and pages in size classes), so that their
// footprint is the one serve's start-up line says. plan reads nothing
// into it.
type arenaPlaces struct{}

func (arenaPlaces) Placed(n int64) int64 { return shm.Placed(n) }

func (arenaPlaces) Alloc(int64) ([]byte, error) {
	return nil, errors.New("brandrt plan reads no chunks")
}

func (arenaPlaces) Free([]byte) {}

// planConfig is the configuration and site of each rank planned.
func planConfig(c *cli.Context) (rt.Config, rt.Site, error) {
	cfg := rt.DefaultConfig()
	cfg.Chunks, cfg.Epochs, cfg.Fresh = c.String("chunks"), c.Int("epochs"), true
	cfg.StorageWait = 0 // a dataset plan cannot read is said at once
	cfg.Ramp, cfg.Keep, cfg.Window, cfg.Seed = c.Int("ramp"), c.Float64("keep"), c.Int("window"), c.Uint64("seed")
	cfg.Procs, cfg.Readers, cfg.MixBatch = c.Int("nproc-per-node"), c.Int("readers"), c.Int("batch")
	cfg.IOWorkers = c.Int("io-workers")
	site := rt.Site{Log: io.Discard, Memory: arenaPlaces{}}
	node := c.Generic("node-mem").(*memBudget)
	if node.fraction > 0 {
		return cfg, site, errors.New("--node-mem takes bytes (e.g. 64GiB), not a percentage")
	}
	site.MemLimitBytes, site.MemLimitFrom = node.bytes, "--node-mem"
	switch mem := c.Generic("mem").(*memBudget); {
	case c.IsSet("mem") && mem.cgroup && node.bytes == 0:
		return cfg, site, errors.New("--mem " + mem.String() + " is a share of what --node-mem leaves: give --node-mem")
	case c.IsSet("mem"):
		cfg.Mem = mem.budget()
	case node.bytes > 0:
		cfg.Mem = rt.Budget{Cgroup: 1}
	default:
		return cfg, site, errors.New("give --mem (each rank's memory for its files) or --node-mem (each node's memory, of which the rank takes the most it can)")
	}
	for _, f := range []struct {
		name string
		into *int64
	}{{"leave", &cfg.MemLeaveBytes}, {"remote-mem", &cfg.RemoteMemBytes}, {"hand-mem", &cfg.HandMemBytes}, {"read-mem", &cfg.ReadMemBytes}} {
		if err := bytesOnly(c, f.name, "1GiB", f.into); err != nil {
			return cfg, site, err
		}
	}
	return cfg, site, cfg.Validate()
}

// planNodes opens the dataset as n ranks in this process would, and
// plans their first epochs.
func planNodes(cfg rt.Config, site rt.Site, n, epochs int) (planned, error) {
	nodes, err := openRanks(cfg, site, n)
	if err != nil {
		return planned{}, err
	}
	defer func() {
		for _, nd := range nodes {
			nd.Close()
		}
	}()
	p := planned{Nodes: n, Holds: true}
	extents := make([][]int64, n)
	for r, nd := range nodes {
		m := nd.Mapping()
		p.MemBytes = append(p.MemBytes, m.MemBytes(r))
		p.ShardBytes = append(p.ShardBytes, m.ShardBytes(r))
		p.Footprint = append(p.Footprint, nd.Footprint().Total())
		p.Terms = append(p.Terms, nd.Footprint())
		p.Holds = p.Holds && m.MemBytes(r) >= m.ShardBytes(r)
		hc, bounded := nd.HandBound()
		if !bounded {
			hc = -1
		}
		p.HandCap = append(p.HandCap, hc)
		extents[r] = nd.ChunkBytes()
	}
	fc, err := nodes[0].Forecast(epochs, extents)
	if err != nil {
		return planned{}, err
	}
	for _, f := range fc {
		p.Epochs = append(p.Epochs, plannedEpoch{Epoch: f.Epoch, Ranks: f.Ranks})
	}
	return p, nil
}

// openRanks opens the dataset as the n ranks of a job, in this process.
func openRanks(cfg rt.Config, site rt.Site, n int) ([]*rt.Node, error) {
	nodes, errs := make([]*rt.Node, n), make([]error, n)
	var wg sync.WaitGroup
	for r, comm := range collectives.NewLocal(n) {
		wg.Go(func() { nodes[r], errs[r] = rt.Open(cfg, site, comm) })
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
		return nil, err
	}
	return nodes, nil
}

// firstError returns the first of errs that is not nil: the ranks'
// errors are the same when every rank failed alike.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
