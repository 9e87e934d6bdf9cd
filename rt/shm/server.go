package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// closeWait bounds how long Close waits for clients to take the files
// already delivered to them.
const closeWait = 5 * time.Second

// Hello and welcome messages of the attach protocol.
const (
	helloMagic   = "BRTHELLO"
	welcomeMagic = "BRTWELCM"
	version      = 5
	helloBytes   = 16
	welcomeBytes = 32
	// A client's trace, and the rank's verdict on it.
	traceMagic   = "BRTTRACE"
	verdictMagic = "BRTVRDCT"
	traceBytes   = 24
	verdictBytes = 24
	// A client's start, to resume a job (answered with a verdict).
	startMagic = "BRTSTART"
	startBytes = 36
	// maxMessage bounds a client's message (a start carries its saved
	// state): longer ones are cut, and then ignored.
	maxMessage = 64 << 10
	// SocketName is the attach socket's name in the attach directory.
	SocketName = "attach.sock"
	// EnvAttach names the environment variable that overrides the base
	// directory of the attach points.
	EnvAttach = "BRANDRT_ATTACH"
	// EnvLocalRank names the environment variable that tells a client
	// the local rank of the rank to attach to (brandrt serve -- COMMAND
	// sets it for the training command).
	EnvLocalRank = "BRANDRT_LOCAL_RANK"
)

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
	sessions  map[int]int
	alone     time.Time
	wg        sync.WaitGroup
	closeOnce sync.Once
	// Gone counts the clients that went away.
	Gone atomic.Int64
	// Shared and Copied count the files handed over as their place in the
	// arena and as copies in a ring; Handed those of them handed on to
	// a client's parent (see hand.go).
	Shared, Copied, Handed atomic.Int64
	// handed holds the files handed on, by token; handBytes their bytes
	// by owner, handTotal in all; token the last token given. See hand.go.
	handMu    sync.Mutex
	handed    map[uint32]*handedFile
	handBytes map[int]uint64
	handTotal uint64
	token     uint32
}

// Options configure a Server.
type Options struct {
	// Slots and Data size each client's rings: request slots (a power of
	// two) and bytes of replies (a multiple of 4096).
	Slots uint32
	Data  uint64
	// Requests go to the rank's loop.
	Requests chan<- rt.Request
	// Traces takes the traces the clients supply; nil refuses them.
	Traces chan<- rt.TraceOffer
	// Starts takes where the clients say the job resumes; nil refuses
	// them. Ranks and Seed are the job's, published to the clients.
	Starts chan<- rt.StartOffer
	Ranks  int
	Seed   uint64
	// Job is what the clients put in the states they save (rt.Place, as
	// JSON), published in every ring: at most 3068 bytes.
	Job []byte
	// Epochs is the job's last epoch (rt.Config.Epochs), which clients
	// learn from their ring: one asking for a later epoch fails at once.
	Epochs uint32
	// MaxTrace is the most file ids a client's trace may hold, and the
	// furthest position a start may name: the dataset's number of files
	// (a trace names each file at most once). A larger claim is refused
	// before anything is allocated for it. 0 allows up to proto.MaxFiles.
	MaxTrace int
	// Arena, when set, is shared with every client (read-only): files
	// whose bytes live in it are handed over by place instead of copied.
	Arena *Arena
	// HandCap bounds the bytes of the files handed on to the clients'
	// processes and not yet released, all of them together (see hand.go);
	// 0 hands none on.
	HandCap uint64
	// Log takes a line for each client refused or dropped; nil is
	// os.Stderr.
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
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on %s: %w", sock, err)
	}
	s := &Server{dir: dir, ln: ln, rank: uint32(rank), opt: o, stopping: make(chan struct{}), clients: make(map[uint32]*client)}
	s.wg.Add(2)
	go s.accept()
	go s.sweepHanded()
	return s, nil
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
// Options.Starts; else ResumeWaiting until the first epoch starts (the
// rank waits for a start), then ResumeTaken. Call it with mu held.
func (s *Server) resumeState() uint32 {
	switch {
	case s.opt.Starts == nil:
		return ResumeNone
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

// Attached returns how many clients are attached, and since when none
// is: the zero time while one is, or before any attached.
func (s *Server) Attached() (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clients) > 0 {
		return len(s.clients), time.Time{}
	}
	return 0, s.alone
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

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.attach(conn); err != nil {
				s.logf("brandrt: rank %d: %v\n", s.rank, err)
			}
		}()
	}
}

