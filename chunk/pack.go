package chunk

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Group is the set of processes that pack together, one per MPI rank; a
// lone process is Solo. Pack calls its methods in the same order on every
// member.
type Group interface {
	Rank() int
	Size() int
	// AllreduceSum returns the element-wise sum of v over the members.
	AllreduceSum(v []int64) ([]int64, error)
}

// Solo is the group of a single process.
var Solo Broadcaster = solo{}

type solo struct{}

func (solo) Rank() int                               { return 0 }
func (solo) Size() int                               { return 1 }
func (solo) AllreduceSum(v []int64) ([]int64, error) { return v, nil }

// RankPlaceholder in an output or chunk directory is replaced by the rank:
// a node-local dataset, each rank's shard (and a copy of the manifest) in
// its own directory.
const RankPlaceholder = "{rank}"

// ForRank returns dir with RankPlaceholder replaced by rank.
func ForRank(dir string, rank int) string {
	return strings.ReplaceAll(dir, RankPlaceholder, fmt.Sprint(rank))
}

// PackConfig says where and how to pack.
type PackConfig struct {
	FS FS
	// Out is the output directory; see RankPlaceholder. It may not lie
	// inside Input nor hold it, nor hold any of the plan's inputs.
	Out string
	// Input is the input directory, the root of relative paths of a
	// manifest; empty when there is none.
	Input string
	// Force replaces a dataset already in Out (its manifest, rank
	// directories and interrupted packs; nothing else is touched).
	Force bool
	// Workers is the number of chunks written at once by each process.
	Workers int
	// Group is the set of processes packing together; nil means Solo.
	// Member m writes the shards r with r mod size = m.
	Group Group
	// Progress, if set, is called about four times a second, and once at
	// the end, with this process's files and bytes packed and its total.
	Progress func(doneFiles, totalFiles, doneBytes, totalBytes int64)
	// Stop, if set, interrupts the pack when it is closed (on SIGINT, say):
	// Pack stops writing, removes what it wrote and returns
	// ErrInterrupted. Once the staged dataset is being renamed into place
	// (milliseconds), the pack completes instead.
	Stop <-chan struct{}
}

// ErrInterrupted is returned by a pack that PackConfig.Stop stopped, once
// it has removed what it wrote.
var ErrInterrupted = errors.New("chunk: pack interrupted")

const tmpPrefix = ".brandrt-pack-"

// Pack writes plan's dataset. Each process stages its shards, and the
// manifest, in a temporary directory inside the output; only when every
// process has succeeded are they renamed into place, the manifest, which
// marks a complete dataset, last. A pack that fails or is stopped removes
// everything it wrote, and the output directory if it created it; a
// dataset that Force was replacing is put back as it was.
func Pack(cfg PackConfig, plan *Plan) (*Manifest, error) {
	g := cfg.Group
	if g == nil {
		g = Solo
	}
	local := strings.Contains(cfg.Out, RankPlaceholder)
	if local && plan.Ranks != g.Size() {
		return nil, fmt.Errorf("chunk: a node-local output (%s) needs one process per rank: %d ranks, %d processes", RankPlaceholder, plan.Ranks, g.Size())
	}
	out := ForRank(cfg.Out, g.Rank())
	// Member 0's clock gives the run an id, which names the temporary
	// directories so that what earlier runs left can be told apart, and
	// the creation time every copy of the manifest records.
	v := []int64{0, 0}
	if g.Rank() == 0 {
		now := time.Now()
		v = []int64{now.UnixNano()&(1<<48-1) | int64(os.Getpid()&0x7fff)<<48, now.Unix()}
	}
	v, err := g.AllreduceSum(v)
	if err != nil {
		return nil, fmt.Errorf("chunk: %w", err)
	}
	run := fmt.Sprintf("%s%x-", tmpPrefix, v[0])
	p := &packer{cfg: cfg, g: g, plan: plan, out: out, local: local, runPrefix: run, created: time.Unix(v[1], 0).UTC(),
		tmp: join(out, fmt.Sprintf("%s%d", run, g.Rank()))}
	m, err := p.run()
	if err != nil {
		return nil, p.fail(err)
	}
	_ = cfg.FS.RemoveAll(p.tmp) // what remains of the old dataset
	return m, nil
}

type packer struct {
	cfg       PackConfig
	g         Group
	plan      *Plan
	out       string
	tmp       string
	runPrefix string // this run's temporary directories start with it
	created   time.Time
	local     bool
	made      []string // directories this process created
	broken    bool     // the group failed: no more collective calls
	// What the commit did so far, for the rollback.
	committing bool
	retired    []string // names moved from out into tmp/old
	committed  []int    // ranks whose new shard is in out
	manifestIn bool     // the new manifest is in out
}

// writesManifest says whether this process writes a manifest: each one in
// a node-local dataset, member 0 otherwise.
func (p *packer) writesManifest() bool { return p.local || p.g.Rank() == 0 }

func (p *packer) myShards() []int {
	var rs []int
	for r := p.g.Rank(); r < p.plan.Ranks; r += p.g.Size() {
		rs = append(rs, r)
	}
	return rs
}

