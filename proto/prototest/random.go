package prototest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/brandrt/brandrt/internal/script"
	"github.com/brandrt/brandrt/proto"
)

// Schedule is a randomized run: a small random cluster and a random
// interleaving of client requests (out of order within a window, some
// clients stopping early), message deliveries (any message in flight, so
// messages are reordered and delayed), read completions (some failing) and
// epoch changes (ranks joining late). Every command is recorded as a
// datadriven script, so a failure can be replayed by hand.
type Schedule struct {
	rng    chooser
	env    Env
	script strings.Builder
	// requested[r][sn] and the position below which rank r stops asking.
	requested [][]bool
	stop      []int
	failures  bool
	// ooo is how many of a rank's first open positions a request picks
	// from (several workers asking out of order).
	ooo int
	// window runs the window policy's ranks: budgets that hold a chunk,
	// clients that stop early say so (done), and every epoch ends with
	// nothing in flight (the runtime waits for an epoch's reads).
	window bool
	done   []bool
}

// chooser makes a schedule's decisions: *rand.Rand, or fuzzer bytes.
type chooser interface {
	IntN(n int) int
	Float64() float64
	Uint64() uint64
	Perm(n int) []int
}

// RunSchedule runs the schedule drawn from seed and returns an error
// holding the seed and the script when an invariant breaks.
func RunSchedule(seed uint64) error {
	s := &Schedule{rng: rand.New(rand.NewPCG(seed, 0xb4a4d))}
	if err := s.run(); err != nil {
		return fmt.Errorf("schedule seed %d: %w\nscript:\n%s", seed, err, s.script.String())
	}
	return nil
}

// RunWindowSchedule runs the schedule drawn from seed on ranks of the
// window policy.
func RunWindowSchedule(seed uint64) error {
	s := &Schedule{rng: rand.New(rand.NewPCG(seed, 0x3d1a7)), window: true}
	if err := s.run(); err != nil {
		return fmt.Errorf("window schedule seed %d: %w\nscript:\n%s", seed, err, s.script.String())
	}
	return nil
}

// RunScheduleBytes runs the schedule whose every decision is read from
// data, so that a coverage-guided fuzzer steers it; once data runs out,
// every decision takes its first option. With window, its ranks run the
// window policy.
func RunScheduleBytes(data []byte, window bool) error {
	s := &Schedule{rng: &byteChooser{data: data}, window: window}
	if err := s.run(); err != nil {
		return fmt.Errorf("schedule of %d bytes: %w\nscript:\n%s", len(data), err, s.script.String())
	}
	return nil
}

// byteChooser draws decisions from a byte string.
type byteChooser struct{ data []byte }

func (b *byteChooser) next() uint64 {
	if len(b.data) == 0 {
		return 0
	}
	v := b.data[0]
	b.data = b.data[1:]
	return uint64(v)
}

func (b *byteChooser) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	v := b.next()
	if n > 256 {
		v = v<<8 | b.next()
	}
	return int(v % uint64(n))
}

func (b *byteChooser) Float64() float64 { return float64(b.next()) / 256 }

func (b *byteChooser) Uint64() uint64 { return b.next()<<8 | b.next() }

