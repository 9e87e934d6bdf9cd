package stage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// problem is a file of a copy that fails verification.
type problem struct {
	file string // its path in the copy's directory
	err  error
}

// verify checks the shard in the copy dir against the source's manifest:
// the index's checksum and counts, then, with the configured workers,
// each chunk file's size, its header and every file's checksum. It
// returns what fails, one problem per file: the index alone when it
// fails, since the chunk files are checked against it. The error is
// ErrInterrupted.
func (sc *shardCopy) verify(dir string) ([]problem, error) {
	start := time.Now()
	defer func() { sc.res.VerifyTime += time.Since(start) }()
	s, m, r := sc.st, sc.st.man, sc.shard
	index := filepath.Join(chunk.RankDir(r), chunk.IndexName)
	sh, err := chunk.OpenShard(s.cfg.FS, dir, r)
	if err != nil {
		return []problem{{index, err}}, nil
	}
	defer sh.Close()
	if err := indexAgrees(sh.Index(), m, r, filepath.Join(dir, index)); err != nil {
		return []problem{{index, err}}, nil
	}
	n := sh.Index().Chunks()
	s.progress(r, Verify, 0, copySize(m, r, 0)-m.Shards[r].IndexSize)
	errs := make([]error, n)
	var next, verified atomic.Int64
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := int(next.Add(1) - 1); c < n && !s.stopped(); c = int(next.Add(1) - 1) {
				size, err := sc.checkChunk(sh, dir, c)
				errs[c] = err
				verified.Add(size)
				s.advance(size)
			}
		}()
	}
	wg.Wait()
	sc.res.VerifiedBytes += verified.Load()
	if s.stopped() {
		return nil, ErrInterrupted
	}
	var probs []problem
	for c, err := range errs {
		if err != nil {
			probs = append(probs, problem{filepath.Join(chunk.RankDir(r), chunk.ChunkName(c)), err})
		}
	}
	return probs, nil
}

// indexAgrees says where shard r's index, in the file name, disagrees with
// the manifest.
func indexAgrees(ix *chunk.Index, m *chunk.Manifest, r int, name string) error {
	sh := m.Shards[r]
	if ix.K() == m.K && ix.First() == sh.FirstFile && int64(ix.Len()) == sh.Files && ix.Chunks() == sh.Chunks && ix.CRC() == sh.IndexCRC && m.ChunksAgree(ix, r) {
		return nil
	}
	return fmt.Errorf("stage: %s: %w: holds files [%d, +%d) in %d chunks of K=%d with records checksum %08x; the manifest says [%d, +%d) in %d chunks of K=%d with %08x",
		name, errMismatch, ix.First(), ix.Len(), ix.Chunks(), ix.K(), ix.CRC(), sh.FirstFile, sh.Files, sh.Chunks, m.K, sh.IndexCRC)
}

// errMismatch is wrapped by errors about an index that is not the one the
// manifest describes.
var errMismatch = errors.New("not the manifest's index")

// checkChunk checks chunk c of the shard in the copy dir: its file's size
// against the index, then its header and every file's checksum. It
// returns the chunk file's size when it is intact.
func (sc *shardCopy) checkChunk(sh *chunk.Shard, dir string, c int) (int64, error) {
	ix := sh.Index()
	last := ix.Record(ix.ChunkFirst(c) + ix.ChunkFiles(c) - 1)
	want := last.Offset + int64(last.Size)
	name := filepath.Join(dir, chunk.RankDir(ix.Rank()), chunk.ChunkName(c))
	fi, err := sc.st.cfg.FS.Stat(name)
	if err != nil {
		return 0, fmt.Errorf("stage: shard %d chunk %d: %w", ix.Rank(), c, err)
	}
	if fi.Size() != want {
		return 0, fmt.Errorf("stage: shard %d chunk %d (%s): %d bytes, the index says %d", ix.Rank(), c, name, fi.Size(), want)
	}
	ch, err := sh.ReadChunk(c)
	if err != nil {
		return 0, err
	}
	ch.Release()
	return want, nil
}

// describe names the files of probs and what is wrong with them, the
// first few of them.
func describe(probs []problem) string {
	const most = 5
	var b strings.Builder
	for i, p := range probs {
		if i == most {
			fmt.Fprintf(&b, "; and %d more files", len(probs)-most)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.err.Error())
	}
	return b.String()
}