// attach greets a client, hands it its rings, and serves it until it
// goes away.
func (s *Server) attach(conn *net.UnixConn) error {
	defer conn.Close()
	cred, err := peerCred(conn)
	if err == nil {
		err = checkPeer(cred, "a client")
	}
	if err != nil {
		return fmt.Errorf("shm: refused: %w", err)
	}
	pid, err := readHello(conn)
	if cred.Pid > 0 { // the kernel's word, not the client's
		pid = uint32(cred.Pid)
	}
	if errors.Is(err, io.EOF) {
		return nil // a probe (clearStale of another rank), not a client
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	ring, fd, err := newRing(s.opt.Slots, s.opt.Data, s.rank, id)
	if err != nil {
		return err
	}
	defer ring.Close()
	c := &client{srv: s, id: id, pid: pid, lineage: lineage(int(pid)), conn: conn, ring: ring, replies: make(chan rt.Delivery, s.opt.Slots)}
	// The ring holds the job, the epoch being served and whether the rank
	// waits for a start before the client sees it: the client reads them
	// as soon as it maps the ring (an epoch 0 read there once made a
	// resumed job's training offer its start again). Registered first, the
	// client misses no later StartEpoch.
	s.mu.Lock()
	if s.closing() { // Close has taken its list of clients to drop: this one missed it
		s.mu.Unlock()
		syscall.Close(fd)
		return nil
	}
	s.clients[id] = c
	ring.setResumed(s.resumed.epoch, s.resumed.from, s.resumed.rest)
	ring.setJob(uint32(s.opt.Ranks), s.opt.Seed, s.opt.Epochs, s.opt.Job, s.resumeState())
	ring.setEpoch(s.epoch, s.traceLen)
	s.mu.Unlock()
	err = sendWelcome(conn, id, s.rank, len(ring.mem), fd, s.opt.Arena)
	syscall.Close(fd) // the client holds its own descriptor now
	if err == nil {
		c.serve(s.opt.Requests)
	}
	s.mu.Lock()
	delete(s.clients, id)
	if len(s.clients) == 0 {
		s.alone = time.Now()
	}
	s.mu.Unlock()
	switch {
	case err != nil && s.closing(): // Close dropped it before its welcome
		return nil
	case err != nil:
		return fmt.Errorf("shm: client %d (pid %d): %w", id, pid, err)
	}
	s.Gone.Add(1)
	return nil
}

func readHello(conn *net.UnixConn) (uint32, error) {
	b := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(b)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		return 0, fmt.Errorf("shm: attach: %w", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	le := binary.LittleEndian
	if n != helloBytes || string(b[:8]) != helloMagic || le.Uint32(b[8:]) != version {
		return 0, fmt.Errorf("shm: attach: a client sent %d bytes that are not a version %d hello", n, version)
	}
	return le.Uint32(b[12:]), nil
}

// sendWelcome sends the welcome with the rings' descriptor, and the
// arena's when there is one.
func sendWelcome(conn *net.UnixConn, id, rank uint32, size, fd int, arena *Arena) error {
	b := make([]byte, welcomeBytes)
	le := binary.LittleEndian
	copy(b, welcomeMagic)
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], id)
	le.PutUint32(b[16:], rank)
	le.PutUint32(b[20:], uint32(size))
	fds := []int{fd}
	if arena != nil {
		le.PutUint64(b[24:], arena.Size())
		fds = append(fds, arena.roFD)
	}
	_, _, err := conn.WriteMsgUnix(b, syscall.UnixRights(fds...), nil)
	return err
}

// client is one attached process, served by two goroutines: one takes
// its requests to the loop, the other writes the loop's deliveries into
// its ring.
type client struct {
	srv     *Server // for its traces channel and stopping
	id, pid uint32
	conn    *net.UnixConn
	ring    *Ring
	replies chan rt.Delivery
	pending atomic.Int32 // requests handed to the loop, not yet written back
	dead    atomic.Bool
	// share is the trace share a training process declared (KindSession);
	// nil for other clients. read's own.
	share *Request
	lent  []lentFile // in the order of their records; write's own
	// lineage is the client's process and its ancestors (see stray);
	// refused is set once its reads were refused. read's own.
	lineage []int
	refused bool
	// handing says that the client hands its files in the arena on to
	// its parent process (KindHand; see hand.go).
	handing atomic.Bool
	// handWarned is set once a hold or release of the client's was
	// refused and logged. read's own.
	handWarned bool
}

func (c *client) alive() bool { return !c.dead.Load() }

// serve runs until the client goes away and every delivery meant for it
// has come back from the loop.
func (c *client) serve(reqs chan<- rt.Request) {
	watched, written := make(chan struct{}), make(chan struct{})
	go func() { defer close(watched); c.watch() }()
	go func() { defer close(written); c.write() }()
	c.read(reqs)
	<-written
	<-watched
}

