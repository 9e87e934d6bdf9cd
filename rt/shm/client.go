package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// Client is the Go side of an attached client, the twin of the Python
// reader; the tests use it.
type Client struct {
	conn   *net.UnixConn
	ring   *Ring
	arena  []byte // the rank's arena, read-only; nil when it has none
	id     uint32
	rank   uint32
	readAt uint64 // data bytes read so far
	// asked counts the reads requested, got the records returned, and
	// held is the ends of those not released yet: see ErrReadFirst.
	asked, got int
	held       []uint64
}

// ErrReadFirst is returned by Request when the client's ring is full and
// only reading replies could make room (see unreadSlots).
var ErrReadFirst = errors.New("shm: the rank holds this client's reads until it reads their replies (Next, Release): read before asking for more")

// welcomeWait bounds how long Attach waits for the rank's welcome.
const welcomeWait = 10 * time.Second

// ErrRankGone is returned when the rank's side of the socket closed.
var ErrRankGone = errors.New("shm: the brandrt rank went away")

// ErrRefused is returned by Attach when the rank refused the client
// (out of descriptors or memory): the error goes on with the rank's
// reason.
var ErrRefused = errors.New("shm: the rank refused this client")

// Attach connects to the rank serving dir. Like the rank, it refuses an
// attach directory (or its base) that another user owns or may write to,
// and a rank that runs as another user.
func Attach(dir string) (*Client, error) {
	if err := checkDirs(dir); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, SocketName)
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: attach to %s: %w (is brandrt serve running?)", sock, err)
	}
	cred, err := peerCred(conn)
	if err == nil {
		err = checkPeer(cred, "the rank")
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("shm: attach to %s: %w", sock, err)
	}
	if _, err := conn.Write(helloMessage(uint32(os.Getpid()))); err != nil {
		if refused := refusal(conn); refused != nil { // it refused us before the hello
			err = refused
		}
		conn.Close()
		return nil, fmt.Errorf("shm: attach to %s: %w", sock, err)
	}
	c, err := welcome(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("shm: attach to %s: %w", sock, err)
	}
	return c, nil
}

// welcome reads the rank's answer to the hello: a welcome, whose client
// it returns, or a refusal, whose reason it returns as an error.
func welcome(conn *net.UnixConn) (*Client, error) {
	b, oob := make([]byte, refusalBytes+maxRefusal), make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, err := answer(conn, b, oob, welcomeWait)
	if err != nil {
		return nil, err
	}
	fds := receivedFDs(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	if why, ok := parseRefusal(b[:n]); ok {
		return nil, fmt.Errorf("%w: %s", ErrRefused, why)
	}
	le := binary.LittleEndian
	if n != welcomeBytes || string(b[:8]) != welcomeMagic || le.Uint32(b[8:]) != version {
		return nil, errors.New("the answer is not a welcome")
	}
	if r := releaseName(b[32 : 32+releaseBytes]); r != Release {
		return nil, fmt.Errorf("the rank is brandrt %s and this client brandrt %s: use the client of the rank's release", r, Release)
	}
	arenaBytes := le.Uint64(b[24:])
	if want := 1 + min(arenaBytes, 1); uint64(len(fds)) != want {
		return nil, fmt.Errorf("%d descriptors came with the welcome, not %d", len(fds), want)
	}
	ring, err := openRing(fds[0])
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, ring: ring, id: le.Uint32(b[12:]), rank: le.Uint32(b[16:])}
	if arenaBytes > 0 {
		if c.arena, err = syscall.Mmap(fds[1], 0, int(arenaBytes), syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
			ring.Close()
			return nil, fmt.Errorf("map the rank's arena of %d bytes: %w", arenaBytes, err)
		}
	}
	return c, nil
}

// refusal returns the refusal the rank sent on conn, if one waits there
// (within a second), as an error; else nil.
func refusal(conn *net.UnixConn) error {
	b := make([]byte, refusalBytes+maxRefusal)
	n, _, err := answer(conn, b, nil, time.Second)
	if err != nil {
		return nil
	}
	if why, ok := parseRefusal(b[:n]); ok {
		return fmt.Errorf("%w: %s", ErrRefused, why)
	}
	return nil
}

// answer reads the rank's answer to the hello into b and oob, waiting
// at most wait. A rank that closed the connection with the hello unread
// (a refusal) resets it, and the kernel says so once before it hands
// over what the rank sent: the read is tried again then.
func answer(conn *net.UnixConn, b, oob []byte, wait time.Duration) (n, oobn int, err error) {
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	n, oobn, _, _, err = conn.ReadMsgUnix(b, oob)
	if errors.Is(err, syscall.ECONNRESET) {
		n, oobn, _, _, err = conn.ReadMsgUnix(b, oob)
	}
	return n, oobn, err
}

// Close detaches: the rank frees the rings.
func (c *Client) Close() error {
	c.ring.Close()
	if c.arena != nil {
		syscall.Munmap(c.arena)
		c.arena = nil
	}
	return c.conn.Close()
}

// Epoch returns the epoch the rank serves and the positions of its trace
// (zeros before the first).
func (c *Client) Epoch() (epoch, positions uint32) {
	return atomic.LoadUint32(c.ring.u32(offEpoch)), atomic.LoadUint32(c.ring.u32(offTraceLen))
}

