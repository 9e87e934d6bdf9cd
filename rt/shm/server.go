package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/internal/human"
	"github.com/brandrt/brandrt/rt"
)

// closeWait bounds how long Close waits for clients to take the files
// already delivered to them.
const closeWait = 5 * time.Second

// DefaultDir returns the attach directory of the rank with local rank
// local on its node: <base>/local-<local>, where base is $BRANDRT_ATTACH
// or /dev/shm/brandrt-<uid>. With one rank per node, every rank's is
// local-0, where clients look by default.
func DefaultDir(local int) string {
	base := os.Getenv(EnvAttach)
	if base == "" {
		base = fmt.Sprintf("/dev/shm/brandrt-%d", os.Getuid())
	}
	return filepath.Join(base, fmt.Sprintf("local-%d", local))
}

// Server accepts clients on a rank's attach socket and serves their
// requests through the rank's loop.
type Server struct {
	dir  string
	ln   *net.UnixListener
	rank uint32
	opt  Options
	// stopping is closed when Close begins: no offer waits for the rank
	// any more.
	stopping chan struct{}
	// spare is a descriptor the accept loop holds in reserve, to refuse a
	// client when the rank is out of descriptors (acceptFailed); −1 when
	// it has none. refusals spaces the lines about clients refused.
	spare    int
	refusals refusalLog

	logMu    sync.Mutex
	mu       sync.Mutex
	clients  map[uint32]*client
	next     uint32
	epoch    uint32
	traceLen uint32
	// resumed is where the job resumed (Resumed)
	resumed struct {
		epoch, from uint32
		rest        bool
	}
	// sessions counts the session clients of each process (see lineage);
	// alone is when the last client went.
	sessions map[int]int
	alone    time.Time
	// awaited is how many ranks have had no training, and the first.
	awaited   [2]uint32
	wg        sync.WaitGroup
	closeOnce sync.Once
	// overReaders is set once the rank said that more clients read at
	// once than its footprint counts (Options.Readers).
	overReaders bool
	// Gone counts the clients that went away.
	Gone atomic.Int64
	// Shared and Copied count the files handed over as their place in the
	// arena and as copies in a ring; Handed those of them handed on to
	// a client's parent (see hand.go), HandFull those that could have
	// been but for Options.HandCap.
	Shared, Copied, Handed, HandFull atomic.Int64
	// Readers counts the clients gone that were delivered files;
	// HandingOn those of them that handed them on to their parent (a
	// DataLoader worker's training process: the in-place path).
	Readers, HandingOn atomic.Int64
	// handed holds the files handed on, by token; handBytes their bytes by
	// owner, handTotal in all (handPeak: most at once); token the last given.
	handMu              sync.Mutex
	handed              map[uint32]*handedFile
	handBytes           map[int]uint64
	handTotal, handPeak uint64
	token               uint32
}

// Options configure a Server.
type Options struct {
	// Slots and Data size each client's rings: request slots (a power of
	// two) and bytes of replies (a multiple of 4096).
	Slots uint32
	Data  uint64
	// Events carries what clients ask and say to the rank's loop (rt.Ask,
	// rt.End, rt.Session).
	Events chan<- rt.ClientEvent
	// Traces takes the traces the clients supply; nil refuses them.
	Traces chan<- rt.TraceOffer
	// Starts takes where the clients say the job resumes; nil refuses
	// them. Ranks and Seed are the job's, published to the clients.
	Starts chan<- rt.StartOffer
	// FirstWord says that the rank takes a read from a client that
	// offered no start as a fresh start (rt.Config.MayResume without
	// --resume); without it, with Starts, the rank insists on a start.
	FirstWord bool
	Ranks     int
	Seed      uint64
	// Job is what the clients put in the states they save (rt.Place, as
	// JSON), published in every ring: at most 3068 bytes.
	Job []byte
	// Epochs is the job's last epoch (rt.Config.Epochs), which clients
	// learn from their ring: one asking for a later epoch fails at once.
	Epochs uint32
	// MaxTrace is the most file ids a client's trace may hold, and the
	// furthest position a start may name: the dataset's number of files
	// (a trace names each file at most once); a larger claim is refused
	// before anything is allocated. 0 allows up to proto.MaxFiles.
	MaxTrace int
	// Arena, when set, is shared with every client (read-only): files
	// whose bytes live in it are handed over by place instead of copied.
	Arena *Arena
	// HandCap bounds the bytes of the files handed on to the clients'
	// processes and not yet released, all of them together (see hand.go);
	// 0 hands none on. Largest is the largest file that may answer a
	// client's read, which counts as one until answered (room; 0: a byte).
	HandCap, Largest uint64
	// Readers is the clients reading at once that the rank's footprint
	// counts (rt.Config.Readers), ReaderBytes what each may hold in files
	// answered in place beyond it (rt.Node.ReaderBytes and ReceivedBytes):
	// the rank says so, once, when more read at once. 0 says nothing.
	Readers     int
	ReaderBytes uint64
	// StallWarn is how long a client may leave the files it was answered
	// unread before the rank names it (once, until it reads again); 0: 30 s.
	StallWarn time.Duration
	// Log takes a line for each client refused, dropped or not reading;
	// nil is os.Stderr.
	Log io.Writer
}