// watch takes the client's messages (traces) until the connection
// closes: the client died or detached.
func (c *client) watch() {
	b := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.conn.ReadMsgUnix(b, oob)
		if err != nil || n == 0 && oobn == 0 {
			c.dead.Store(true)
			futexWake(c.ring.u32(offReqHead)) // wake read
			return
		}
		c.message(b[:n], receivedFDs(oob[:oobn]))
	}
}

// receivedFDs returns the descriptors passed with a message.
func receivedFDs(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// message handles one message from the client: a trace or a start,
// offered to the rank, whose verdict goes back to the client when it
// comes. The descriptors are closed.
func (c *client) message(b []byte, fds []int) {
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	le := binary.LittleEndian
	switch {
	case len(b) == traceBytes && string(b[:8]) == traceMagic && le.Uint32(b[8:]) == version:
		c.trace(le.Uint32(b[12:]), le.Uint32(b[16:]), fds)
	case len(b) >= startBytes && string(b[:8]) == startMagic && le.Uint32(b[8:]) == version &&
		len(b) == startBytes+int(le.Uint32(b[32:])):
		p := rt.Place{Epoch: le.Uint32(b[12:]), Position: int32(le.Uint32(b[16:])), Ranks: int(le.Uint32(b[20:])), Seed: le.Uint64(b[24:])}
		if state := b[startBytes:]; len(state) > 0 {
			var err error
			if p, err = rt.ParsePlace(state); err != nil {
				c.verdict(le.Uint32(b[12:]), err)
				return
			}
		}
		c.start(rt.StartOffer{Place: p})
	default:
		c.srv.logf("brandrt: client %d (pid %d): ignoring a message of %d bytes that is not a version %d trace or start\n",
			c.id, c.pid, len(b), version)
	}
}

// trace offers the client's trace of epoch to the rank.
func (c *client) trace(epoch, count uint32, fds []int) {
	var files []int32
	err := c.srv.checkCount(count)
	if err == nil {
		files, err = readTrace(fds, count)
	}
	switch {
	case err != nil:
	case c.srv.opt.Traces == nil:
		err = errors.New("this rank makes its traces from --seed; start brandrt serve with --traces clients to take them from the training processes")
	case epoch == 0:
		err = errors.New("epochs count from 1")
	}
	if err != nil {
		c.verdict(epoch, err)
		return
	}
	reply := make(chan error, 1)
	select {
	case c.srv.opt.Traces <- rt.TraceOffer{Epoch: epoch, Files: files, Reply: reply}:
		go func() { c.verdict(epoch, <-reply) }()
	case <-c.srv.stopping:
		c.verdict(epoch, errors.New("the rank is stopping"))
	}
}

// start offers the client's resume point to the rank.
func (c *client) start(o rt.StartOffer) {
	p := o.Place
	if c.srv.opt.Starts == nil {
		c.verdict(p.Epoch, fmt.Errorf("the training process resumes epoch %d at position %d, but this rank already started: start brandrt serve with --resume to take up a job where it stopped", p.Epoch, p.Position))
		return
	}
	if p.Position < 0 || c.srv.checkCount(uint32(p.Position)) != nil {
		c.verdict(p.Epoch, fmt.Errorf("resuming epoch %d at position %d, past any trace of this dataset (%d files)", p.Epoch, uint32(p.Position), c.srv.maxTrace()))
		return
	}
	reply := make(chan error, 1)
	o.Reply = reply
	select {
	case c.srv.opt.Starts <- o:
		go func() { c.verdict(p.Epoch, <-reply) }()
	case <-c.srv.stopping:
		c.verdict(p.Epoch, errors.New("the rank is stopping"))
	}
}

// maxTrace returns the most file ids a trace may hold.
func (s *Server) maxTrace() int {
	if s.opt.MaxTrace > 0 {
		return min(s.opt.MaxTrace, proto.MaxFiles)
	}
	return proto.MaxFiles
}

// checkCount refuses a trace of count file ids (or a start at position
// count) that no trace of the dataset can hold.
func (s *Server) checkCount(count uint32) error {
	if uint64(count) > uint64(s.maxTrace()) {
		return fmt.Errorf("a trace of %d file ids, but this rank's dataset has %d files: a trace names each at most once", count, s.maxTrace())
	}
	return nil
}

// readTrace reads count file ids from the one descriptor sent: a regular
// file (a memfd) that holds them, which is checked before anything is
// allocated for them.
func readTrace(fds []int, count uint32) ([]int32, error) {
	if len(fds) != 1 {
		return nil, fmt.Errorf("a trace comes with one file descriptor, not %d", len(fds))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[0], &st); err != nil {
		return nil, fmt.Errorf("the trace's file: %w", err)
	}
	need := 4 * int64(count)
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("the trace's descriptor is not a regular file or memfd (mode %#o)", st.Mode)
	case st.Size < need:
		return nil, fmt.Errorf("the trace's file holds %d bytes, %d file ids need %d", st.Size, count, need)
	}
	files := make([]int32, count)
	b := make([]byte, min(need, 64<<10))
	for off := int64(0); off < need; {
		part := b[:min(int64(len(b)), need-off)]
		n, err := syscall.Pread(fds[0], part, off)
		if err != nil {
			return nil, fmt.Errorf("reading the trace: %w", err)
		}
		if n < len(part) { // a regular file reads whole unless it ends
			return nil, fmt.Errorf("the trace's file holds %d bytes, %d file ids need %d", off+int64(n), count, need)
		}
		for i := 0; i < n; i += 4 {
			files[(off+int64(i))/4] = int32(binary.LittleEndian.Uint32(part[i:]))
		}
		off += int64(n)
	}
	return files, nil
}

