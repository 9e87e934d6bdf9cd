package rt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// Node is one rank of the runtime: its shard of the dataset, its protocol
// state, and its communicator to the other ranks. Open and Serve must be
// called on every rank; they run collectives.
type Node struct {
	cfg      Config
	comm     collectives.Comm
	me, size int
	dir      string
	man      *chunk.Manifest
	// homes[r] is the first shard rank r serves (chunk.Assign); shard
	// reads this rank's.
	homes []int
	shard *chunk.Home
	m     *proto.Mapping
	p     proto.Machine
	first proto.FileID
	k     int
	// sums of the shard's index, to check what the consumers received
	crcSum, labelSum int64
	maxSize          int64
	maxChunk         int64 // the bytes of the shard's largest chunk file
	// reqs carries client events to the loop; held are the Asks and Ends
	// for an epoch that has not started yet.
	reqs chan ClientEvent
	held []ClientEvent
	// offers carries clients' traces (Config.ClientTraces); early holds
	// those offered for an epoch not yet begun.
	offers chan TraceOffer
	early  map[uint32]TraceOffer
	// starts carries clients' start offers (Config.Resume).
	starts chan StartOffer
	// nextEpoch holds the files read for the next epoch while this one
	// drains (proto.Ready.Early), nextEpochStats what those reads cost.
	nextEpoch      map[proto.FileID]*file
	nextEpochStats loopStats
	// counts holds this epoch's deliveries on this rank per file id
	// (files left out as damaged count too).
	counts []int32
	// mix is what rank 0 keeps of the last epoch's order (Config.MixBatch).
	mix mixer
	// named holds the damage (shard, chunk, slot; slot −1 the header) already
	// named in this job, lost what a client hears for each damaged file
	// of this rank (Config.OnDamage "skip").
	named map[[3]int]bool
	lost  map[proto.FileID]string
	// sess is what the rank knows of its training processes; clients,
	// when set, counts its clients (WatchClients).
	sess    sessions
	clients func() (int, time.Time)
	// over is closed by TrainingOver; supervised is set by
	// SuperviseTraining.
	over       chan struct{}
	overOnce   sync.Once
	supervised bool
	// sizes are this rank's file sizes, from its opening until the window
	// policy's rank is built from every rank's; allSizes are then every
	// file's, by file id (a job resumed on another plan replans the
	// epoch's start on them).
	sizes, allSizes []int64
	// peers watches the rank's waits on its peers; synced holds the ranks
	// whose word for the next quietBarrier rank 0's loop received.
	peers  *peerWatch
	synced []int
}

// Open opens this rank's shard and builds the protocol state. Every rank
// must call it: it checks with the others that they all opened the same
// dataset, and fails on every rank when one of them could not (its error
// is then EveryRank).
func Open(cfg Config, comm collectives.Comm) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, comm: comm, me: comm.Rank(), size: comm.Size(), dir: chunk.ForRank(cfg.Chunks, comm.Rank()),
		reqs: make(chan ClientEvent, 1024), offers: make(chan TraceOffer, 16), early: make(map[uint32]TraceOffer),
		starts: make(chan StartOffer, 16), over: make(chan struct{})}
	n.peers = newPeerWatch(n)
	err := n.agree(n.open())
	if err == nil {
		err = n.sameDataset()
	}
	if err == nil && cfg.Policy == "window" {
		err = n.newWindowRank() // the same input on every rank: every rank fails alike
	}
	if err != nil {
		n.Close()
		return nil, everyRank{err}
	}
	return n, nil
}

// everyRank marks an error that every rank of the job returned at the
// same point: Open's checks agree across the ranks, as do Serve's verdict
// on the files skipped by all ranks and its resumption's, so each can
// stop normally without ending the job for the others.
type everyRank struct{ error }

func (e everyRank) Unwrap() error { return e.error }

// EveryRank reports whether every rank of the job returned err together
// (see everyRank); any other error of a rank leaves the others
// waiting for it, and must end the job (collectives.Comm.Abort).
func EveryRank(err error) bool { return errors.As(err, new(everyRank)) }

// Close releases the shard.
func (n *Node) Close() {
	if n.shard != nil {
		_ = n.shard.Close()
		n.shard = nil
	}
}

// ClientEvents returns where clients send what they ask and say.
func (n *Node) ClientEvents() chan<- ClientEvent { return n.reqs }

// WatchClients gives the rank a count of its clients attached now, and
// the time the last one went away (zero while one is attached, or before
// any was): a rank left without clients in the middle of an epoch ends
// the job after Config.ClientWait. Call it before Serve.
func (n *Node) WatchClients(count func() (attached int, alone time.Time)) { n.clients = count }