// Listen creates dir and its attach socket. dir and its parent (the base
// of the attach directories) are made for this process's user alone
// (mode 0700); either one that exists owned by another user, writable by
// group or others, or as a symbolic link is refused. So is a client that
// runs as another user.
func Listen(dir string, rank int, o Options) (*Server, error) {
	if _, total := layout(o.Slots, o.Data); o.Slots == 0 || o.Slots&(o.Slots-1) != 0 || o.Data%4096 != 0 || total > 1<<34 {
		return nil, fmt.Errorf("shm: %d slots and %d data bytes per client: want a power of two and a multiple of 4096", o.Slots, o.Data)
	}
	if len(o.Job) > jobMax {
		return nil, fmt.Errorf("shm: the job's description is %d bytes, more than a ring's header holds (%d)", len(o.Job), jobMax)
	}
	if err := makeDir(dir); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, SocketName)
	if err := clearStale(sock); err != nil {
		return nil, err
	}
	ln, err := listenAt(sock)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, ln: ln, rank: uint32(rank), opt: o, stopping: make(chan struct{}), spare: openSpare(), clients: make(map[uint32]*client)}
	s.wg.Add(2)
	go s.accept()
	go s.sweepHanded()
	return s, nil
}

// listenAt listens on sock. The socket's file appears only once it
// listens: it is bound under a private name and renamed into place, so
// a client that waits for the file and dials is not refused (bind makes
// the file before listen). Closing the listener leaves sock (it was bound
// under the other name): Server.close removes it right after, as Go's
// listener would have.
func listenAt(sock string) (*net.UnixListener, error) {
	bound := sock + ".bind"
	os.Remove(bound) // left by a rank killed between bind and rename
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: bound, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on %s: %w", sock, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Rename(bound, sock); err != nil {
		ln.Close()
		os.Remove(bound)
		return nil, fmt.Errorf("shm: listen on %s: %w", sock, err)
	}
	return ln, nil
}

// clearStale removes a socket that no process listens on any more (left
// by a rank that was killed); a live one is an error.
func clearStale(sock string) error {
	if _, err := os.Lstat(sock); err != nil {
		return nil
	}
	if c, err := net.Dial("unixpacket", sock); err == nil {
		c.Close()
		return fmt.Errorf("shm: another brandrt rank serves on %s (set %s to use another directory)", sock, EnvAttach)
	}
	return os.Remove(sock)
}

// StartEpoch tells every client, and those that attach later, that epoch
// e is being served with n positions on this rank.
func (s *Server) StartEpoch(e uint32, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch, s.traceLen = e, uint32(n)
	resume := s.resumeState()
	for _, c := range s.clients {
		c.ring.setResumed(s.resumed.epoch, s.resumed.from, s.resumed.rest)
		c.ring.setEpoch(e, uint32(n))
		c.ring.setResume(resume)
	}
}

// Awaiting tells every client, and those that attach later, which ranks
// of the job have had no training process attached (rt.Node.TellClients):
// a client that waits long for a file says so.
func (s *Server) Awaiting(missing []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaited = [2]uint32{uint32(len(missing)), 0}
	if len(missing) > 0 {
		s.awaited[1] = uint32(missing[0])
	}
	for _, c := range s.clients {
		c.ring.setAwaited(s.awaited[0], s.awaited[1])
	}
}

// Resumed tells every client, and those that attach later, where the
// job resumed (rt.Config.OnResume): epoch e, from this rank's position
// from, on the job's own plan of the rest when rest. Call it before
// StartEpoch of that epoch.
func (s *Server) Resumed(e uint32, from int, rest bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumed.epoch, s.resumed.from, s.resumed.rest = e, uint32(from), rest
}

