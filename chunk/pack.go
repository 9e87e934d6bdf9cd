package chunk

import (
	"encoding/json"
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
}

const tmpPrefix = ".brandrt-pack-"

// Pack writes plan's dataset. Each process stages its shards in a
// temporary directory next to the output; only when every process has
// succeeded are they renamed into place, and the manifest, which marks a
// complete dataset, is written last. On failure the temporary directory
// is removed and nothing in Out changes.
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
	if p.staged {
		_ = cfg.FS.RemoveAll(p.tmp)
	}
	return m, err
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
	staged    bool
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
	p.staged = true
	mine, err := p.stage()
	if err = p.agree(err); err != nil {
		return nil, err
	}
	all, err := p.gather(mine)
	if err != nil {
		return nil, err
	}
	m := p.manifest(all)
	if err := p.agree(p.retireOld()); err != nil {
		return nil, err
	}
	if err := p.agree(p.commitShards()); err != nil {
		return nil, err
	}
	if p.writesManifest() {
		err = p.writeManifest(m)
	}
	return m, p.agree(err)
}

// agree makes every process learn whether any failed: it returns err, or
// an error saying another process failed.
func (p *packer) agree(err error) error {
	flag := int64(0)
	if err != nil {
		flag = 1
	}
	sum, gerr := p.g.AllreduceSum([]int64{flag})
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
		return fsys.MkdirAll(p.out)
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

// stage writes this process's shards into the temporary directory.
func (p *packer) stage() (map[int]ShardInfo, error) {
	if err := p.cfg.FS.MkdirAll(p.tmp); err != nil {
		return nil, fmt.Errorf("chunk: %w", err)
	}
	s := &stager{fsys: p.cfg.FS, plan: p.plan, tmp: p.tmp, out: p.out, workers: max(1, p.cfg.Workers)}
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
	m := &Manifest{Format: manifestFormat, Version: 1, K: p.plan.K, Ranks: p.plan.Ranks, Seed: p.plan.Seed,
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

// retireOld moves what a previous dataset left in the output into the
// temporary directory, so that from now on the output does not look
// complete: the rank directories this process will replace and, for the
// process writing the manifest, the old manifest, stale rank directories
// and the temporary directories of interrupted packs.
func (p *packer) retireOld() error {
	if !p.cfg.Force {
		return nil
	}
	fsys := p.cfg.FS
	old := join(p.tmp, "old")
	if err := fsys.MkdirAll(old); err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	entries, err := fsys.ReadDir(p.out)
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	mine := map[string]bool{}
	for _, r := range p.myShards() {
		mine[RankDir(r)] = true
	}
	for _, e := range entries {
		if n := e.Name(); p.retires(n, mine) {
			if err := fsys.Rename(join(p.out, n), join(old, n)); err != nil {
				return fmt.Errorf("chunk: %w", err)
			}
		}
	}
	return nil
}

func (p *packer) retires(name string, mine map[string]bool) bool {
	switch {
	case mine[name]:
		return true
	case !p.writesManifest():
		return false
	case name == ManifestName:
		return true
	case strings.HasPrefix(name, tmpPrefix):
		return !strings.HasPrefix(name, p.runPrefix) // left by an earlier run
	case strings.HasPrefix(name, "rank-"):
		var r int
		_, err := fmt.Sscanf(name, "rank-%05d", &r)
		// Shared output: rank directories beyond the new rank count.
		// Node-local output: every other rank's directory.
		return err == nil && (p.local || r >= p.plan.Ranks)
	}
	return false
}

// commitShards renames this process's staged shards into the output.
func (p *packer) commitShards() error {
	fsys := p.cfg.FS
	for _, r := range p.myShards() {
		if err := fsys.Rename(join(p.tmp, RankDir(r)), join(p.out, RankDir(r))); err != nil {
			return fmt.Errorf("chunk: %w", err)
		}
	}
	return fsys.SyncDir(p.out)
}

// writeManifest writes the manifest under a temporary name and renames it.
func (p *packer) writeManifest(m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	if err := writeDurable(p.cfg.FS, p.tmp, p.out, ManifestName, append(data, '\n')); err != nil {
		return err
	}
	if err := p.cfg.FS.Rename(join(p.tmp, ManifestName), join(p.out, ManifestName)); err != nil {
		return fmt.Errorf("chunk: %w", err)
	}
	return p.cfg.FS.SyncDir(p.out)
}
