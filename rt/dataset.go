package rt

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// dataset is what a rank knows of the dataset it serves (Node.data): the
// manifest, the shards it serves, the mapping of every rank's files, and
// the sums and sizes of its own.
type dataset struct {
	// dir is this rank's directory of the dataset, man its manifest;
	// opened are the directories whose manifests were read (dir, and the
	// staged copies of its shards), hash the manifest's (see replaced).
	dir    string
	man    *chunk.Manifest
	opened []string
	hash   uint64
	// homes[r] is the first shard rank r serves (chunk.Assign); shard
	// reads this rank's, source the dataset its staged copies were copied
	// from (nil: none).
	homes  []int
	shard  *chunk.Home
	source *fallback
	// m maps every rank's files; first is this rank's first file.
	m     *proto.Mapping
	first proto.FileID
	// sums of the shard's index, to check what the consumers received
	crcSum, labelSum int64
	// maxSize is the size of the shard's largest file, largest the
	// dataset's (Node.largest)
	maxSize, largest int64
	maxChunk         int64 // the bytes of the shard's largest chunk file
	facts            memFacts
	handFit          int64 // fitHanded's bound on the files handed on (0: none)
	// chunkBytes are the bytes of each of the shard's chunks, by its
	// number in the shard
	chunkBytes []int64
	// sizes are this rank's file sizes, from its opening until its
	// protocol state is built (the window policy's from every rank's);
	// allSizes are then every file's, by file id (a job resumed on
	// another plan replans the epoch's start on them).
	sizes, allSizes []int64
	// files is the dataset's files, every rank's (from the manifest)
	files int
	// traces are the last epoch's traces drawn from the seed (seedTraces)
	traces struct {
		mu     sync.Mutex
		epoch  uint32
		traces [][]proto.FileID
	}
	// window is what the window policy's rank was built from
	// (newWindowRank).
	window proto.WindowConfig
}

// open reads the manifest and opens the shards this rank serves (fit
// then sizes the rank on them). A manifest or index that cannot be
// reached (a mount slow to appear) is waited for as chunk files are
// (storageWatch).
func (n *Node) open() error {
	w := n.newStorageWatch()
	var man *chunk.Manifest
	err := w.retry(func() (err error) { man, err = chunk.ReadManifest(n.site.FS, n.data.dir); return err })
	if err != nil {
		return err
	}
	if n.data.homes, err = chunk.AssignDir(n.cfg.Chunks, man, n.size); err != nil {
		return fmt.Errorf("rt: %w", err)
	}
	if err := n.openShard(man, w); err != nil {
		return err
	}
	n.data.files = int(man.Files)
	n.data.sizes = n.data.fileSizes()
	n.data.facts = newMemFacts(n.data.sizes, n.site.Memory)
	// Where the file system allows it (FUSE, NFS), a chunk read puts
	// each file straight into a buffer of its own from the memory shared
	// with the clients (readOnce). Elsewhere chunks are read into the
	// shard's own buffers, reused read after read, and the files kept
	// from a chunk are copied out of it into that memory one by one,
	// also those of a chunk that stays in memory from one epoch to the
	// next (ioPool's resident). Chunk-sized buffers lent from the shared memory cut into
	// the places freed files leave: the arena kept growing past its slack
	// and giving pages back to the kernel (16 % of the rank's CPU in
	// fallocate, measured, and page faults after), and a file inside a
	// chunk read there seldom starts a page, so it could not be handed on
	// in place.
	n.data.source = n.newFallback(nil)
	return nil
}

// largest gathers the largest file of every rank's shard: a file of
// another rank's received to be answered takes memory of this one's
// (Footprint.Received, MPI). Every rank calls it, once each opened.
func (n *Node) largest() error {
	all, err := n.comm.AllreduceMax([]int64{n.data.maxSize})
	if err == nil {
		n.data.largest = all[0]
	}
	return err
}

// fit sizes the rank's budget (a share of its memory cgroup's), builds
// the mapping and the protocol state within it, and checks that the
// rank's footprint fits its node and its cgroup.
func (n *Node) fit() error {
	if n.cfg.Mem.Cgroup > 0 {
		b, err := n.cgroupBudget()
		if err != nil {
			return err
		}
		n.budget = Budget{Bytes: b}
	}
	if err := n.newRank(); err != nil {
		return err
	}
	if lo, hi := n.data.homes[n.me], n.data.homes[n.me+1]; n.data.man.Ranks != n.size {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d serves shards %d–%d of %d: %d files, %s\n",
			n.me, lo, hi-1, n.data.man.Ranks, n.data.shard.Len(), mib(n.data.m.ShardBytes(n.me)))
	}
	if err := n.fitsNode(); err != nil {
		return err
	}
	return n.fitsCgroup()
}

