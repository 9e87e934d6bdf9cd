package prototest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/brandrt/brandrt/internal/script"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// Env interprets datadriven commands over a Cluster:
//
//	init files=12,12 k=4 [mem=0.25] [mem-bytes=4,4] [remote=16] [window=4]
//	     [variant=full] [seed=1] [size=1 | size-seed=5] [codec]
//	     [policy=paper|window] [lead=0] [ramp=0] [epochs=0] [damaged=3,9]
//	                                size-seed draws sizes of 1-8 bytes;
//	                                the window policy reads ahead into
//	                                the next epoch up to epochs, on the
//	                                traces epoch draws by default; every
//	                                read of a damaged file's chunk names
//	                                it (Options.Damaged)
//	epoch [e=1] [trace-seed=7] [ranks=0,1]
//	                                traces drawn at random, or given as
//	                                input lines "rank: file file …";
//	                                only the listed ranks start now
//	epoch e=2 start=3,0             every rank resumes epoch 2 (the window
//	                                policy), rank 0's clients at position 3
//	join rank=1                     rank 1 starts the current epoch
//	done rank=0                     rank 0's clients ask for nothing more
//	                                this epoch (ClientsDone; it tells the
//	                                others, MsgDone)
//	plan [rank=0]                   the window plan's files and reads
//	request rank=0 sn=3[,4,…]       client requests
//	deliver [from=1] [to=0] [type=push] [idx=2] [n=1]
//	                                deliver messages in flight, oldest first
//	complete [rank=0] [pc=3] [n=1] [fail]   finish reads, oldest first
//	stabilize                       both until nothing is in flight
//	net                             list messages and reads in flight
//	state [rank=0]                  dump rank state
//	stats [rank=0]                  counters
//	check                           invariants so far
//	check-answered                  every request so far was answered
//	check-complete                  exactly once, every position answered
//
// Each command prints the effects it caused, one per line. deliver and
// complete act only on what was in flight when they start.
type Env struct {
	C   *inproc.Cluster
	out strings.Builder
}

// Handle runs one command and returns its output.
func (e *Env) Handle(cmd *script.Cmd) (out string) {
	e.out.Reset()
	defer func() {
		switch p := recover().(type) {
		case nil:
		case badArg:
			out = e.out.String() + "error: " + string(p) + "\n"
		default:
			panic(p)
		}
	}()
	if err := checkArgs(cmd); err != nil {
		return "error: " + err.Error() + "\n"
	}
	if err := e.handle(cmd); err != nil {
		fmt.Fprintf(&e.out, "error: %v\n", err)
	}
	return e.out.String()
}

// badArg is raised by argInt for an argument that is not a number.
type badArg string

var knownArgs = map[string]string{
	"init":  "files k mem mem-bytes remote window variant seed size size-seed codec policy lead ramp epochs damaged",
	"epoch": "e trace-seed ranks start", "join": "rank", "done": "rank", "plan": "rank",
	"request": "rank sn", "deliver": "from to type idx n", "complete": "rank pc n fail",
	"state": "rank", "stats": "rank",
}

func checkArgs(cmd *script.Cmd) error {
	known := strings.Fields(knownArgs[cmd.Name])
	for _, k := range cmd.Order {
		if !slices.Contains(known, k) {
			return fmt.Errorf("%s: unknown argument %q", cmd.Name, k)
		}
	}
	return nil
}

func (e *Env) line(s string) { e.out.WriteString(s + "\n") }

func (e *Env) handle(cmd *script.Cmd) error {
	if cmd.Name != "init" && e.C == nil {
		return fmt.Errorf("%s before init", cmd.Name)
	}
	switch cmd.Name {
	case "init":
		return e.init(cmd)
	case "epoch":
		return e.epoch(cmd)
	case "join":
		return e.C.JoinEpoch(argInt(cmd, "rank", 0))
	case "done":
		return e.C.Done(argInt(cmd, "rank", 0))
	case "plan":
		return e.plan(cmd)
	case "request":
		return e.request(cmd)
	case "deliver":
		return e.deliver(cmd)
	case "complete":
		return e.complete(cmd)
	case "stabilize":
		return e.C.Stabilize()
	case "net":
		e.net()
	case "state":
		e.eachRank(cmd, func(r int) { e.out.WriteString(e.C.Ranks[r].String()) })
	case "stats":
		e.eachRank(cmd, func(r int) { e.line(fmt.Sprintf("rank %d: %s", r, statsLine(e.C.Ranks[r].Stats()))) })
	case "check":
		return e.report(e.C.Check())
	case "check-complete":
		return e.report(e.C.CheckComplete())
	case "check-answered":
		return e.report(e.C.CheckAnswered())
	default:
		return fmt.Errorf("unknown command %q", cmd.Name)
	}
	return nil
}