// TrainingOver tells the rank that its clients will ask for nothing
// more, in this epoch or any later one: the training beside it ended. The
// rank ends each epoch as soon as the requests in flight are answered,
// serving the other ranks meanwhile (they may still train), supplies an
// empty trace where the clients would supply one (Config.ClientTraces),
// and Serve returns once every rank's training is over. Any goroutine may
// call it, more than once.
func (n *Node) TrainingOver() {
	n.overOnce.Do(func() {
		close(n.over)
		go func() { // wakes the loop, if one is still serving
			select {
			case n.reqs <- Over{}:
			case <-time.After(time.Minute):
			}
		}()
	})
}

// SuperviseTraining says that the training beside this rank is watched
// by the process that started it (co-launch), which ends the job when a
// training process fails and calls TrainingOver when all succeeded. The
// rank then does not judge the training by its clients: a training
// process that drops its sampler, or every client leaving, while others
// of the node still run (saving a checkpoint, say) ends nothing. Call it
// before Serve.
func (n *Node) SuperviseTraining() { n.supervised = true }

// trainingOver reports whether TrainingOver was called.
func (n *Node) trainingOver() bool {
	select {
	case <-n.over:
		return true
	default:
		return false
	}
}

// Config returns the configuration the node was opened with.
func (n *Node) Config() Config { return n.cfg }

// MaxFileSize returns the size of this rank's largest file.
func (n *Node) MaxFileSize() int64 { return n.maxSize }

// Manifest returns the served dataset's manifest.
func (n *Node) Manifest() *chunk.Manifest { return n.man }

// Mapping returns the protocol's mapping of the dataset.
func (n *Node) Mapping() *proto.Mapping { return n.m }

func (n *Node) open() error {
	man, err := chunk.ReadManifest(n.cfg.FS, n.dir)
	if err != nil {
		return err
	}
	if n.homes, err = chunk.AssignDir(n.cfg.Chunks, man, n.size); err != nil {
		return fmt.Errorf("rt: %w", err)
	}
	lo, hi := n.homes[n.me], n.homes[n.me+1]
	dirs := n.cfg.ShardDirs
	if dirs == nil {
		for range hi - lo {
			dirs = append(dirs, n.dir)
		}
	}
	if len(dirs) != hi-lo {
		return fmt.Errorf("rt: rank %d serves shards %d–%d of %s, and was given %d directories for them", n.me, lo, hi-1, n.dir, len(dirs))
	}
	n.man, n.k = man, man.K
	if n.shard, err = chunk.OpenHome(n.cfg.FS, dirs, man, lo); err != nil {
		return err
	}
	if err := n.checkSizes(); err != nil {
		return err
	}
	sizes := make([]int64, n.shard.Len())
	for i := range sizes {
		e := n.shard.Record(i)
		sizes[i] = int64(e.Size)
		n.maxSize = max(n.maxSize, sizes[i])
		n.maxChunk = max(n.maxChunk, e.Offset+int64(e.Size))
		n.crcSum += int64(e.CRC)
		n.labelSum += int64(e.Label)
	}
	if n.cfg.MemCgroupFraction > 0 {
		if n.cfg.MemBytes, err = n.cgroupBudget(); err != nil {
			return err
		}
	}
	if err := n.newRank(sizes); err != nil {
		return err
	}
	if man.Ranks != n.size {
		fmt.Fprintf(n.cfg.Log, "brandrt: rank %d serves shards %d–%d of %d: %d files, %s\n",
			n.me, lo, hi-1, man.Ranks, n.shard.Len(), mib(n.m.ShardBytes(n.me)))
	}
	if err := n.fitsNode(); err != nil {
		return err
	}
	if err := n.fitsCgroup(); err != nil {
		return err
	}
	// Chunks are read into the memory shared with the clients only when
	// they stay there whole (the budget holds the shard: see ioPool's
	// resident). Otherwise the files kept from a chunk are copied out of
	// it into that memory one by one, and the chunk's buffer is reused
	// for the next read: lent from the shared memory too, the chunk-sized
	// buffers cut into the places freed files leave and the arena kept
	// growing past its slack and giving pages back to the kernel (16 % of
	// the rank's CPU in fallocate, measured, and page faults after).
	if n.cfg.Memory != nil && n.m.MemBytes(n.me) >= n.m.ShardBytes(n.me) {
		n.shard.SetMemory(n.cfg.Memory)
	}
	return nil
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
		probs, _ = n.shard.CheckSizes(n.shard.Chunks()) // all of them: an unreachable one among many cut short waits
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
	fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: chunk files cut short: %d; the files they lack are left out (--on-damage skip):\n%v\n", n.me, bad, err)
	return nil
}

