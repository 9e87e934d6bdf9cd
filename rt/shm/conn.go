package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// An attached process: the goroutines that serve it, and the messages
// it sends on its socket (a trace, a start) with the rank's verdicts.

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
	// files counts the files delivered to the client (by its writer).
	files int64
	// reads is set once the client asked for a file (Server.reading).
	reads atomic.Bool
	// handWarned is set once a hold or release of the client's was
	// refused and logged; oddLogged once a request the rank does not
	// take was. read's own.
	handWarned, oddLogged bool
	// unread is what the client was answered and has not released
	// (unread.go).
	unread unread
}

func (c *client) alive() bool { return !c.dead.Load() }

// serve runs until the client goes away and every delivery meant for it
// has come back from the loop.
func (c *client) serve(reqs chan<- rt.ClientEvent) {
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
		c.verdict(p.Epoch, fmt.Errorf("the training process resumes epoch %d at position %d, but this rank cannot resume and started at once: a job resumes with --policy window and traces from --seed, served to its clients (not --consume)", p.Epoch, p.Position))
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
