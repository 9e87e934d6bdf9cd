package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/rt"
)

// Attaching: a process connects to the rank's socket, says hello, and
// gets its rings and the arena (as file descriptors) in the welcome.

// Release is this brandrt's release, which a client must share: the
// rank refuses a client of another release (or attach protocol), naming
// both (python/brandrt/layout.py's RELEASE, the package's version; both
// are pinned by testdata/layout.golden).
const Release = "0.1.0"

// Hello and welcome messages of the attach protocol.
const (
	helloMagic   = "BRTHELLO"
	welcomeMagic = "BRTWELCM"
	version      = 6
	helloBytes   = 32
	welcomeBytes = 48
	// releaseBytes holds a release's name in a hello or a welcome
	// (UTF-8, padded with NULs).
	releaseBytes = 16
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

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) || err != nil && s.closing() {
			return
		}
		if err != nil {
			s.acceptFailed(err)
			continue
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
	pid, line, ok, err := s.admit(conn)
	if !ok || err != nil {
		return err
	}
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	ring, fd, err := newRing(s.opt.Slots, s.opt.Data, s.rank, id)
	if err != nil {
		s.refuse(conn, err)
		return nil
	}
	defer ring.Close()
	c := &client{srv: s, id: id, pid: pid, lineage: line, conn: conn, ring: ring, replies: make(chan rt.Delivery, s.maxUnread())}
	if !s.register(c) {
		syscall.Close(fd)
		return nil
	}
	err = sendWelcome(conn, id, s.rank, len(ring.mem), fd, s.opt.Arena)
	syscall.Close(fd) // the client holds its own descriptor now
	if err == nil {
		c.serve(s.opt.Events)
		if c.files > 0 {
			s.Readers.Add(1)
			if c.handing.Load() {
				s.HandingOn.Add(1)
			}
		}
	}
	s.forget(id)
	switch {
	case err != nil && s.closing(): // Close dropped it before its welcome
		return nil
	case short(err):
		s.refuse(conn, fmt.Errorf("send the welcome: %w", err))
		return nil
	case err != nil:
		return fmt.Errorf("shm: client %d (pid %d): %w", id, pid, err)
	}
	s.Gone.Add(1)
	return nil
}

// admit reads a client's hello and decides whether it may attach: ok
// with its process and lineage. A probe (clearStale of another rank), a
// client of another release and one refused (another user, no room)
// are answered here and not ok; err is for the log.
func (s *Server) admit(conn *net.UnixConn) (pid uint32, line []int, ok bool, err error) {
	cred, err := peerCred(conn)
	if err == nil {
		err = checkPeer(cred, "a client")
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("shm: refused: %w", err)
	}
	pid, err = readHello(conn)
	if cred.Pid > 0 { // the kernel's word, not the client's
		pid = uint32(cred.Pid)
	}
	if errors.Is(err, io.EOF) {
		return 0, nil, false, nil // a probe, not a client
	}
	var other otherRelease
	if errors.As(err, &other) {
		_ = sendRefusal(conn, other)
		s.noteRefusal("refused a client", other)
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, err
	}
	line, err = lineage(int(pid))
	if err == nil {
		err = roomForClient()
	}
	if err != nil {
		s.refuse(conn, err)
		return 0, nil, false, nil
	}
	return pid, line, true, nil
}

// register adds c to the server's clients, its ring holding the job, the
// epoch being served and whether the rank waits for a start before the
// client sees it: the client reads them as soon as it maps the ring (an
// epoch 0 read there once made a resumed job's training offer its start
// again). Registered first, the client misses no later StartEpoch. It
// reports false when Close has taken its list of clients to drop: c
// missed it, and must not attach.
func (s *Server) register(c *client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing() {
		return false
	}
	s.clients[c.id] = c
	c.ring.setResumed(s.resumed.epoch, s.resumed.from, s.resumed.rest)
	c.ring.setJob(uint32(s.opt.Ranks), s.opt.Seed, s.opt.Epochs, s.opt.Job, s.resumeState())
	c.ring.setEpoch(s.epoch, s.traceLen)
	c.ring.setAwaited(s.awaited[0], s.awaited[1])
	return true
}

// forget takes client id off the server's clients, noting when the last
// one went.
func (s *Server) forget(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, id)
	if len(s.clients) == 0 {
		s.alone = time.Now()
	}
}

// helloMessage is a client's hello from process pid.
func helloMessage(pid uint32) []byte {
	b := make([]byte, helloBytes)
	copy(b, helloMagic)
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint32(b[12:], pid)
	copy(b[16:16+releaseBytes], Release)
	return b
}

// otherRelease is a hello from a client of another release or attach
// protocol than the rank's: the rank refuses it, saying what to install.
type otherRelease struct {
	protocol uint32
	release  string // empty when the protocol has no release in its hello
}

func (e otherRelease) Error() string {
	client := fmt.Sprintf("brandrt %s (attach protocol %d)", e.release, e.protocol)
	if e.release == "" {
		client = fmt.Sprintf("of another brandrt release (attach protocol %d)", e.protocol)
	}
	return fmt.Sprintf("this client is %s and the rank brandrt %s (attach protocol %d): install the client of the rank's release, brandrt %s "+
		"(in its checkout: make wheel, then pip install dist/brandrt-%s-py3-none-any.whl)", client, Release, version, Release, Release)
}

// releaseName reads a release's name from its field.
func releaseName(b []byte) string {
	name, _, _ := strings.Cut(string(b), "\x00")
	return strings.ToValidUTF8(name, "?")
}

// readHello returns the pid the client's hello gives; an otherRelease
// when the client is of another release.
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
	switch {
	case n < 12 || string(b[:8]) != helloMagic:
		return 0, fmt.Errorf("shm: attach: a client sent %d bytes that are not a hello", n)
	case le.Uint32(b[8:]) != version:
		return 0, otherRelease{protocol: le.Uint32(b[8:])}
	case n != helloBytes:
		return 0, fmt.Errorf("shm: attach: a client sent a hello of %d bytes, not %d", n, helloBytes)
	}
	if r := releaseName(b[16 : 16+releaseBytes]); r != Release {
		return 0, otherRelease{protocol: version, release: r}
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
	copy(b[32:32+releaseBytes], Release)
	fds := []int{fd}
	if arena != nil {
		le.PutUint64(b[24:], arena.Size())
		fds = append(fds, arena.roFD)
	}
	_, _, err := conn.WriteMsgUnix(b, syscall.UnixRights(fds...), nil)
	return err
}