func (e *Env) report(err error) error {
	if err == nil {
		e.line("ok")
	}
	return err
}

func (e *Env) init(cmd *script.Cmd) error {
	files, err := ints(cmd.Args["files"])
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	opts := inproc.Options{Files: files, K: argInt(cmd, "k", 4), Window: argInt(cmd, "window", 4),
		RemoteMemBytes: int64(argInt(cmd, "remote", 1<<20)), Seed: uint64(argInt(cmd, "seed", 1)),
		Codec: cmd.Has("codec"), Policy: arg(cmd, "policy", inproc.Paper), Lead: argInt(cmd, "lead", 0),
		Ramp: argInt(cmd, "ramp", 0), Epochs: uint32(argInt(cmd, "epochs", 0))}
	if opts.Policy == inproc.Window {
		// the traces the epoch command draws by default
		opts.Traces = func(ep uint32) [][]proto.FileID { return inproc.GenTraces(e.C.Mapping, 1, ep) }
	}
	if opts.MemFraction, err = strconv.ParseFloat(arg(cmd, "mem", "0.25"), 64); err != nil {
		return fmt.Errorf("mem: %w", err)
	}
	if cmd.Has("mem-bytes") {
		if opts.MemBytes, err = int64s(cmd, "mem-bytes"); err != nil {
			return err
		}
	}
	if opts.Variant, err = proto.ParseVariant(arg(cmd, "variant", "full")); err != nil {
		return err
	}
	if cmd.Has("damaged") {
		ds, err := ints(cmd.Args["damaged"])
		if err != nil {
			return fmt.Errorf("damaged: %w", err)
		}
		for _, f := range ds {
			opts.Damaged = append(opts.Damaged, proto.FileID(f))
		}
	}
	opts.Sizes = inproc.Sizes(files, int64(argInt(cmd, "size", 1)))
	if cmd.Has("size-seed") {
		opts.Sizes = randomSizes(files, uint64(argInt(cmd, "size-seed", 0)))
	}
	e.C, err = inproc.New(opts)
	if err != nil {
		return err
	}
	e.C.SetOutput(e.line)
	m := e.C.Mapping
	for r := range files {
		firstVC, vcs := m.RankVCs(r)
		firstPC, pcs := m.RankPCs(r)
		if opts.Policy == inproc.Window {
			first, n := m.RankFiles(r)
			e.line(fmt.Sprintf("rank %d: pcs %d-%d, files %d-%d, budget %d bytes", r, firstPC, firstPC+pcs-1,
				first, int(first)+n-1, m.MemBytes(r)))
			continue
		}
		e.line(fmt.Sprintf("rank %d: pcs %d-%d, vcs %d-%d", r, firstPC, firstPC+pcs-1, firstVC, firstVC+vcs-1))
	}
	return nil
}

// plan prints the window policy's plan of the current epoch for each
// rank: the file planned for each position, and its chunk reads in order.
func (e *Env) plan(cmd *script.Cmd) error {
	var p *proto.WindowPlan
	for _, m := range e.C.Ranks {
		if p = m.Plan(); p != nil {
			break
		}
	}
	if p == nil {
		return errors.New("plan: no window rank has a plan")
	}
	e.eachRank(cmd, func(r int) {
		e.line(fmt.Sprintf("rank %d files: %v", r, p.Files[r]))
		pcs := make([]int, len(p.Reads[r]))
		for i, rd := range p.Reads[r] {
			pcs[i] = rd.PC
		}
		e.line(fmt.Sprintf("rank %d reads pcs: %v", r, pcs))
	})
	return nil
}

func randomSizes(files []int, seed uint64) [][]int64 {
	rng := rand.New(rand.NewPCG(seed, 0))
	s := inproc.Sizes(files, 1)
	for _, rs := range s {
		for i := range rs {
			rs[i] = 1 + rng.Int64N(8)
		}
	}
	return s
}

func (e *Env) epoch(cmd *script.Cmd) error {
	ep := uint32(argInt(cmd, "e", int(e.C.Epoch)+1))
	traces := inproc.GenTraces(e.C.Mapping, uint64(argInt(cmd, "trace-seed", 1)), ep)
	if cmd.Input != "" {
		var err error
		if traces, err = parseTraces(cmd.Input, e.C.Mapping.Ranks()); err != nil {
			return err
		}
	}
	for r, t := range traces {
		e.line(fmt.Sprintf("rank %d trace: %v", r, t))
	}
	var which []int
	if cmd.Has("ranks") {
		var err error
		if which, err = ints(cmd.Args["ranks"]); err != nil {
			return fmt.Errorf("ranks: %w", err)
		}
	}
	if cmd.Has("start") {
		start, err := ints(cmd.Args["start"])
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		sns := make([]int32, len(start))
		for r, sn := range start {
			sns[r] = int32(sn)
		}
		return e.C.ResumeEpoch(ep, traces, sns, nil)
	}
	return e.C.StartEpoch(ep, traces, which)
}

