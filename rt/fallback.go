package rt

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// fallback is the dataset that a rank's staged copies were copied from
// (Site.Source): a chunk that a copy holds damaged, read twice, is read
// from there in its place (readChunk), before it counts as damage. It is
// opened at the first such read, so that a job whose copies are intact
// reads nothing of it. Storage that cannot be reached is waited for as
// for any read (storageWatch), the first time; once a wait for it ran
// out, later reads try it once, until it answers again.
type fallback struct {
	fsys chunk.FS
	dirs []string // the source's directory of each shard served
	man  *chunk.Manifest
	lo   int          // the first shard served
	mem  chunk.Memory // what the copies' chunks are read into, if set
	mu   sync.Mutex
	home *chunk.Home
	gone bool // the last wait for it ran out
}

// newFallback returns the rank's fallback, or nil without Site.Source.
func (n *Node) newFallback(mem chunk.Memory) *fallback {
	if n.site.Source == "" {
		return nil
	}
	lo, hi := n.data.homes[n.me], n.data.homes[n.me+1]
	return &fallback{fsys: n.site.FS, man: n.data.man, lo: lo, mem: mem, dirs: slices.Repeat([]string{chunk.ForRank(n.site.Source, n.me)}, hi-lo)}
}

// standIn reads chunk c from the source in place of res, the copy's read
// that found damage (twice). It returns the source's read when that is
// intact, noting the copy's damage (readResult.staged); else res, noting
// why the source could not stand in (readResult.source).
func (f *fallback) standIn(res readResult, r proto.Read, c int, w *storageWatch, mem chunk.Memory) readResult {
	var got readResult
	err := f.await(w, func() error {
		home, err := f.open()
		if err == nil {
			got = readTwice(home, r, c, func(try func() error) error { return try() }, mem)
			err = got.err
		}
		return err
	})
	switch {
	case err == nil && len(got.damage) == 0:
		res.letGo()
		got.staged = &res.damage[0]
		got.stagedFrom = f.chunkFile(got.staged.Rank, got.staged.Chunk)
		return got
	case err != nil:
		res.source = fmt.Errorf("its staged copy is damaged and the source cannot be read either: %w", err)
	default:
		got.letGo()
		res.source = fmt.Errorf("its staged copy is damaged and so is the source: %v", &got.damage[0])
	}
	return res
}

// await runs try as storageWatch.await does, or once when the last wait
// for the source ran out; an error past a wait says so.
func (f *fallback) await(w *storageWatch, try func() error) error {
	f.mu.Lock()
	gone := f.gone
	f.mu.Unlock()
	if gone {
		err := try()
		f.setGone(chunk.Unreachable(err))
		return err
	}
	err := w.await(try)
	if chunk.Unreachable(err) && w.limit > 0 {
		f.setGone(true)
		return fmt.Errorf("%w, still after waiting %v for it (--storage-wait)", err, w.limit)
	}
	return err
}

func (f *fallback) setGone(gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone = gone
}

// open opens the source's shards, once.
func (f *fallback) open() (*chunk.Home, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.home != nil {
		return f.home, nil
	}
	home, err := chunk.OpenHome(f.fsys, f.dirs, f.man, f.lo)
	if err != nil {
		return nil, err
	}
	if f.mem != nil {
		home.SetMemory(f.mem)
	}
	home.KeepOpen(0) // it reads only chunks found damaged in a copy: keeping them open saves nothing
	f.home = home
	return home, nil
}

// chunkFile is the source's file of chunk c of shard.
func (f *fallback) chunkFile(shard, c int) string {
	return filepath.Join(f.dirs[shard-f.lo], chunk.RankDir(shard), chunk.ChunkName(c))
}

// close closes the source's shards, if open.
func (f *fallback) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.home != nil {
		_ = f.home.Close()
		f.home = nil
	}
}