// Request asks for trace position sn of epoch. It waits while the ring's
// request slots are full, and returns ErrReadFirst when only reading
// replies could free one: the rank takes a client's reads while fewer
// than unreadSlots times the slots are unanswered or unreleased.
func (c *Client) Request(epoch uint32, sn int32) error {
	if err := c.push(epoch, sn, KindRead); err != nil {
		return err
	}
	c.asked++
	return nil
}

// EndEpoch says this client's side asks for nothing more in epoch.
func (c *Client) EndEpoch(epoch uint32) error { return c.push(epoch, 0, KindEndEpoch) }

func (c *Client) push(epoch uint32, sn int32, kind uint32) error {
	head := atomic.LoadUint32(c.ring.u32(offReqHead))
	for head-atomic.LoadUint32(c.ring.u32(offReqTail)) >= c.ring.slots {
		if err := c.alive(); err != nil {
			return err
		}
		released := c.got - len(c.held)
		if kind == KindRead && c.asked-released >= (unreadSlots+1)*int(c.ring.slots) {
			return fmt.Errorf("%w: %d asked, %d released", ErrReadFirst, c.asked, released)
		}
		time.Sleep(50 * time.Microsecond)
	}
	s := c.ring.mem[headerBytes+uint64(head%c.ring.slots)*slotBytes:]
	binary.LittleEndian.PutUint32(s, uint32(sn))
	binary.LittleEndian.PutUint32(s[4:], kind)
	binary.LittleEndian.PutUint32(s[8:], epoch)
	atomic.StoreUint32(c.ring.u32(offReqHead), head+1)
	if atomic.LoadUint32(c.ring.u32(offRankSleeping)) != 0 {
		futexWake(c.ring.u32(offReqHead))
	}
	return nil
}

// Next returns the next reply; its Data aliases the ring (or the rank's
// arena) until Release.
func (c *Client) Next(timeout time.Duration) (Record, error) {
	deadline := time.Now().Add(timeout)
	for {
		if rec, ok := c.record(); ok {
			return rec, nil
		}
		if err := c.alive(); err != nil {
			// The rank writes its last replies, then closes: one may have
			// come since the look above.
			if rec, ok := c.record(); ok {
				return rec, nil
			}
			return Record{}, err
		}
		if time.Now().After(deadline) {
			return Record{}, fmt.Errorf("shm: no reply within %v", timeout)
		}
		c.sleep()
	}
}

// record reads the record at readAt, skipping padding.
func (c *Client) record() (Record, bool) {
	r, le := c.ring, binary.LittleEndian
	for c.readAt < atomic.LoadUint64(r.u64(offDataHead)) {
		h := r.mem[r.dataOff+c.readAt%r.dataBytes:]
		n := uint64(le.Uint32(h))
		rec := Record{Kind: le.Uint32(h[4:]), Sn: int32(le.Uint32(h[8:])), File: int32(le.Uint32(h[12:])),
			Label: int32(le.Uint32(h[16:])), CRC: le.Uint32(h[24:])}
		size := le.Uint32(h[20:])
		c.readAt += n
		if rec.Kind == RecPad {
			continue
		}
		rec.Data, rec.end = h[recordHeader:recordHeader+size:recordHeader+size], c.readAt
		c.got++
		c.held = append(c.held, c.readAt)
		if rec.Kind == RecShared {
			rec.Off = le.Uint64(h[recordHeader:])
			if rec.Off+uint64(size) > uint64(len(c.arena)) {
				rec.Kind, rec.Data = RecError, []byte(fmt.Sprintf("shm: a shared record at %d+%d, outside an arena of %d bytes", rec.Off, size, len(c.arena)))
			} else {
				rec.Data = c.arena[rec.Off : rec.Off+uint64(size) : rec.Off+uint64(size)]
			}
		}
		return rec, true
	}
	return Record{}, false
}

// Release gives the ring back the room of rec and of every record before
// it.
func (c *Client) Release(rec Record) {
	atomic.StoreUint64(c.ring.u64(offDataTail), rec.end)
	i := 0
	for i < len(c.held) && c.held[i] <= rec.end {
		i++
	}
	c.held = c.held[:copy(c.held, c.held[i:])]
}

// sleep waits for the rank to publish a reply, at most 100 ms.
func (c *Client) sleep() {
	head := c.ring.u32(offRepHead)
	seen := atomic.LoadUint32(head)
	atomic.StoreUint32(c.ring.u32(offClientSleeping), 1)
	if c.readAt == atomic.LoadUint64(c.ring.u64(offDataHead)) {
		futexWait(head, seen, 100*time.Millisecond)
	}
	atomic.StoreUint32(c.ring.u32(offClientSleeping), 0)
}

// alive checks the socket without blocking: end of file, or an error,
// means the rank is gone.
func (c *Client) alive() error {
	raw, err := c.conn.SyscallConn()
	if err != nil {
		return ErrRankGone
	}
	var n int
	var rerr error
	b := make([]byte, 1)
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), b, syscall.MSG_DONTWAIT|syscall.MSG_PEEK)
		return true
	}); err != nil {
		return ErrRankGone
	}
	if errors.Is(rerr, syscall.EAGAIN) || (rerr == nil && n > 0) {
		return nil
	}
	return ErrRankGone
}