func parseTraces(input string, ranks int) ([][]proto.FileID, error) {
	traces := make([][]proto.FileID, ranks)
	for _, l := range strings.Split(input, "\n") {
		head, rest, ok := strings.Cut(l, ":")
		r, err := strconv.Atoi(strings.TrimSpace(head))
		if !ok || err != nil || r < 0 || r >= ranks {
			return nil, fmt.Errorf("bad trace line %q (want \"rank: file file …\")", l)
		}
		for _, f := range strings.Fields(rest) {
			id, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("bad file %q in trace of rank %d", f, r)
			}
			traces[r] = append(traces[r], proto.FileID(id))
		}
	}
	return traces, nil
}

func (e *Env) request(cmd *script.Cmd) error {
	sns, err := ints(cmd.Args["sn"])
	if err != nil {
		return fmt.Errorf("sn: %w", err)
	}
	for _, sn := range sns {
		if err := e.C.Request(argInt(cmd, "rank", 0), int32(sn)); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) deliver(cmd *script.Cmd) error {
	n := argInt(cmd, "n", -1)
	// Only messages in flight when the command starts; new ones go after.
	for i, old := 0, len(e.C.Net); i < old && n != 0; {
		msg := e.C.Net[i]
		if !matches(cmd, "idx", i) || !matches(cmd, "from", int(msg.From)) || !matches(cmd, "to", int(msg.To)) ||
			(cmd.Has("type") && cmd.Args["type"] != msg.Type.String()) {
			i++
			continue
		}
		if err := e.C.DeliverMsg(i); err != nil {
			return err
		}
		old--
		n--
	}
	return nil
}

func (e *Env) complete(cmd *script.Cmd) error {
	n := argInt(cmd, "n", -1)
	for r := range e.C.Reads {
		if !matches(cmd, "rank", r) {
			continue
		}
		// Only reads in flight when the command starts.
		for i, old := 0, len(e.C.Reads[r]); i < old && n != 0; {
			if !matches(cmd, "pc", e.C.Reads[r][i].PC) {
				i++
				continue
			}
			if err := e.C.CompleteRead(r, i, cmd.Has("fail")); err != nil {
				return err
			}
			old--
			n--
		}
	}
	return nil
}

func (e *Env) net() {
	for _, msg := range e.C.Net {
		e.line(fmt.Sprintf("in flight: %v", msg))
	}
	for r, reads := range e.C.Reads {
		for _, rd := range reads {
			e.line(fmt.Sprintf("rank %d reading pc %d (epoch %d)", r, rd.PC, rd.Epoch))
		}
	}
}

func (e *Env) eachRank(cmd *script.Cmd, f func(r int)) {
	for r := range e.C.Ranks {
		if matches(cmd, "rank", r) {
			f(r)
		}
	}
}

func statsLine(s proto.Stats) string {
	return fmt.Sprintf("requests=%d local-hits=%d prefetch-hits=%d misses=%d reads=%d loaded=%d remote=%d redirects=%d prefetched=%d stale=%d",
		s.Requests, s.LocalHits, s.PrefetchHits, s.Misses, s.ChunkReads, s.FilesLoaded, s.RemoteRequests, s.Redirects, s.Prefetched, s.Stale)
}

func matches(cmd *script.Cmd, key string, v int) bool {
	return !cmd.Has(key) || argInt(cmd, key, -1) == v
}

func arg(cmd *script.Cmd, key, def string) string {
	if v, ok := cmd.Args[key]; ok {
		return v
	}
	return def
}

func argInt(cmd *script.Cmd, key string, def int) int {
	v, err := strconv.Atoi(arg(cmd, key, strconv.Itoa(def)))
	if err != nil {
		panic(badArg(fmt.Sprintf("%s: %s=%q is not a number", cmd.Name, key, cmd.Args[key])))
	}
	return v
}

func argFloat(cmd *script.Cmd, key string, def float64) float64 {
	v, err := strconv.ParseFloat(arg(cmd, key, strconv.FormatFloat(def, 'g', -1, 64)), 64)
	if err != nil {
		panic(badArg(fmt.Sprintf("%s: %s=%q is not a number", cmd.Name, key, cmd.Args[key])))
	}
	return v
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// int64s parses the comma-separated integers of argument key.
func int64s(cmd *script.Cmd, key string) ([]int64, error) {
	vs, err := ints(cmd.Args[key])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = int64(v)
	}
	return out, nil
}
