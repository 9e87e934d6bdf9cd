package stage

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// Config says what to stage and where.
type Config struct {
	// FS reaches both the source and the local directory.
	FS chunk.FS
	// Source is the packed dataset's directory on shared storage.
	Source string
	// Shards are the shards to copy: those one rank of a job serves.
	Shards []int
	// Local is the node-local directory (created if missing) that holds
	// the copies, shard s's in Dir(Local, Source, s).
	Local string
	// Workers is the number of files copied, or chunk files verified, at
	// once.
	Workers int
	// Progress, if set, is called as each step of a shard advances, with
	// its bytes done and its total; once with Wait (0 of 0) when another
	// stage of the same copy holds its lock. Calls do not overlap.
	Progress func(shard int, step Step, done, total int64)
	// Replacing, if set, is called when the copy of a shard already in
	// place is not reused, before it is copied again from Source, with
	// why.
	Replacing func(shard int, why string)
	// Stop, if set, interrupts Stage when it is closed: Stage removes
	// what it copied and returns ErrInterrupted.
	Stop <-chan struct{}
	// FreeSpace returns the bytes that may still be written in dir; nil
	// means statfs(2)'s blocks available to unprivileged users. Tests
	// replace it.
	FreeSpace func(dir string) (int64, error)
}

// Step names what Stage is doing, for Config.Progress.
type Step string

// The steps.
const (
	Wait   Step = "wait"   // for another stage of the same copy
	Copy   Step = "copy"   // from the source into the temporary directory
	Verify Step = "verify" // a copy just made, or one to reuse
)

// DefaultConfig returns the defaults; the caller sets Source, Shards and
// Local.
func DefaultConfig() Config { return Config{FS: chunk.OS, Workers: 4} }

// Validate reports every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	add := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("stage: "+format, args...))
		}
	}
	add(c.FS != nil, "no file system (FS)")
	add(c.Source != "", "no source dataset directory")
	add(c.Local != "", "no local directory")
	add(len(c.Shards) > 0, "no shards to stage")
	for i, s := range c.Shards {
		add(s >= 0, "shard %d is negative", s)
		add(!slices.Contains(c.Shards[:i], s), "shard %d named twice", s)
	}
	add(c.Workers >= 1, "%d workers, want at least 1", c.Workers)
	return errors.Join(errs...)
}

// Result says what Stage did with one shard.
type Result struct {
	// Shard is the shard; Dir its local dataset directory, what serve
	// reads for it (its --chunks): the manifest and the shard's directory.
	Shard int
	Dir   string
	// Reused is true when an earlier copy was verified and kept.
	Reused bool
	// Replaced says why an earlier copy was not reused; empty when there
	// was none, or when it was reused.
	Replaced string
	// Bytes is the size of the copy: manifest, index and chunk files.
	Bytes int64
	// SourceBytes counts the bytes read from the source (the manifest is
	// counted for the first shard), CopiedBytes those written into the
	// local directory, VerifiedBytes those read back and checked.
	SourceBytes, CopiedBytes, VerifiedBytes int64
	// CopyTime and VerifyTime are the time spent copying and verifying.
	CopyTime, VerifyTime time.Duration
}

// ErrInterrupted is returned by a Stage that Config.Stop stopped, once it
// has removed what it copied.
var ErrInterrupted = errors.New("stage: interrupted")

// Dir returns the directory of local that holds the copy of shard of
// the dataset in source.
func Dir(local, source string, shard int) string {
	return filepath.Join(local, name(source, shard))
}

// Pattern returns Dir with chunk.RankPlaceholder for the shard: what
// serve --chunks reads on every rank when each node staged its own rank's
// shard into local.
func Pattern(local, source string) string {
	return filepath.Join(local, namePattern(source))
}

// name is the copy's directory name: the source's base name, a hash of its
// resolved absolute path and the shard (chunks-1f2e3d4c.rank-3).
func name(source string, shard int) string { return chunk.ForRank(namePattern(source), shard) }

