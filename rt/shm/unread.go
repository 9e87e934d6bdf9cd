package shm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/brandrt/brandrt/internal/human"
)

// What a client was answered and has not read: the bound on it, which
// keeps one client that stops reading from holding up the rank, and the
// watch that names such a client.
//
// A client's reads are taken from its ring only while fewer than
// Server.maxUnread of them are unanswered (on their way through the
// loop) or answered and not released (its data tail short of their
// records' ends), and while the files of those answered, with each
// unanswered one counted as the largest file, fit in its data ring's
// bytes (a file lent in the arena counts as if copied): room.
// Past that, its requests wait in its ring, and a client whose ring is
// full waits on its own side. The loop then never waits on it: what it
// has taken is at most maxUnread, the room of the replies channel.

// stallGrace is how long a client may leave answers unread before the
// rank counts it as not reading (Server.Clients): a client that reads
// slowly still reads within it.
const stallGrace = 5 * time.Second

// unread is a client's answered records not yet released, in ring
// order. write adds them, and both of its goroutines take away those
// the client released; mu guards it.
type unread struct {
	mu    sync.Mutex
	recs  []unreadRec
	bytes uint64
	// since is when the client last released a record while others
	// stayed unread, or when the oldest unread one was written.
	since time.Time
	// named is set once the rank said the client does not read (it says
	// so again, once, after the client reads again and stops again).
	named bool
}

// unreadRec is one answered record: where it ends in the data ring, and
// the file bytes it holds (copied into the ring or lent in the arena).
type unreadRec struct {
	end, bytes uint64
}

// add notes a record written at now.
func (u *unread) add(end, bytes uint64, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.recs) == 0 {
		u.since = now
	}
	u.recs = append(u.recs, unreadRec{end, bytes})
	u.bytes += bytes
}

// release drops the records that end at or before tail (the client's
// data tail) and returns how many are left and their bytes.
func (u *unread) release(tail uint64, now time.Time) (recs int, bytes uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	i := 0
	for ; i < len(u.recs) && u.recs[i].end <= tail; i++ {
		u.bytes -= u.recs[i].bytes
	}
	if i > 0 {
		u.recs = u.recs[:copy(u.recs, u.recs[i:])]
		u.since, u.named = now, false
	}
	return len(u.recs), u.bytes
}

// stalled reports since when the client has left answers unread, if it
// has for stallGrace or more by now; else the zero time.
func (u *unread) stalled(now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.recs) == 0 || now.Sub(u.since) < stallGrace {
		return time.Time{}
	}
	return u.since
}

// toName reports, once per stretch without reading, that the client has
// left answers unread for warn or more: how many, their bytes, since
// when.
func (u *unread) toName(now time.Time, warn time.Duration) (recs int, bytes uint64, since time.Time, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.named || len(u.recs) == 0 || now.Sub(u.since) < warn {
		return 0, 0, time.Time{}, false
	}
	u.named = true
	return len(u.recs), u.bytes, u.since, true
}

// room returns how many more reads c may take now: none while its
// unanswered and unreleased reads reach the bound, or while the bytes of
// the answered ones, with each unanswered one counted as the largest
// file that may answer it (Options.Largest), would pass its data ring's.
// So what a client was answered and holds stays within its data ring's
// bytes, which the rank's footprint counts (rt.Footprint.Answered and
// Received: files the budget does not keep, and other ranks' files),
// however slowly it reads; one read is always taken when it holds none.
func (c *client) room() int {
	// pending first: a record written in between then counts twice,
	// never not at all.
	pending := int(c.pending.Load())
	recs, bytes := c.unread.release(c.ring.released(), time.Now())
	n := c.srv.maxUnread() - pending - recs
	big := max(c.srv.opt.Largest, 1)
	switch held := bytes + uint64(pending)*big; {
	case pending+recs == 0:
		n = min(n, max(int(c.ring.dataBytes/big), 1))
	case held >= c.ring.dataBytes:
		return 0
	default:
		n = min(n, int((c.ring.dataBytes-held)/big))
	}
	return max(0, n)
}

// maxUnread is the most reads a client may have unanswered or unreleased
// (see unread): unreadSlots times its request slots.
func (s *Server) maxUnread() int { return unreadSlots * int(s.opt.Slots) }

// unreadSlots is 2 so that a client that keeps its request slots full
// (Client.read_many) is never held back by a record it has not released
// yet. Clients know it (layout.golden): one whose ring is full and
// whose reads reach the bound waits for ever unless it reads.
const unreadSlots = 2

// watchStall names the client, once per stretch, when it has left
// answers unread for Options.StallWarn: the process, how long, how much
// it holds.
func (c *client) watchStall(now time.Time) {
	c.unread.release(c.ring.released(), now)
	recs, bytes, since, ok := c.unread.toName(now, c.srv.stallWarn())
	if !ok {
		return
	}
	c.srv.logf("brandrt: rank %d: client %d (pid %d%s) has not read the %d files (%s) the rank answered it since %s (%v): "+
		"its other reads wait in its ring; the rank serves its other clients and its peers, but the positions this client asked for wait for it "+
		"(a process stopped, or one that asks with request() and does not read with next()); when no client of the rank reads, --client-wait ends the job\n",
		c.srv.rank, c.id, c.pid, procName(int(c.pid)), recs, human.IBytes(int64(bytes)), since.Format("15:04:05"), now.Sub(since).Round(time.Second))
}

// stallWarn is Options.StallWarn, or 30 s.
func (s *Server) stallWarn() time.Duration {
	if s.opt.StallWarn > 0 {
		return s.opt.StallWarn
	}
	return 30 * time.Second
}

// procName returns ", " and the command line of process pid, cut to a
// line's worth, or "" when /proc does not show it.
func procName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return ""
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	q := strconv.Quote(s) // control characters escaped
	return ", " + q[1:len(q)-1]
}
