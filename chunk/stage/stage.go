package stage

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
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
	// Rank is the shard to copy.
	Rank int
	// Local is the node-local directory (created if missing) that holds
	// the copy, in Dir(Local, Source, Rank).
	Local string
	// Workers is the number of files copied, or chunk files verified, at
	// once.
	Workers int
	// Progress, if set, is called as each step advances, with its bytes
	// done and its total; once with Wait (0 of 0) when another stage of
	// the same copy holds the lock. Calls do not overlap.
	Progress func(step Step, done, total int64)
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

// DefaultConfig returns the defaults; the caller sets Source, Rank and
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
	add(c.Rank >= 0, "rank %d is negative", c.Rank)
	add(c.Workers >= 1, "%d workers, want at least 1", c.Workers)
	return errors.Join(errs...)
}

// Result says what Stage did.
type Result struct {
	// Dir is the local dataset directory, what serve reads for this rank
	// (its --chunks): the manifest and the rank's directory.
	Dir string
	// Reused is true when an earlier copy was verified and kept.
	Reused bool
	// Replaced says why an earlier copy was not reused; empty when there
	// was none, or when it was reused.
	Replaced string
	// Bytes is the size of the copy: manifest, index and chunk files.
	Bytes int64
	// SourceBytes counts the bytes read from the source, CopiedBytes
	// those written into the local directory, VerifiedBytes those read
	// back and checked.
	SourceBytes, CopiedBytes, VerifiedBytes int64
	// CopyTime and VerifyTime are the time spent copying and verifying.
	CopyTime, VerifyTime time.Duration
}

// ErrInterrupted is returned by a Stage that Config.Stop stopped, once it
// has removed what it copied.
var ErrInterrupted = errors.New("stage: interrupted")

// Dir returns the directory of local that holds rank's copy of the
// dataset in source.
func Dir(local, source string, rank int) string {
	return filepath.Join(local, name(source, rank))
}

// Pattern returns Dir with chunk.RankPlaceholder for the rank: what serve
// --chunks reads on every rank when each node staged its own rank into
// local.
func Pattern(local, source string) string {
	return filepath.Join(local, namePattern(source))
}

// name is the copy's directory name: the source's base name, a hash of its
// resolved absolute path and the rank (chunks-1f2e3d4c.rank-3).
func name(source string, rank int) string { return chunk.ForRank(namePattern(source), rank) }

func namePattern(source string) string {
	src := resolve(source)
	h := fnv.New32a()
	_, _ = io.WriteString(h, src)
	return fmt.Sprintf("%s-%08x.rank-%s", filepath.Base(src), h.Sum32(), chunk.RankPlaceholder)
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

// Stage makes sure that Dir(cfg.Local, cfg.Source, cfg.Rank) holds a
// verified copy of the source's manifest and of rank cfg.Rank's shard:
// it reuses one an earlier Stage made, if the source has not changed and
// it verifies, and copies the shard otherwise. See the package
// documentation.
func Stage(cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if cfg.FreeSpace == nil {
		cfg.FreeSpace = statfsFree
	}
	n := name(cfg.Source, cfg.Rank)
	s := &stager{cfg: cfg, name: n, dir: filepath.Join(cfg.Local, n), src: resolve(cfg.Source),
		tmp: filepath.Join(cfg.Local, fmt.Sprintf(".%s.tmp-%d", n, os.Getpid()))}
	s.res.Dir = s.dir
	err := s.run()
	s.res.SourceBytes = s.srcBytes.Load()
	return s.res, err
}

// stager is one Stage.
type stager struct {
	cfg      Config
	name     string // of the copy's directory
	dir      string // the copy: Local/name
	tmp      string // where it is made
	src      string // the source, resolved
	res      Result
	srcBytes atomic.Int64
	// the step under way and its bytes, for Progress
	mu          sync.Mutex
	step        Step
	done, total int64
}

func (s *stager) run() error {
	data, m, err := s.readManifest()
	if err != nil {
		return err
	}
	if err := s.cfg.FS.MkdirAll(s.cfg.Local); err != nil {
		return fmt.Errorf("stage: local directory: %w", err)
	}
	unlock, err := lock(filepath.Join(s.cfg.Local, "."+s.name+".lock"), s.cfg.Stop, func() { s.progress(Wait, 0, 0) })
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.removeLeftovers(); err != nil {
		return err
	}
	reused, why, err := s.reuse(data, m)
	if err != nil || reused {
		s.res.Reused = reused
		return err
	}
	s.res.Replaced = why
	if err := s.retire(); err != nil {
		return err
	}
	if err := s.checkSpace(m, int64(len(data))); err != nil {
		return err
	}
	if err := s.copyShard(data, m); err != nil {
		if rerr := s.cfg.FS.RemoveAll(s.tmp); rerr != nil {
			return errors.Join(err, fmt.Errorf("stage: remove %s: %w", s.tmp, rerr))
		}
		return err
	}
	return nil
}

// readManifest reads the source's manifest, the one file Stage always
// reads from there, and checks that it has the rank.
func (s *stager) readManifest() ([]byte, *chunk.Manifest, error) {
	name := filepath.Join(s.cfg.Source, chunk.ManifestName)
	f, err := s.cfg.FS.Open(name, false)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: %s is not a complete dataset: %w", s.cfg.Source, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	s.srcBytes.Add(int64(len(data)))
	if err != nil {
		return nil, nil, fmt.Errorf("stage: read %s: %w", name, err)
	}
	m, err := chunk.ParseManifest(data, name)
	if err != nil {
		return nil, nil, err
	}
	if s.cfg.Rank >= m.Ranks {
		return nil, nil, fmt.Errorf("stage: %s was packed for %d ranks: there is no rank %d", s.cfg.Source, m.Ranks, s.cfg.Rank)
	}
	return data, m, nil
}

// copySize returns the bytes of the copy of rank r's shard of m, with a
// manifest of manifest bytes: the chunk files' sizes follow from the
// shard's files, bytes and chunks.
func copySize(m *chunk.Manifest, r int, manifest int64) int64 {
	sh := m.Shards[r]
	headers := int64(sh.Chunks)*chunk.HeaderSize(0) + sh.Files*(chunk.HeaderSize(1)-chunk.HeaderSize(0))
	return manifest + sh.IndexSize + headers + sh.Bytes
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

// progress starts step, of total bytes, at 0.
func (s *stager) progress(step Step, done, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step, s.done, s.total = step, done, total
	if s.cfg.Progress != nil {
		s.cfg.Progress(step, done, total)
	}
}

// advance adds n bytes done to the current step.
func (s *stager) advance(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done += n
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.step, s.done, s.total)
	}
}