func namePattern(source string) string {
	return fmt.Sprintf("%s.rank-%s", datasetName(source), chunk.RankPlaceholder)
}

// datasetName names the source in the local directory: its base name and
// a hash of its resolved absolute path (chunks-1f2e3d4c).
func datasetName(source string) string {
	src := resolve(source)
	h := fnv.New32a()
	_, _ = io.WriteString(h, src)
	return fmt.Sprintf("%s-%08x", filepath.Base(src), h.Sum32())
}

// resolve returns p absolute and clean, with its symlinks resolved when
// it exists.
func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// Stage makes sure that Dir(cfg.Local, cfg.Source, s) holds a verified
// copy of the source's manifest and of shard s, for each shard s of
// cfg.Shards: it reuses one an earlier Stage made, if the source has not
// changed and it verifies, and copies the shard otherwise, once it made
// sure that the local directory has room for every shard it copies. It
// returns a Result per shard, in cfg.Shards' order. A Stage that fails
// leaves nothing it wrote. See the package documentation.
func Stage(cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FreeSpace == nil {
		cfg.FreeSpace = statfsFree
	}
	s := &stager{cfg: cfg, src: resolve(cfg.Source)}
	for _, sh := range cfg.Shards {
		s.shards = append(s.shards, s.newShardCopy(sh))
	}
	err := s.run()
	res := make([]Result, len(s.shards))
	for i, sc := range s.shards {
		res[i] = sc.res
		res[i].SourceBytes = sc.srcBytes.Load()
	}
	return res, err
}

// stager is one Stage.
type stager struct {
	cfg    Config
	src    string // the source, resolved
	data   []byte // the source's manifest
	man    *chunk.Manifest
	shards []*shardCopy // in cfg.Shards' order
	space  *reservation
	// made are the copies this Stage renamed into place: removed if it
	// fails.
	made []string
	// the step under way and its bytes, for Progress
	mu          sync.Mutex
	shard       int
	step        Step
	done, total int64
}

// shardCopy is one shard's part of a Stage.
type shardCopy struct {
	st    *stager
	shard int
	name  string // of the copy's directory
	dir   string // the copy: Local/name
	tmp   string // where it is made
	res   Result
	// damaged says that the copy in place, not reused, is damaged (not
	// merely out of date).
	damaged  bool
	unlock   func()
	srcBytes atomic.Int64
}

func (s *stager) newShardCopy(shard int) *shardCopy {
	n := name(s.cfg.Source, shard)
	sc := &shardCopy{st: s, shard: shard, name: n, dir: filepath.Join(s.cfg.Local, n),
		tmp: filepath.Join(s.cfg.Local, fmt.Sprintf(".%s.tmp-%d", n, os.Getpid()))}
	sc.res.Shard, sc.res.Dir = shard, sc.dir
	return sc
}

// run stages the shards: each locked, reused or set aside, then room made
// for those to copy, then each copied. What fails is undone.
func (s *stager) run() (err error) {
	if err := s.readManifest(); err != nil {
		return err
	}
	if err := s.cfg.FS.MkdirAll(s.cfg.Local); err != nil {
		return fmt.Errorf("stage: local directory: %w", err)
	}
	defer s.unlockAll()
	if err := s.lockAll(); err != nil {
		return err
	}
	todo, err := s.reuseOrRetire()
	if err != nil || len(todo) == 0 {
		return err
	}
	defer func() {
		if err != nil {
			err = s.undo(err)
		}
	}()
	if s.space, err = s.reserve(todo); err != nil {
		return err
	}
	defer s.space.release()
	for _, sc := range todo {
		if err := sc.copyShard(); err != nil {
			return s.explain(sc, err)
		}
		s.made = append(s.made, sc.dir)
	}
	return nil
}