// openShard opens the shards this rank serves of the dataset man
// describes (in Site.ShardDirs, staged copies, or the dataset's own
// directory), retrying through w, and checks that every chunk file is
// there whole.
func (n *Node) openShard(man *chunk.Manifest, w *storageWatch) error {
	lo, hi := n.data.homes[n.me], n.data.homes[n.me+1]
	dirs := n.site.ShardDirs
	if dirs == nil {
		dirs = slices.Repeat([]string{n.data.dir}, hi-lo)
	}
	if len(dirs) != hi-lo {
		return fmt.Errorf("rt: rank %d serves shards %d–%d of %s, and was given %d directories for them", n.me, lo, hi-1, n.data.dir, len(dirs))
	}
	n.data.man, n.data.hash = man, man.Hash()
	n.data.opened = distinct(append([]string{n.data.dir}, dirs...))
	if err := w.retry(func() (err error) { n.data.shard, err = chunk.OpenHome(n.site.FS, dirs, man, lo); return err }); err != nil {
		return err
	}
	if n.cfg.OpenFiles >= 0 {
		n.data.shard.KeepOpen(n.cfg.OpenFiles)
	}
	return n.checkSizes()
}

// fileSizes returns the size of each file of the open shard, noting the
// largest file, each chunk's bytes, the largest chunk, and the sums of
// the checksums and labels.
func (d *dataset) fileSizes() []int64 {
	sizes := make([]int64, d.shard.Len())
	d.chunkBytes = make([]int64, d.shard.Chunks())
	for i := range sizes {
		e, c := d.shard.Locate(i)
		sizes[i] = int64(e.Size)
		d.maxSize = max(d.maxSize, sizes[i])
		d.chunkBytes[c] = max(d.chunkBytes[c], e.Offset+int64(e.Size))
		d.maxChunk = max(d.maxChunk, d.chunkBytes[c])
		d.crcSum += int64(e.CRC)
		d.labelSum += int64(e.Label)
	}
	return sizes
}

// checkSizes checks, before anything is read, that every chunk file of
// the shard is there whole. One cut short is damage: it stops the job at
// once (Config.OnDamage "fail"), or is named and its lost files left out
// when read. One that cannot be reached (missing, unreadable) is looked
// at again for up to Config.StorageWait, as reads are, and then stops the
// job, whatever OnDamage says.
func (n *Node) checkSizes() error {
	var probs []error
	err := n.newStorageWatch().retry(func() error {
		probs, _ = n.data.shard.CheckSizes(n.data.shard.Chunks()) // all of them: an unreachable one among many cut short waits
		for _, p := range probs {
			if chunk.Unreachable(p) {
				return p
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rt: rank %d: %w", n.me, err)
	}
	bad := len(probs)
	if bad == 0 {
		return nil
	}
	err = chunk.SizesError(probs[:min(bad, 10)], bad)
	if n.cfg.OnDamage != "skip" {
		return fmt.Errorf("rt: chunk files of rank %d cut short: %d (brandrt serve --on-damage skip leaves their files out; brandrt verify checks every byte):\n%w", n.me, bad, err)
	}
	fmt.Fprintf(n.site.Log, "brandrt: rank %d: chunk files cut short: %d; the files they lack are left out (--on-damage skip):\n%v\n", n.me, bad, err)
	return nil
}

// distinct returns dirs without repeats, in order.
func distinct(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// replaced returns an error when the dataset on storage is no longer the
// one this rank opened: packed again (brandrt pack --force), or another
// one put in its place, under the running job. Its chunk files then hold
// other files than the index read at start says, which a read takes for
// damage: the I/O worker that found damage asks here (readResult.replaced),
// and Node.damaged takes its answer first; each epoch's first read asks
// too, with gone false: a manifest that cannot be found is then no
// answer, since a mount gone looks the same and the reads wait for it
// (Config.StorageWait). Only fields fixed by open are read, so any
// goroutine may ask.
func (n *Node) replaced(gone bool) error {
	for _, dir := range n.data.opened {
		if how := n.changed(dir, gone); how != "" {
			return fmt.Errorf("rt: rank %d: the dataset at %s was packed again (or replaced) while this job served it: %s; "+
				"its chunk files no longer match the index the rank read at start, so the job stops: start the job again to serve the new dataset "+
				"(and pack into another directory while a job serves one)", n.me, dir, how)
		}
	}
	return nil
}

// changed says how the manifest in dir differs from the one this rank
// opened, or "" when it does not, or cannot be read (storage's fault,
// not the dataset's), or, unless gone, cannot be found.
func (n *Node) changed(dir string, gone bool) string {
	man, err := chunk.ReadManifest(n.site.FS, dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !gone:
		return ""
	case errors.Is(err, fs.ErrNotExist):
		return "its manifest is gone (a pack under way, or the dataset removed)"
	case chunk.Unreachable(err):
		return ""
	case err != nil:
		return fmt.Sprintf("its manifest is another now (%v)", err)
	case man.Hash() != n.data.hash:
		return fmt.Sprintf("its manifest says it was packed at %s, and the one this job opened at %s",
			man.Created.Format(time.DateTime), n.data.man.Created.Format(time.DateTime))
	}
	return ""
}