// resumeState is what the rings say of resuming: ResumeNone without
// Options.Starts; else, until the first epoch starts, ResumeFirstWord
// with Options.FirstWord and ResumeWaiting without (the rank waits for a
// start), then ResumeTaken. Call it with mu held.
func (s *Server) resumeState() uint32 {
	switch {
	case s.opt.Starts == nil:
		return ResumeNone
	case s.epoch == 0 && s.opt.FirstWord:
		return ResumeFirstWord
	case s.epoch == 0:
		return ResumeWaiting
	default:
		return ResumeTaken
	}
}

// logf writes a line to the log, one goroutine at a time.
func (s *Server) logf(format string, args ...any) {
	w := s.opt.Log
	if w == nil {
		w = os.Stderr
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(w, format, args...)
}

// Clients tells what the clients do (rt.Node.WatchClients): how many
// are attached, how many of them read what they are answered (one that
// left answers unread for stallGrace does not), and, when none does,
// since when and which do not.
func (s *Server) Clients() rt.Clients {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	c := rt.Clients{Attached: len(s.clients), Since: s.alone}
	var stalled []*client
	for _, cl := range s.clients {
		cl.unread.release(cl.ring.released(), now)
		since := cl.unread.stalled(now)
		if since.IsZero() {
			c.Reading++
			continue
		}
		stalled = append(stalled, cl)
		if since.After(c.Since) {
			c.Since = since
		}
	}
	if c.Reading > 0 {
		c.Since = time.Time{}
		return c
	}
	named := make([]string, len(stalled))
	for i, cl := range stalled {
		named[i] = fmt.Sprintf("client %d, pid %d, since %s", cl.id, cl.pid, cl.unread.stalled(now).Format("15:04:05"))
	}
	slices.Sort(named)
	c.Stalled = strings.Join(named, "; ")
	return c
}

// Dir returns the attach directory.
func (s *Server) Dir() string { return s.dir }

// Close stops accepting, lets every client's ring take the deliveries
// already made to it (at most closeWait), drops the clients and removes
// the socket. Later calls do nothing.
func (s *Server) Close() error {
	err := errors.New("shm: closed twice")
	s.closeOnce.Do(func() { err = s.close() })
	return err
}

// closing reports whether Close was called.
func (s *Server) closing() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

func (s *Server) close() error {
	close(s.stopping)
	err := s.ln.Close()
	os.Remove(filepath.Join(s.dir, SocketName))
	s.mu.Lock()
	clients := make([]*client, 0, len(s.clients))
	for _, c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	end := time.Now().Add(closeWait)
	for _, c := range clients {
		for c.pending.Load() > 0 && c.alive() && time.Now().Before(end) {
			time.Sleep(time.Millisecond)
		}
		c.conn.Close()
	}
	s.wg.Wait()
	if s.spare >= 0 {
		syscall.Close(s.spare)
	}
	s.dropHanded(nil) // what the clients handed on while closing
	s.Unlink()
	return err
}

// Unlink removes the attach point: the socket, its directory, and their
// base when no other rank uses it. Close does it too, last; a rank that
// may be killed before its Close runs (its job ending) calls it first.
// Clients attached already keep their connections.
func (s *Server) Unlink() {
	_ = os.Remove(filepath.Join(s.dir, SocketName))
	_ = os.Remove(s.dir)
	_ = os.Remove(filepath.Dir(s.dir))
}

// reading notes that c reads files (its first read), and says so, once,
// when the clients reading at once are more than the footprint counts
// (Options.Readers): clients attached now that have read, which a
// DataLoader that starts its workers again may leave over for a moment.
func (s *Server) reading(c *client) {
	if c.reads.Swap(true) || s.opt.Readers <= 0 {
		return
	}
	s.mu.Lock()
	n := 0
	for _, o := range s.clients {
		if o.reads.Load() && o.alive() {
			n++
		}
	}
	say := n > s.opt.Readers && !s.overReaders
	s.overReaders = s.overReaders || say
	s.mu.Unlock()
	if !say {
		return
	}
	holds := "each more takes a ring beyond its footprint"
	if s.opt.ReaderBytes > 0 {
		holds = fmt.Sprintf("each more may hold up to %s of files answered in place beyond its footprint", human.IBytes(int64(s.opt.ReaderBytes)))
	}
	s.logf("brandrt: rank %d: %d clients read files at once, more than the %d readers its footprint counts (--readers): %s; serve with --readers %d or more\n",
		s.rank, n, s.opt.Readers, holds, n)
}