// verdict tells the client whether its trace or start of epoch was taken.
func (c *client) verdict(epoch uint32, err error) {
	le := binary.LittleEndian
	var msg []byte
	if err != nil {
		msg = []byte(err.Error())
		if len(msg) > 4000 {
			msg = msg[:4000]
		}
	}
	b := make([]byte, verdictBytes+len(msg))
	copy(b, verdictMagic)
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], epoch)
	if err != nil {
		le.PutUint32(b[16:], 1)
	}
	le.PutUint32(b[20:], uint32(len(msg)))
	copy(b[verdictBytes:], msg)
	_, _ = c.conn.Write(b) // a client gone meanwhile needs no answer
}

// read takes the client's requests to the loop, never more at once than
// the replies channel holds, so that the loop never waits on a client.
func (c *client) read(reqs chan<- rt.Request) {
	var batch []Request
	for c.alive() {
		if int(c.pending.Load()) >= cap(c.replies) {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		var err error
		if batch, err = c.ring.takeRequests(batch[:0]); err != nil {
			c.srv.logf("brandrt: client %d (pid %d): %v; dropping it\n", c.id, c.pid, err)
			c.conn.Close()
			return
		}
		if len(batch) == 0 {
			c.ring.waitRequests(100 * time.Millisecond)
			continue
		}
		c.forward(batch, reqs, true)
	}
	// A client may end an epoch and leave at once: its last requests
	// still count, but there is nobody left to read files for.
	if batch, err := c.ring.takeRequests(batch[:0]); err == nil {
		c.forward(batch, reqs, false)
	}
	if s := c.share; s != nil { // a training process went away
		c.srv.mu.Lock()
		if c.srv.sessions[int(c.pid)]--; c.srv.sessions[int(c.pid)] <= 0 {
			delete(c.srv.sessions, int(c.pid))
		}
		c.srv.mu.Unlock()
		reqs <- rt.Request{Session: -1, Replica: s.Sn, Replicas: int32(s.Extra), Pid: int(c.pid)}
	}
}

// forward hands requests to the loop; reads only when reads is set.
func (c *client) forward(batch []Request, reqs chan<- rt.Request, reads bool) {
	for _, r := range batch {
		switch {
		case r.Kind == KindEndEpoch:
			reqs <- rt.Request{Epoch: r.Epoch, End: true, Replica: r.Sn, Replicas: int32(r.Extra)}
		case r.Kind == KindSession && c.share == nil && r.Extra > 0 && r.Extra <= 1<<20 && r.Sn >= 0 && uint32(r.Sn) < r.Extra:
			c.share = &r
			c.srv.mu.Lock()
			if c.srv.sessions == nil {
				c.srv.sessions = make(map[int]int)
			}
			c.srv.sessions[int(c.pid)]++
			c.srv.mu.Unlock()
			reqs <- rt.Request{Session: 1, Replica: r.Sn, Replicas: int32(r.Extra), Pid: int(c.pid)}
		case r.Kind == KindHand:
			if len(c.lineage) > 1 && c.srv.opt.HandCap > 0 && c.srv.opt.Arena != nil {
				c.handing.Store(true)
			}
		case r.Kind == KindHold || r.Kind == KindRelease:
			delta := -1
			if r.Kind == KindHold {
				delta = 1
			}
			// A token gone already is no news: a file's holders may
			// release it while a hold for it is still on its way.
			err := c.srv.holdHanded(r.Epoch, uint64(r.Extra)*arenaGrain, delta, c.lineage)
			if err != nil && !errors.Is(err, errUnknownToken) && !c.handWarned {
				c.handWarned = true // once per client: a confused one would send many
				c.srv.logf("brandrt: client %d (pid %d): a handed file's token %d at %d: %v (not logged again)\n",
					c.id, c.pid, r.Epoch, uint64(r.Extra)*arenaGrain, err)
			}
		case reads && c.stray():
			c.refuse(r.Sn)
		case reads:
			c.pending.Add(1)
			reqs <- rt.Request{Epoch: r.Epoch, Sn: r.Sn, Reply: c.replies}
		}
	}
}

// write copies deliveries into the ring, or for files in the arena their
// place; after the client died it only releases them, until none is
// pending.
func (c *client) write() {
	tick := time.NewTicker(100 * time.Millisecond) // to notice death; one timer, not one per reply
	defer tick.Stop()
	defer c.reclaim(true)
	for {
		// After Close, a reply still owed may never come: the loop that
		// makes them may have stopped (an error ends the job).
		if c.dead.Load() && (c.pending.Load() == 0 || c.srv.closing()) {
			return
		}
		select {
		case d := <-c.replies:
			switch end, kept := c.put(&d); kept {
			case keptLent:
				c.lent = append(c.lent, lentFile{end, d})
			case keptNot:
				d.Release()
			}
			c.pending.Add(-1)
			c.reclaim(false)
		case <-tick.C:
			c.reclaim(false)
		}
	}
}

// lentFile is a delivery whose bytes the client reads in the arena: it is
// released once the client's data tail passes end.
type lentFile struct {
	end uint64
	d   rt.Delivery
}

// reclaim releases the files the client is done with, or all of them.
func (c *client) reclaim(all bool) {
	tail, i := c.ring.released(), 0
	for ; i < len(c.lent) && (all || c.lent[i].end <= tail); i++ {
		c.lent[i].d.Release()
	}
	c.lent = c.lent[:copy(c.lent, c.lent[i:])]
}

// kept says who keeps a delivery once its record is written.
type kept int

const (
	keptNot    kept = iota // nobody: its bytes were copied into the ring
	keptLent               // the client reads them in the arena until its tail passes the record
	keptHanded             // the handed table (hand.go)
)

// put writes d's record and says who keeps d: the client reads a file in
// the arena in place, until it passes the record's end, unless it hands
// its files on.
func (c *client) put(d *rt.Delivery) (end uint64, k kept) {
	if !c.alive() {
		return 0, keptNot
	}
	rec := Record{Kind: RecFile, Sn: d.Sn, File: int32(d.File), Label: d.Label, CRC: d.CRC, Data: d.Data}
	lent := false
	if a := c.srv.opt.Arena; a != nil && d.Err == nil {
		rec.Off, lent = a.Offset(d.Data)
	}
	switch {
	case d.Err != nil:
		rec = Record{Kind: RecError, Sn: d.Sn, File: -1, Label: -1, Data: []byte(d.Err.Error())}
	case d.Damaged != "":
		rec = Record{Kind: RecSkipped, Sn: d.Sn, File: int32(d.File), Label: d.Label, CRC: d.CRC, Data: []byte(d.Damaged)}
		lent = false
	case lent:
		rec.Kind = RecShared
		// Set only for a client with a parent; only a file that starts a
		// page can be mapped where it lies (a file of a chunk kept whole in
		// the arena, when the budget holds the shard, seldom does).
		if c.handing.Load() && rec.Off%arenaGrain == 0 {
			if token, ok := c.srv.hand(d, rec.Off, c.lineage[1]); ok {
				rec.Kind, rec.Token = RecHanded, token
			}
		}
		c.srv.Shared.Add(1)
	default:
		c.srv.Copied.Add(1)
	}
	end, err := c.ring.putRecord(rec, c.alive)
	if errors.Is(err, errTooBig) { // tell the client rather than hang it
		end, err = c.ring.putRecord(Record{Kind: RecError, Sn: d.Sn, File: -1, Label: -1, Data: []byte(err.Error())}, c.alive)
	}
	if err != nil && !errors.Is(err, errClientGone) {
		c.srv.logf("brandrt: client %d (pid %d): %v\n", c.id, c.pid, err)
		c.conn.Close()
	}
	switch {
	case rec.Kind == RecHanded:
		if err != nil { // nobody got the token
			_ = c.srv.holdHanded(rec.Token, rec.Off, -1, c.lineage)
		}
		return end, keptHanded
	case lent && err == nil:
		return end, keptLent
	}
	return end, keptNot
}
