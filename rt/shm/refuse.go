package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Refusals: an attach that fails for want of descriptors or memory costs
// that client alone. The rank tells it why (a refusal in place of the
// welcome), logs it, and goes on accepting.

const (
	refusalMagic = "BRTREFUS"
	refusalBytes = 16
	// maxRefusal bounds the text of a refusal.
	maxRefusal = 4000
	// acceptPause spaces the tries of an accept that failed: the client
	// waits in the listen queue meanwhile, and the rank does not spin.
	acceptPause = 20 * time.Millisecond
	// refusalLogEvery spaces the rank's lines about clients refused.
	refusalLogEvery = 10 * time.Second
	// drainWait bounds how long a refusal waits for the client's hello.
	drainWait = 50 * time.Millisecond
)

// refusalLog spaces the rank's lines about clients it refused: a crowd
// refused at once is one line.
type refusalLog struct {
	mu   sync.Mutex
	last time.Time
	more int // refused since the last line
}

// short reports whether err is the kernel running out of something an
// attach needs: descriptors (the process's or the system's) or memory.
func short(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// limitHelp says which limit err ran into and how to raise it; "" when
// err is not one of them.
func limitHelp(err error) string {
	switch {
	case errors.Is(err, syscall.EMFILE):
		var l syscall.Rlimit
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
		return fmt.Sprintf("the rank's process may have %d files open (RLIMIT_NOFILE soft limit; hard limit %d), and each client takes one: "+
			"raise the limit with `ulimit -n N` before brandrt serve (up to the hard limit, which a container's --ulimit nofile=N:N, "+
			"systemd's LimitNOFILE= or /etc/security/limits.conf set)", l.Cur, l.Max)
	case errors.Is(err, syscall.ENFILE):
		return "the system's table of open files is full (fs.file-max; /proc/sys/fs/file-nr shows it): raise fs.file-max or end what holds the files"
	case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.ENOBUFS):
		return "the kernel has no memory for another client's rings and socket: the node's or the memory cgroup's memory is spent, or vm.max_map_count"
	}
	return ""
}

// keepFree is the most descriptors the rank keeps for its own work
// (chunk files its I/O workers open, MPI's sockets, the traces clients
// send) when it takes clients: a quarter of its limit, at most this.
const keepFree = 64

// roomForClient returns an error wrapping EMFILE when another client
// would leave the rank fewer free descriptors than it keeps for its own
// work: its reads would fail then, not an attach.
func roomForClient() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<20 {
		return nil
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("count the open files: %w", err)
	}
	keep := min(keepFree, int(l.Cur/4))
	if len(fds)+keep > int(l.Cur) {
		return fmt.Errorf("%d files open, and the rank keeps %d free for its own reads: %w", len(fds), keep, syscall.EMFILE)
	}
	return nil
}

// cannotTake is why the rank refuses a client: err, what it ran into,
// and how to raise that limit.
func (s *Server) cannotTake(err error) error {
	help := limitHelp(err)
	if help != "" {
		help = "; " + help
	}
	return fmt.Errorf("shm: rank %d cannot take another client now: %w%s; it serves the clients it has and takes new ones as soon as it can", s.rank, err, help)
}

// refuse tells the client on conn why the rank cannot take it (err, what
// it ran into), and logs it.
func (s *Server) refuse(conn *net.UnixConn, err error) {
	why := s.cannotTake(err)
	_ = sendRefusal(conn, why) // a client gone meanwhile needs no answer
	s.noteRefusal("refused a client", why)
}

// drainHello takes the client's hello, if one comes within drainWait,
// before a refused connection whose hello was not read is closed: a
// socket closed with a message unread resets the connection, and the
// client may see that before the refusal.
func drainHello(conn *net.UnixConn) {
	conn.SetReadDeadline(time.Now().Add(drainWait))
	_, _ = conn.Read(make([]byte, helloBytes))
}

// noteRefusal logs what happened to a client (refused, or left waiting)
// and why: the first of a crowd, and then at most one line every
// refusalLogEvery, counting those in between.
func (s *Server) noteRefusal(what string, why error) {
	l := &s.refusals
	l.mu.Lock()
	now, more := time.Now(), l.more
	due := now.Sub(l.last) >= refusalLogEvery
	if due {
		l.last, l.more = now, 0
	} else {
		l.more++
	}
	l.mu.Unlock()
	if !due {
		return
	}
	also := ""
	if more > 0 {
		also = fmt.Sprintf(" (%d more clients refused or kept waiting since the last such line)", more)
	}
	s.logf("brandrt: rank %d: %s%s: %v\n", s.rank, what, also, why)
}

// sendRefusal sends the refusal, with why as its text.
func sendRefusal(conn *net.UnixConn, why error) error {
	msg := []byte(why.Error())
	if len(msg) > maxRefusal {
		msg = msg[:maxRefusal]
	}
	b := make([]byte, refusalBytes+len(msg))
	le := binary.LittleEndian
	copy(b, refusalMagic)
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], uint32(len(msg)))
	copy(b[refusalBytes:], msg)
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := conn.Write(b)
	return err
}

// parseRefusal returns the rank's text when b is a refusal.
func parseRefusal(b []byte) (string, bool) {
	le := binary.LittleEndian
	if len(b) < refusalBytes || string(b[:8]) != refusalMagic || le.Uint32(b[8:]) != version || len(b) != refusalBytes+int(le.Uint32(b[12:])) {
		return "", false
	}
	return string(b[refusalBytes:]), true
}

// openSpare opens the descriptor the accept loop keeps in reserve
// (acceptFailed); −1 when it cannot.
func openSpare() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// acceptFailed deals with an accept that failed with err. Out of
// descriptors, the loop gives up its spare one to take the waiting client
// and refuse it, saying why, and opens it again; otherwise the client
// waits in the listen queue while the loop pauses (it would spin
// otherwise) and tries again. Either way the rank goes on accepting.
func (s *Server) acceptFailed(err error) {
	if s.spare >= 0 && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		syscall.Close(s.spare)
		conn, aerr := s.ln.AcceptUnix()
		if aerr == nil {
			s.refuse(conn, err)
			drainHello(conn)
			conn.Close()
		}
		s.spare = openSpare()
		if aerr == nil {
			return
		}
	}
	s.noteRefusal("could not accept a client, which waits", s.cannotTake(err))
	select {
	case <-s.stopping:
	case <-time.After(acceptPause):
	}
}