// explain says more about err, the error of copying sc: that the disk
// filled up, or that the copy in place, not reused, could not be copied
// again.
func (s *stager) explain(sc *shardCopy, err error) error {
	again := "copying it again failed"
	if chunk.Unreachable(err) {
		again = "the source cannot be read to copy it again"
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		return err
	case isFull(err):
		return s.diskFull(sc, err)
	case sc.damaged:
		return fmt.Errorf("stage: the copy of shard %d in %s is damaged (%s), and %s: %w", sc.shard, sc.dir, sc.res.Replaced, again, err)
	case sc.res.Replaced != "":
		return fmt.Errorf("stage: the copy of shard %d in %s was not reused (%s), and %s: %w", sc.shard, sc.dir, sc.res.Replaced, again, err)
	}
	return err
}

// readManifest reads the source's manifest, the one file Stage always
// reads from there, and checks that it has the shards.
func (s *stager) readManifest() error {
	name := filepath.Join(s.cfg.Source, chunk.ManifestName)
	f, err := s.cfg.FS.Open(name, false)
	if err != nil {
		return fmt.Errorf("stage: %s is not a complete dataset: %w", s.cfg.Source, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	s.shards[0].srcBytes.Add(int64(len(data)))
	if err != nil {
		return fmt.Errorf("stage: read %s: %w", name, err)
	}
	m, err := chunk.ParseManifest(data, name)
	if err != nil {
		return err
	}
	for _, sh := range s.cfg.Shards {
		if sh >= len(m.Shards) {
			return fmt.Errorf("stage: %s was packed in %d shards: there is no shard %d", s.cfg.Source, len(m.Shards), sh)
		}
	}
	s.data, s.man = data, m
	return nil
}

// reuseOrRetire decides for each shard, under its lock, whether the copy
// in place is reused; those that are not are removed, and returned, to
// be copied.
func (s *stager) reuseOrRetire() ([]*shardCopy, error) {
	var todo []*shardCopy
	for _, sc := range s.shards {
		if err := sc.removeLeftovers(); err != nil {
			return nil, err
		}
		reused, why, err := sc.reuse()
		if err != nil {
			return nil, err
		}
		if sc.res.Reused = reused; reused {
			continue
		}
		if sc.res.Replaced = why; why != "" && s.cfg.Replacing != nil {
			s.cfg.Replacing(sc.shard, why)
		}
		if err := sc.retire(); err != nil {
			return nil, err
		}
		todo = append(todo, sc)
	}
	return todo, nil
}

// undo removes the copies this Stage made, after err.
func (s *stager) undo(err error) error {
	for _, dir := range s.made {
		if rerr := s.cfg.FS.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("stage: remove %s: %w", dir, rerr))
		}
	}
	return err
}

// copySize returns the bytes of the copy of shard r of m, with a
// manifest of manifest bytes: the chunk files' sizes follow from the
// shard's files, bytes and chunks.
func copySize(m *chunk.Manifest, r int, manifest int64) int64 {
	sh := m.Shards[r]
	headers := int64(sh.Chunks)*chunk.HeaderSize(0) + sh.Files*(chunk.HeaderSize(1)-chunk.HeaderSize(0))
	return manifest + sh.IndexSize + headers + sh.Bytes
}

// shardList names shards compactly: "shard 3", "shards 0–7", "shards 1,
// 3–5".
func shardList(shards []int) string {
	if len(shards) == 1 {
		return fmt.Sprintf("shard %d", shards[0])
	}
	var runs []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if j == i {
			runs = append(runs, fmt.Sprint(shards[i]))
		} else {
			runs = append(runs, fmt.Sprintf("%d–%d", shards[i], shards[j]))
		}
		i = j + 1
	}
	return "shards " + strings.Join(runs, ", ")
}

// stopped says whether the stage was asked to stop.
func (s *stager) stopped() bool {
	select {
	case <-s.cfg.Stop:
		return true
	default:
		return false
	}
}

// progress starts step of shard, of total bytes, at done.
func (s *stager) progress(shard int, step Step, done, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shard, s.step, s.done, s.total = shard, step, done, total
	if s.cfg.Progress != nil {
		s.cfg.Progress(shard, step, done, total)
	}
}

// advance adds n bytes done to the current step.
func (s *stager) advance(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done += n
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.shard, s.step, s.done, s.total)
	}
}
