package chunk

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// VerifyReport is what Verify found.
type VerifyReport struct {
	// Ranks, Chunks, Files and Bytes count what was checked.
	Ranks, Chunks int
	Files, Bytes  int64
	// Skipped lists the ranks whose directory is not in the dataset
	// directory (a node-local dataset holds only its own).
	Skipped []int
	// Problems lists what is damaged or missing, each naming the rank,
	// the chunk file, the slot and the original path where it applies.
	Problems []error
}

// maxVerifyProblems bounds the problems Verify lists.
const maxVerifyProblems = 50

// VerifyConfig says what to verify and how.
type VerifyConfig struct {
	FS  FS
	Dir string
	// Workers is the number of chunks checked at once.
	Workers int
	// Local accepts rank directories missing from Dir (a node-local
	// dataset); otherwise a missing rank is a problem.
	Local bool
	// Progress, if set, is called with the chunks checked and the total.
	Progress func(done, total int64)
}

// Verify checks the dataset in cfg.Dir: the manifest, each rank's index
// against it, and every chunk whole (structure and every checksum). It
// returns an error only when the dataset cannot be read at all; damage is
// reported in the report's Problems.
func Verify(cfg VerifyConfig) (*Manifest, *VerifyReport, error) {
	m, err := ReadManifest(cfg.FS, cfg.Dir)
	if err != nil {
		return nil, nil, err
	}
	rep := &VerifyReport{}
	var shards []*Shard
	defer func() {
		for _, s := range shards {
			_ = s.Close()
		}
	}()
	var total int64
	for r, info := range m.Shards {
		if _, err := cfg.FS.Stat(join(cfg.Dir, RankDir(r))); errors.Is(err, os.ErrNotExist) && cfg.Local {
			rep.Skipped = append(rep.Skipped, r)
			continue
		}
		s, err := openChecked(cfg.FS, cfg.Dir, m, r)
		if err != nil {
			rep.add(err)
			continue
		}
		shards = append(shards, s)
		rep.Ranks++
		total += int64(info.Chunks)
	}
	verifyChunks(cfg, shards, total, rep)
	return m, rep, nil
}

// openChecked opens rank r's shard and checks its index against the
// manifest.
func openChecked(fsys FS, dir string, m *Manifest, r int) (*Shard, error) {
	s, err := OpenShard(fsys, dir, r)
	if err != nil {
		return nil, err
	}
	if err := indexAgrees(s.Index(), m, join(dir, ManifestName), r); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// indexAgrees says, field by field, where rank r's index disagrees with
// the manifest (named man).
func indexAgrees(ix *Index, m *Manifest, man string, r int) error {
	info := m.Shards[r]
	var errs []error
	if ix.K() != m.K {
		errs = append(errs, fmt.Errorf("chunk: %s: K=%d but shard %d's index has chunks of %d files", man, m.K, r, ix.K()))
	}
	if !m.ChunksAgree(ix, r) {
		errs = append(errs, fmt.Errorf("chunk: %s: the chunks of shard %d's index hold other numbers of files than the manifest lists", man, r))
	}
	if ix.First() != info.FirstFile || int64(ix.Len()) != info.Files {
		errs = append(errs, fmt.Errorf("chunk: %s: says shard %d holds files [%d, +%d) but its index holds [%d, +%d)", man, r, info.FirstFile, info.Files, ix.First(), ix.Len()))
	}
	if ix.CRC() != info.IndexCRC {
		errs = append(errs, fmt.Errorf("chunk: %s: records checksum %08x for shard %d's index, which has %08x", man, info.IndexCRC, r, ix.CRC()))
	}
	return errors.Join(errs...)
}

func verifyChunks(cfg VerifyConfig, shards []*Shard, total int64, rep *VerifyReport) {
	type job struct {
		s *Shard
		c int
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < max(1, cfg.Workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				ch, err := j.s.ReadChunk(j.c)
				mu.Lock()
				if err != nil {
					rep.add(err)
				} else {
					rep.Chunks++
					for i := 0; i < ch.Slots(); i++ {
						rep.Files++
						rep.Bytes += int64(len(ch.File(i)))
					}
					ch.Release()
				}
				mu.Unlock()
				if n := done.Add(1); cfg.Progress != nil && (n%64 == 0 || n == total) {
					cfg.Progress(n, total)
				}
			}
		}()
	}
	for _, s := range shards {
		for c := 0; c < s.Index().Chunks(); c++ {
			jobs <- job{s, c}
		}
	}
	close(jobs)
	wg.Wait()
}

func (r *VerifyReport) add(err error) {
	if len(r.Problems) < maxVerifyProblems {
		r.Problems = append(r.Problems, err)
	}
}