// newRank builds the mapping from the manifest and the budget, and the
// protocol state of this rank.
func (n *Node) newRank(sizes []int64) error {
	m, err := newMapping(n.man, n.homes, n.cfg.MemBytes, n.cfg.MemFraction)
	if err != nil {
		return err
	}
	n.m = m
	n.first, _ = m.RankFiles(n.me)
	if n.cfg.Policy == "window" {
		n.sizes = sizes // the window rank is built once every rank opened (Open)
		return nil
	}
	pc := proto.DefaultConfig()
	pc.Rank, pc.Mapping, pc.Sizes = n.me, m, sizes
	pc.Variant, pc.Window, pc.RemoteMemBytes, pc.Seed = n.cfg.Variant, n.cfg.Window, n.remoteBytes(), n.cfg.Seed
	n.p, err = proto.NewRank(pc)
	return err
}

// newWindowRank builds this rank's window policy, which plans every
// rank's part of each epoch and so needs every rank's file sizes: the
// ranks gather them (as 32-bit words; index records hold 32-bit sizes).
func (n *Node) newWindowRank() error {
	own := make([]int32, len(n.sizes))
	for i, s := range n.sizes {
		own[i] = int32(uint32(s))
	}
	n.sizes = nil
	all, counts, err := n.comm.Allgatherv(own)
	if err != nil {
		return err
	}
	n.allSizes = make([]int64, len(all))
	for i, s := range all {
		n.allSizes[i] = int64(uint32(s))
	}
	every := make([][]int64, len(counts))
	for r, c := range counts {
		off := 0
		for _, c := range counts[:r] {
			off += c
		}
		every[r] = n.allSizes[off : off+c : off+c]
	}
	remote := make([]int64, n.size) // every rank's: every rank plans every rank's pushes
	for r := range remote {
		remote[r] = n.remoteBytesOf(r)
	}
	wc := proto.WindowConfig{Rank: n.me, Mapping: n.m, Sizes: every, Seed: n.cfg.Seed,
		Lead: proto.DefaultLead, Ramp: n.cfg.Ramp, Window: n.cfg.Window, Remote: remote}
	if !n.cfg.ClientTraces { // a resumed job plans the epochs before it again
		files, seed := n.m.Files(), n.cfg.Seed
		wc.Traces = func(e uint32) [][]proto.FileID { return proto.Traces(files, n.size, seed, e) }
		wc.Epochs = uint32(n.cfg.Epochs) // the next epoch's first chunks are read while one drains
	}
	n.p, err = proto.NewWindowRank(wc)
	if err != nil {
		return fmt.Errorf("rt: rank %d: the window policy reads whole chunks into each rank's memory (--mem): %w; "+
			"give it more memory, pack with a smaller --chunk-files, or serve with --policy paper", n.me, err)
	}
	return nil
}

// mib prints n bytes in binary units.
func mib(n int64) string { return humanize.IBytes(uint64(n)) }

// remoteBytes is the rank's limit for files of other ranks held ahead of
// their requests: Config.RemoteMemBytes, by default a tenth of the budget.
func (n *Node) remoteBytes() int64 { return n.remoteBytesOf(n.me) }

// remoteBytesOf is rank r's limit (remoteBytes).
func (n *Node) remoteBytesOf(r int) int64 {
	if n.cfg.RemoteMemBytes < 0 {
		return n.m.MemBytes(r) / 10
	}
	return n.cfg.RemoteMemBytes
}

// agree tells every rank which ranks failed to start. A rank that failed
// returns its own error; the others name the ranks that failed.
func (n *Node) agree(err error) error {
	v := make([]int64, n.size)
	if err != nil {
		v[n.me] = 1
	}
	// A rank may take long to open (its storage waits: see checkSizes);
	// the others wait for it without spinning in MPI's collective.
	if berr := n.quietBarrier(context.Background(), ""); berr != nil {
		return errors.Join(err, berr)
	}
	all, cerr := n.comm.AllreduceSum(v)
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", n.me, err)
	}
	var failed []int
	for r, f := range all {
		if f != 0 {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("rt: rank %d: ranks %v could not start (their messages say why)", n.me, failed)
	}
	return nil
}

// sameDataset checks that every rank read the same manifest.
func (n *Node) sameDataset() error {
	h := n.man.Hash()
	v := []int64{int64(h >> 32), int64(h & 0xffffffff)}
	v = append(v, -v[0], -v[1])
	got, err := n.comm.AllreduceMax(v)
	if err != nil {
		return err
	}
	if !slices.Equal(got[:2], []int64{-got[2], -got[3]}) {
		return fmt.Errorf("rt: rank %d: the ranks do not all see the same dataset (this rank reads %s, manifest hash %016x): check --chunks on every node",
			n.me, n.dir, h)
	}
	return nil
}