func (p *packer) run() (*Manifest, error) {
	if err := p.agree(p.checkOut()); err != nil {
		return nil, err
	}
	mine, err := p.stage()
	if err = p.agree(err); err != nil {
		return nil, err
	}
	all, err := p.gather(mine)
	if err != nil {
		return nil, err
	}
	m := p.manifest(all)
	if err := p.agree(p.stageManifest(m)); err != nil {
		return nil, err
	}
	// The last moment to stop: from here on, only renames.
	if err := p.agree(p.stopped()); err != nil {
		return nil, err
	}
	p.committing = true
	for _, step := range []func() error{p.retireManifest, p.retireOld, p.commitShards, p.commitManifest} {
		if err := p.agree(step()); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stopped returns ErrInterrupted once PackConfig.Stop is closed.
func (p *packer) stopped() error {
	select {
	case <-p.cfg.Stop:
		return ErrInterrupted
	default:
		return nil
	}
}

// agree makes every process learn whether any failed: it returns err, or
// an error saying another process failed.
func (p *packer) agree(err error) error {
	if p.broken { // no more collective calls: they could hang
		return errors.Join(err, errors.New("chunk: the process group failed earlier"))
	}
	flag := int64(0)
	if err != nil {
		flag = 1
	}
	sum, gerr := p.g.AllreduceSum([]int64{flag})
	p.broken = p.broken || gerr != nil
	switch {
	case err != nil:
		return err
	case gerr != nil:
		return fmt.Errorf("chunk: %w", gerr)
	case sum[0] > 0:
		return fmt.Errorf("chunk: pack failed on %d other process(es); see their messages", sum[0])
	}
	return nil
}

// checkOut creates the output directory or checks that it may be used.
func (p *packer) checkOut() error {
	if err := checkApart(p.cfg.Input, p.out); err != nil {
		return err
	}
	if err := checkInputsOutside(p.plan.Inputs, p.out); err != nil {
		return err
	}
	fsys := p.cfg.FS
	entries, err := fsys.ReadDir(p.out)
	if errors.Is(err, os.ErrNotExist) {
		return p.mkdirAll(p.out)
	}
	if err != nil {
		return fmt.Errorf("chunk: output directory: %w", err)
	}
	if len(entries) > 0 && !p.cfg.Force {
		what := fmt.Sprintf("%d entries", len(entries))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				what = "an interrupted pack (" + e.Name() + ")"
			}
		}
		return fmt.Errorf("chunk: output directory %s is not empty (%s); pass --force to replace a dataset there", p.out, what)
	}
	return nil
}

// stage writes this process's shards into the temporary directory, or
// reports every unreadable input it found (up to maxProblems).
func (p *packer) stage() (map[int]ShardInfo, error) {
	if err := p.stopped(); err != nil {
		return nil, err
	}
	if err := p.mkdirAll(p.tmp); err != nil {
		return nil, err
	}
	s := &stager{fsys: p.cfg.FS, plan: p.plan, tmp: p.tmp, out: p.out, workers: max(1, p.cfg.Workers), stop: p.cfg.Stop}
	stop := p.reportProgress(s)
	defer stop()
	infos := map[int]ShardInfo{}
	for _, r := range p.myShards() {
		crc, size, err := s.stageShard(r)
		if err != nil {
			return nil, err
		}
		info := p.plan.shardInfo(r)
		info.IndexCRC, info.IndexSize = crc, size
		infos[r] = info
	}
	if _, err := s.badInputs(); err != nil {
		return nil, err
	}
	return infos, nil
}

func (p *packer) reportProgress(s *stager) (stop func()) {
	if p.cfg.Progress == nil {
		return func() {}
	}
	var files, bytes int64
	for _, r := range p.myShards() {
		info := p.plan.shardInfo(r)
		files, bytes = files+info.Files, bytes+info.Bytes
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				p.cfg.Progress(s.files.Load(), files, s.bytes.Load(), bytes)
				return
			case <-tick.C:
				p.cfg.Progress(s.files.Load(), files, s.bytes.Load(), bytes)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// gather shares each shard's index checksum and size with every process.
func (p *packer) gather(mine map[int]ShardInfo) ([]ShardInfo, error) {
	v := make([]int64, 2*p.plan.Ranks)
	for r, info := range mine {
		v[2*r], v[2*r+1] = int64(info.IndexCRC), info.IndexSize
	}
	sum, err := p.g.AllreduceSum(v)
	if err != nil {
		p.broken = true
		return nil, fmt.Errorf("chunk: %w", err)
	}
	infos := make([]ShardInfo, p.plan.Ranks)
	for r := range infos {
		infos[r] = p.plan.shardInfo(r)
		infos[r].IndexCRC, infos[r].IndexSize = uint32(sum[2*r]), sum[2*r+1]
	}
	return infos, nil
}

func (p *packer) manifest(shards []ShardInfo) *Manifest {
	m := &Manifest{Format: manifestFormat, Version: formatVersion(p.plan.Params), K: p.plan.K, Ranks: p.plan.Ranks, Seed: p.plan.Seed,
		Classes: p.plan.Classes, Created: p.created, Params: p.plan.Params, Shards: shards}
	if m.Classes == nil {
		m.Classes = []string{}
	}
	for _, s := range shards {
		m.Files += s.Files
		m.Bytes += s.Bytes
	}
	return m
}
