package rt

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/proto"
)

// Node is one rank of the runtime: its shard of the dataset, its protocol
// state, and its communicator to the other ranks. Open and Serve must be
// called on every rank; they run collectives. Its state is in parts, by
// concern, each in the file that deals with it.
type Node struct {
	cfg  Config
	site Site
	// budget is Config.Mem resolved once, when the node opens: bytes, or
	// a share of the shard (Budget).
	budget   Budget
	comm     collectives.Comm
	me, size int
	// p is the rank's protocol machine (newRank, newWindowRank).
	p proto.Machine

	data    dataset    // dataset.go: the dataset and the shard this rank serves
	clients clientSide // clients.go: what the clients send, and the training beside them
	next    nextEpoch  // serve.go: what came for the next epoch before it began
	tally   tally      // stats.go: this epoch's deliveries per file, and the last epoch's order
	damage  damageLog  // damage.go: damage named in this job, files left out
	peers   *peerWatch // peers.go: waits on peers, and their word for a barrier
	// training is which ranks have training beside them (training.go)
	training *trainingWatch
	readers  readers // readers.go: the processes that read the trace, and who asked each position
	// onEpoch and onResume announce epochs as they start (Announce)
	onEpoch  func(epoch uint32, positions int)
	onResume func(epoch uint32, from int, rest bool)
}

