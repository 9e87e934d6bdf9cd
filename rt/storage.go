package rt

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// storageWatch is what the I/O workers share about storage that cannot
// be reached (a chunk file that cannot be opened or read: chunk.Unreachable;
// open uses one for the manifest and the indexes too).
// Such a read is made again, after waits that double from
// storageFirstWait to storageLastWait, for up to Config.StorageWait from its first failure: a
// network file system's server failing over or a mount coming back costs
// the wait, not the job. The rank says once that it waits, for what and
// for how long at most, and once that storage answers again; a read still
// failing after the wait ends the job, naming the file and the error.
type storageWatch struct {
	me    int
	limit time.Duration
	log   io.Writer
	stop  chan struct{} // closed when the pool closes: waits end
	mu    sync.Mutex
	// waiting counts the reads that wait; since is when the first of them
	// began to, said whether the rank said so.
	waiting int
	since   time.Time
	said    bool
}

// The waits between tries of an unreachable chunk file: doubling from
// the first, at most the last.
const (
	storageFirstWait = 250 * time.Millisecond
	storageLastWait  = 5 * time.Second
)

// newStorageWatch returns the rank's watch for one set of readers; closing
// its stop ends their waits.
func (n *Node) newStorageWatch() *storageWatch {
	return &storageWatch{me: n.me, limit: n.cfg.StorageWait, log: n.site.Log, stop: make(chan struct{})}
}

// retry runs try, and again while it fails for unreachable storage and
// the wait allows (await), and returns the last error; an unreachable
// one then says how long the rank waited, and that the job stops.
func (w *storageWatch) retry(try func() error) error {
	err := w.await(try)
	if chunk.Unreachable(err) && !w.stopped() {
		return fmt.Errorf("%w, still after waiting %v for it (--storage-wait); the job stops: check that the file system is mounted and the file readable by this user on this node", err, w.limit)
	}
	return err
}

// await runs try, and again while it fails for unreachable storage, for
// up to the wait, saying so (begin, back); it returns the last error as
// it is.
func (w *storageWatch) await(try func() error) error {
	err := try()
	if !chunk.Unreachable(err) {
		return err
	}
	start := time.Now()
	w.begin(err)
	defer w.end()
	for wait := storageFirstWait; ; wait = min(2*wait, storageLastWait) {
		left := w.limit - time.Since(start)
		if left <= 0 {
			return err
		}
		select {
		case <-time.After(min(wait, left)):
		case <-w.stop:
			return err
		}
		if err = try(); !chunk.Unreachable(err) {
			w.back()
			return err
		}
	}
}

// stopped says whether the watch's waits were ended (its pool closed).
func (w *storageWatch) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// begin notes a read that waits for storage and says so, once per
// stretch in which reads wait.
func (w *storageWatch) begin(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting++; w.waiting == 1 {
		w.since = time.Now()
	}
	if !w.said && w.limit > 0 {
		w.said = true
		fmt.Fprintf(w.log, "brandrt: rank %d: %v; waiting up to %v for it to come back (--storage-wait)\n", w.me, err, w.limit)
	}
}

// back says that storage answers again, once per stretch, when the last
// read that waited got through.
func (w *storageWatch) back() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.said && w.waiting == 1 {
		fmt.Fprintf(w.log, "brandrt: rank %d: storage answers again after %v; serving on\n", w.me, time.Since(w.since).Round(time.Millisecond))
		w.said = false
	}
}

// stuck reports whether a read waits for storage now.
func (w *storageWatch) stuck() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting > 0
}

// end notes that a read no longer waits.
func (w *storageWatch) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting--; w.waiting == 0 {
		w.said = false
	}
}