func (b *byteChooser) Perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := b.IntN(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// do runs one command line (with optional input) and checks the cluster.
func (s *Schedule) do(line, input string) error {
	cmd := script.ParseLine("random", line)
	cmd.Input = input
	out := s.env.Handle(cmd)
	s.script.WriteString(cmd.String() + "\n")
	if input != "" {
		s.script.WriteString(input + "\n")
	}
	s.script.WriteString("----\n" + out + "\n")
	if strings.Contains(out, "error:") {
		return fmt.Errorf("%s: %s", line, out)
	}
	if s.env.C == nil {
		return nil
	}
	return s.env.C.Check()
}

func (s *Schedule) run() error {
	if err := s.do(s.initLine(), ""); err != nil {
		return err
	}
	epochs := 1 + s.rng.IntN(2)
	for e := 1; e <= epochs; e++ {
		if err := s.epoch(uint32(e)); err != nil {
			return err
		}
	}
	return nil
}

// initLine draws the cluster: mostly small (up to 4 ranks of 30 files,
// K ≤ 6), sometimes larger (K up to 70, which needs two-word slot masks,
// 150 files per rank, wider windows and buffers).
func (s *Schedule) initLine() string {
	rng := s.rng
	maxFiles, maxK, maxWindow, maxRemote := 30, 6, 7, 24
	if rng.IntN(4) == 0 {
		maxFiles, maxK, maxWindow, maxRemote = 150, 70, 40, 200
	}
	n := 1 + rng.IntN(4)
	files, total := make([]string, n), 0
	for r := range files {
		k := rng.IntN(maxFiles)
		if r == 0 {
			k = max(k, 1)
		}
		files[r], total = fmt.Sprint(k), total+k
	}
	variant := proto.Variants[rng.IntN(len(proto.Variants))]
	s.failures = rng.IntN(4) == 0
	s.ooo = 1 + rng.IntN(16)
	damaged := ""
	if rng.IntN(4) == 0 { // files damaged on storage: one in eight
		var ds []string
		for f := range total {
			if rng.IntN(8) == 0 {
				ds = append(ds, fmt.Sprint(f))
			}
		}
		if len(ds) > 0 {
			damaged = " damaged=" + strings.Join(ds, ",")
		}
	}
	if s.window {
		// sizes of 1-8 bytes (size-seed): a budget of 8K bytes holds any chunk
		k := 1 + rng.IntN(maxK)
		budgets := make([]string, n)
		for r := range budgets {
			budgets[r] = fmt.Sprint(8*k + rng.IntN(24*k))
		}
		return fmt.Sprintf("init policy=window files=%s k=%d mem-bytes=%s remote=%d window=%d lead=%d ramp=%d seed=%d size-seed=%d codec%s",
			strings.Join(files, ","), k, strings.Join(budgets, ","), rng.IntN(maxRemote), rng.IntN(maxWindow),
			rng.IntN(2*k), rng.IntN(4), rng.Uint64()%1000, rng.Uint64()%1000, damaged)
	}
	return fmt.Sprintf("init files=%s k=%d mem=%.2f remote=%d window=%d variant=%s seed=%d size-seed=%d codec%s",
		strings.Join(files, ","), 1+rng.IntN(maxK), 0.05+rng.Float64(), rng.IntN(maxRemote),
		rng.IntN(maxWindow), variant, rng.Uint64()%1000, rng.Uint64()%1000, damaged)
}

// epoch plays one epoch: random traces of uneven lengths, some ranks
// joining late, then random steps until every client is done, then the
// checks.
func (s *Schedule) epoch(e uint32) error {
	c := s.env.C
	traces := s.traces(c.Mapping.Files(), c.Mapping.Ranks())
	late := s.rng.IntN(c.Mapping.Ranks())
	early := make([]string, 0, late)
	for r := 0; r < c.Mapping.Ranks()-late; r++ {
		early = append(early, fmt.Sprint(r))
	}
	if err := s.do(fmt.Sprintf("epoch e=%d ranks=%s", e, strings.Join(early, ",")), traces); err != nil {
		return err
	}
	s.requested = make([][]bool, len(c.Traces))
	s.stop = make([]int, len(c.Traces))
	s.done = make([]bool, len(c.Traces))
	for r, t := range c.Traces {
		s.requested[r] = make([]bool, len(t))
		s.stop[r] = len(t)
		if s.rng.IntN(5) == 0 {
			s.stop[r] = s.rng.IntN(len(t) + 1)
		}
	}
	joined := c.Mapping.Ranks() - late
	for steps := 0; ; steps++ {
		if joined < c.Mapping.Ranks() && s.rng.IntN(8) == 0 {
			if err := s.do(fmt.Sprintf("join rank=%d", joined), ""); err != nil {
				return err
			}
			joined++
		}
		line, ok := s.step(joined)
		if !ok {
			if joined == c.Mapping.Ranks() {
				break
			}
			continue
		}
		if err := s.do(line, ""); err != nil {
			return err
		}
	}
	return s.finish()
}

// traces draws a random permutation cut at random points, so that ranks'
// traces differ in length (some may be empty); sometimes part of the
// dataset is left out of every trace.
func (s *Schedule) traces(files, ranks int) string {
	perm := s.rng.Perm(files)
	if s.rng.IntN(6) == 0 {
		perm = perm[:s.rng.IntN(files+1)]
		files = len(perm)
	}
	cuts := make([]int, ranks+1)
	cuts[ranks] = files
	for r := 1; r < ranks; r++ {
		cuts[r] = s.rng.IntN(files + 1)
	}
	sortInts(cuts)
	var b strings.Builder
	for r := 0; r < ranks; r++ {
		fmt.Fprintf(&b, "%d:", r)
		for _, f := range perm[cuts[r]:cuts[r+1]] {
			fmt.Fprintf(&b, " %d", f)
		}
		if r < ranks-1 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// step picks one random action among those possible; ok is false when
// nothing is left to do for the ranks that joined.
func (s *Schedule) step(joined int) (line string, ok bool) {
	c := s.env.C
	var acts []string
	type pick struct{ r, sn int }
	var reqs []pick
	for r := 0; r < joined; r++ {
		if sn := s.nextRequest(r); sn >= 0 {
			acts = append(acts, fmt.Sprintf("request rank=%d sn=%d", r, sn))
			reqs = append(reqs, pick{r, sn})
		}
	}
	for r := 0; r < joined; r++ {
		for _, rd := range c.Reads[r] {
			verb := ""
			if s.failures && s.rng.IntN(10) == 0 {
				verb = " fail"
			}
			acts = append(acts, fmt.Sprintf("complete rank=%d pc=%d n=1%s", r, rd.PC, verb))
		}
	}
	for i := range c.Net {
		acts = append(acts, fmt.Sprintf("deliver idx=%d n=1", i))
	}
	done := -1
	for r := 0; r < joined && s.window && done < 0; r++ {
		// a rank whose clients stopped early, with every answer in
		if !s.done[r] && s.stop[r] < len(s.requested[r]) && s.nextRequest(r) < 0 && c.Outstanding[r] == 0 {
			done = r
			acts = append(acts, fmt.Sprintf("done rank=%d", r))
		}
	}
	if len(acts) == 0 {
		return "", false
	}
	i := s.rng.IntN(len(acts))
	if i < len(reqs) {
		s.requested[reqs[i].r][reqs[i].sn] = true
	}
	if done >= 0 && i == len(acts)-1 {
		s.done[done] = true
	}
	return acts[i], true
}

// nextRequest picks one of the first few positions rank r has not asked
// for yet (several DataLoader workers ask out of order), or -1. The
// caller marks it requested if it is chosen.
func (s *Schedule) nextRequest(r int) int {
	var open []int
	for sn := 0; sn < s.stop[r] && len(open) < s.ooo; sn++ {
		if !s.requested[r][sn] {
			open = append(open, sn)
		}
	}
	if len(open) == 0 {
		return -1
	}
	return open[s.rng.IntN(len(open))]
}

// finish ends an epoch. Usually it drains the cluster, checks that every
// request was answered, and checks exactly-once when every client asked
// for its whole trace and no read failed. Sometimes it leaves messages and
// reads in flight for the next epoch to meet as stale.
func (s *Schedule) finish() error {
	if !s.window && s.rng.IntN(4) == 0 {
		return nil
	}
	if err := s.do("stabilize", ""); err != nil {
		return err
	}
	if err := s.do("check-answered", ""); err != nil {
		return err
	}
	complete := !s.failures
	for r := range s.stop {
		complete = complete && s.stop[r] == len(s.requested[r])
	}
	if complete {
		return s.do("check-complete", "")
	}
	return nil
}