// Open opens this rank's shard and builds the protocol state. Every rank
// must call it: it checks with the others that they all opened the same
// dataset, and fails on every rank when one of them could not (its error
// is then EveryRank).
func Open(cfg Config, site Site, comm collectives.Comm) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, site: site.withDefaults(), budget: cfg.Mem, comm: comm, me: comm.Rank(), size: comm.Size(), data: dataset{dir: chunk.ForRank(cfg.Chunks, comm.Rank())},
		clients: clientSide{events: make(chan ClientEvent, 1024), offers: make(chan TraceOffer, 16), starts: make(chan StartOffer, 16),
			over: make(chan struct{})},
		next: nextEpoch{offers: make(map[uint32]TraceOffer)}}
	n.peers = newPeerWatch(n)
	n.training = newTrainingWatch(n)
	err := n.agree(n.open())
	if err == nil {
		err = n.largest()
	}
	if err == nil {
		err = n.agree(n.fit())
	}
	if err == nil {
		err = n.sameDataset()
	}
	if err == nil {
		err = n.sameSettings()
	}
	if err == nil && cfg.Policy == PolicyWindow {
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

// Close releases the shard, and the source of its staged copies if it
// was opened.
func (n *Node) Close() {
	n.data.source.close()
	if n.data.shard != nil {
		_ = n.data.shard.Close()
		n.data.shard = nil
	}
}

// ClientEvents returns where clients send what they ask and say.
func (n *Node) ClientEvents() chan<- ClientEvent { return n.clients.events }

// WatchClients gives the rank a look at its clients (Clients): a rank
// left without a client that reads in the middle of an epoch ends the
// job after Config.ClientWait. Call it before Serve.
func (n *Node) WatchClients(look func() Clients) { n.clients.look = look }

// Clients is what a rank's clients do now (Node.WatchClients).
type Clients struct {
	// Attached counts the clients attached; Reading those of them that
	// read what they are answered (one that left answers unread for a
	// few seconds does not).
	Attached, Reading int
	// Since is when the last client that read went away or stopped
	// reading: the zero time while one reads, or before any attached.
	Since time.Time
	// Stalled names the clients attached that do not read, when none
	// reads ("" else): for the message that ends the job.
	Stalled string
}

// TrainingOver tells the rank that its clients will ask for nothing
// more, in this epoch or any later one: the training beside it ended. The
// rank ends each epoch as soon as the requests in flight are answered,
// serving the other ranks meanwhile (they may still train), supplies an
// empty trace where the clients would supply one (Config.ClientTraces),
// and Serve returns once every rank's training is over. Any goroutine may
// call it, more than once.
func (n *Node) TrainingOver() {
	n.clients.overOnce.Do(func() {
		close(n.clients.over)
		go func() { // wakes the loop, if one is still serving
			select {
			case n.clients.events <- Over{}:
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
func (n *Node) SuperviseTraining() { n.clients.supervised = true }

// trainingOver reports whether TrainingOver was called.
func (n *Node) trainingOver() bool {
	select {
	case <-n.clients.over:
		return true
	default:
		return false
	}
}

// Config returns the configuration the node was opened with.
func (n *Node) Config() Config { return n.cfg }

// Budget returns the rank's budget for its own files, resolved when it
// opened: Config.Mem, a share of the memory cgroup turned into bytes.
func (n *Node) Budget() Budget { return n.budget }

// MaxFileSize returns the size of this rank's largest file.
func (n *Node) MaxFileSize() int64 { return n.data.maxSize }

// LargestFile returns the size of the dataset's largest file, every
// rank's.
func (n *Node) LargestFile() int64 { return n.data.largest }

// Manifest returns the served dataset's manifest.
func (n *Node) Manifest() *chunk.Manifest { return n.data.man }

// Mapping returns the protocol's mapping of the dataset.
func (n *Node) Mapping() *proto.Mapping { return n.data.m }

// newRank builds the mapping from the manifest and the budget, and the
// protocol state of this rank, from its file sizes (n.data.sizes).
func (n *Node) newRank() error {
	m, err := newMapping(n.data.man, n.data.homes, n.budget.Bytes, n.budget.Shard)
	if err != nil {
		return err
	}
	n.data.m = m
	n.data.first, _ = m.RankFiles(n.me)
	if n.cfg.Policy == PolicyWindow {
		return nil // built from n.data.sizes once every rank opened (Open)
	}
	pc := proto.DefaultConfig()
	pc.Rank, pc.Mapping, pc.Sizes = n.me, m, n.data.sizes
	n.data.sizes = nil
	pc.Variant, pc.Window, pc.RemoteMemBytes, pc.Seed = n.cfg.Variant, n.cfg.Window, n.remoteBytes(), n.cfg.Seed
	n.p, err = proto.NewRank(pc)
	return err
}

// newWindowRank builds this rank's window policy, which plans every
// rank's part of each epoch and so needs every rank's file sizes: the
// ranks gather them (as 32-bit words; index records hold 32-bit sizes).
func (n *Node) newWindowRank() error {
	own := make([]int32, len(n.data.sizes))
	for i, s := range n.data.sizes {
		own[i] = int32(uint32(s))
	}
	n.data.sizes = nil
	all, counts, err := n.comm.Allgatherv(own)
	if err != nil {
		return err
	}
	n.data.allSizes = make([]int64, len(all))
	for i, s := range all {
		n.data.allSizes[i] = int64(uint32(s))
	}
	every := make([][]int64, len(counts))
	for r, c := range counts {
		off := 0
		for _, c := range counts[:r] {
			off += c
		}
		every[r] = n.data.allSizes[off : off+c : off+c]
	}
	remote := make([]int64, n.size) // every rank's, as the plan's input takes them (Forecast plans every rank's)
	for r := range remote {
		remote[r] = n.remoteBytesOf(r)
	}
	wc := proto.WindowConfig{Rank: n.me, Mapping: n.data.m, Sizes: every, Seed: n.cfg.Seed,
		Lead: proto.DefaultLead, Ramp: n.cfg.Ramp, Window: n.cfg.Window, Remote: remote, Keep: n.cfg.Keep}
	n.data.window = wc       // Forecast plans from what the rank plans from
	if !n.cfg.ClientTraces { // a resumed job plans the epochs before it again
		wc.Traces = n.seedTraces
		wc.Epochs = uint32(n.cfg.Epochs) // the next epoch's first chunks are read while one drains
	}
	n.p, err = proto.NewWindowRank(wc)
	if err != nil {
		hint := "pack with a smaller --chunk-files, or serve with --policy paper"
		if n.data.m.Sized() {
			hint = "or pack with a smaller --chunk-size (a larger file needs a budget that holds it)"
		}
		return fmt.Errorf("rt: rank %d: the window policy reads whole chunks into each rank's memory (--mem): %w; "+
			"give it more memory, %s", n.me, err, hint)
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
		return n.data.m.MemBytes(r) / 10
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
	h := n.data.man.Hash()
	same, err := n.sameEverywhere(h)
	if err == nil && !same {
		err = fmt.Errorf("rt: rank %d: the ranks do not all see the same dataset (this rank reads %s, manifest hash %016x): check --chunks on every node",
			n.me, n.data.dir, h)
	}
	return err
}

// sameSettings checks that every rank was given the settings the ranks
// must share: they plan each epoch from the same inputs, and serve it,
// end it and gather its order together (a rank that gathered alone would
// wait for ever).
func (n *Node) sameSettings() error {
	c := n.cfg
	s := fmt.Sprintf("policy %s, variant %v, seed %d, %d epochs, window %d, ramp %d, keep %g, the clients' traces %v, the order measured %v (--batch), handed over %v (--order-out)",
		c.Policy, c.Variant, c.Seed, c.Epochs, c.Window, c.Ramp, c.Keep, c.ClientTraces, n.measuring(), n.site.Order != nil)
	h := fnv.New64a()
	h.Write([]byte(s))
	same, err := n.sameEverywhere(h.Sum64())
	if err == nil && !same {
		err = fmt.Errorf("rt: rank %d: the ranks were not all given the same settings (this rank: %s): give every rank the same flags", n.me, s)
	}
	return err
}

// sameEverywhere reports whether every rank passed the same h.
func (n *Node) sameEverywhere(h uint64) (bool, error) {
	v := []int64{int64(h >> 32), int64(h & 0xffffffff)}
	v = append(v, -v[0], -v[1])
	got, err := n.comm.AllreduceMax(v)
	if err != nil {
		return false, err
	}
	return slices.Equal(got[:2], []int64{-got[2], -got[3]}), nil
}
