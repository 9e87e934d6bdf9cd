package rt

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/internal/script"
	"github.com/brandrt/brandrt/internal/script/scripttest"
	"github.com/brandrt/brandrt/proto"
)

// TestLoopScripts runs the loop's transcripts (testdata/loop/*.txt): an
// in-process job whose ranks' loops the script begins, feeds and steps
// by hand, one round of every rank at a time, on the test's goroutine.
// They reach what otherwise only a whole job does: a rank that begins
// its epoch late, a peer done early, clients gone in the middle of an
// epoch.
func TestLoopScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/loop/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no loop scripts: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			env := &loopEnv{t: t}
			defer env.close()
			scripttest.RunFile(t, path, env.handle)
		})
	}
}

// loopEnv is the job a loop script drives. Its commands:
//
//	job ranks=2 files=60 k=4 mem=0.5 [epochs=2]   open the ranks
//	begin rank=r epoch=e                           begin rank r's epoch
//	ask rank=r epoch=e sn=a-b                      a client asks (the
//	                                               rank's event channel)
//	end rank=r epoch=e [share=i/n]                 a client ends the epoch
//	session rank=r share=i/n delta=±1 pid=p        a training process
//	gone rank=r [share=i/n ago=6s]                 every client, or a
//	                                               share's, went away
//	run                                            step every begun rank
//	                                               until nothing moves
//
// run prints, per rank begun, what its clients were answered since the
// last run, and where its loop stands.
type loopEnv struct {
	t       *testing.T
	nodes   []*Node
	ios     []*ioPool
	pools   []*recvPool
	loops   []*loop
	failed  []error
	replies []chan Delivery
}

func (e *loopEnv) handle(c *script.Cmd) string {
	e.t.Helper()
	if c.Name != "job" && e.nodes == nil {
		return "no job yet"
	}
	switch c.Name {
	case "job":
		return e.job(c)
	case "begin":
		return e.begin(c)
	case "ask":
		r := e.rank(c)
		lo, hi := e.span(c.Args["sn"])
		for sn := lo; sn <= hi; sn++ {
			e.nodes[r].clients.events <- Ask{Epoch: e.epochArg(c), Sn: int32(sn), Reply: e.replies[r]}
		}
		return ""
	case "end":
		e.nodes[e.rank(c)].clients.events <- End{Epoch: e.epochArg(c), Share: e.share(c)}
		return ""
	case "session":
		delta, _ := strconv.Atoi(c.Args["delta"])
		pid, _ := strconv.Atoi(c.Args["pid"])
		e.nodes[e.rank(c)].clients.events <- Session{Share: e.share(c), Delta: delta, Pid: pid}
		return ""
	case "gone":
		return e.gone(c)
	case "run":
		return e.run()
	}
	e.t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
	return ""
}

// job opens the ranks on a packed dataset, each with one I/O worker.
func (e *loopEnv) job(c *script.Cmd) string {
	ranks, files, k := e.intArg(c, "ranks"), e.intArg(c, "files"), e.intArg(c, "k")
	dir := packed(e.t, files, ranks, k)
	cfg := defaultJob()
	cfg.Chunks, cfg.IOWorkers, cfg.Mem.Shard, cfg.Epochs = dir, 1, 1, 1
	if c.Has("mem") {
		cfg.Mem.Shard, _ = strconv.ParseFloat(c.Args["mem"], 64)
	}
	if c.Has("epochs") {
		cfg.Epochs = e.intArg(c, "epochs")
	}
	comms := collectives.NewLocal(ranks)
	e.nodes, e.loops, e.failed = make([]*Node, ranks), make([]*loop, ranks), make([]error, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r, comm := range comms {
		wg.Go(func() { e.nodes[r], errs[r] = Open(cfg.Config, cfg.Site, comm) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for r, n := range e.nodes {
		e.ios, e.pools = append(e.ios, n.newIOPool()), append(e.pools, &recvPool{})
		e.replies = append(e.replies, make(chan Delivery, 4*files))
		fmt.Fprintf(&b, "rank %d: %d files\n", r, func() int { _, k := n.data.m.RankFiles(r); return k }())
	}
	return b.String()
}

// begin begins rank r's epoch on the seeded traces, as Node.epoch does,
// taking what its clients sent for it before it began.
func (e *loopEnv) begin(c *script.Cmd) string {
	r, ep := e.rank(c), e.epochArg(c)
	n := e.nodes[r]
	if l := e.loops[r]; l != nil { // as closeEpoch does
		for _, f := range l.files {
			f.release()
		}
	}
	traces := proto.Traces(n.data.m.Files(), n.size, n.cfg.Seed, ep)
	if err := n.begin(ep, traces, resumption{}); err != nil {
		return err.Error()
	}
	l, err := n.newLoop(ep, len(traces[r]), 0, e.ios[r], e.pools[r], n.clients.events, false)
	if err == nil {
		err = l.takeHeld()
	}
	if err != nil {
		return err.Error()
	}
	e.loops[r] = l
	return fmt.Sprintf("rank %d: epoch %d, %d positions", r, ep, len(traces[r]))
}

// gone makes every client of rank r gone (its look says none reads since
// now, and it waits a millisecond for clients), or, with share, the
// share's processes gone ago.
func (e *loopEnv) gone(c *script.Cmd) string {
	r := e.rank(c)
	n := e.nodes[r]
	if c.Has("share") {
		ago, err := time.ParseDuration(c.Args["ago"])
		if err != nil {
			e.t.Fatalf("%s: ago: %v", c.Pos, err)
		}
		n.clients.sess.gone[e.share(c)] = time.Now().Add(-ago)
	} else {
		since := time.Now()
		n.clients.look = func() Clients { return Clients{Since: since} }
		n.cfg.ClientWait = time.Millisecond
		time.Sleep(2 * time.Millisecond)
	}
	if l := e.loops[r]; l != nil {
		l.goneChecked = time.Time{}
	}
	return ""
}

// run steps every rank begun, in turn, until none moves and no read is
// in flight, and says what came of it.
func (e *loopEnv) run() string {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		moved, reading := false, false
		for r, l := range e.loops {
			if l == nil || e.failed[r] != nil || l.finished() {
				continue
			}
			progress, err := l.step()
			if err != nil {
				e.failed[r] = err
			}
			moved = moved || progress
			reading = reading || !l.io.idle()
		}
		if !moved && !reading {
			break
		}
		if !moved {
			time.Sleep(time.Millisecond)
		}
	}
	var b strings.Builder
	for r, l := range e.loops {
		if l != nil {
			b.WriteString(e.say(r, l))
		}
	}
	return b.String()
}

// say tells what rank r's clients were answered since the last look, and
// where its loop stands.
func (e *loopEnv) say(r int, l *loop) string {
	var b strings.Builder
	var sns []int
	bad, errs := 0, map[string]int{}
	for len(e.replies[r]) > 0 {
		d := <-e.replies[r]
		switch {
		case d.Err != nil:
			errs[d.Err.Error()]++
		case chunk.Checksum(d.Data) != d.CRC:
			bad++
		default:
			sns = append(sns, int(d.Sn))
		}
		d.Release()
	}
	slices.Sort(sns)
	fmt.Fprintf(&b, "rank %d: answered %s", r, spans(sns))
	if bad > 0 {
		fmt.Fprintf(&b, ", %d with a wrong checksum", bad)
	}
	fmt.Fprintf(&b, "; %d of %d answered, %d wait", l.asks.answered, l.asks.traceLen, len(l.asks.waiting))
	fmt.Fprintf(&b, "; done %s, peers done %d of %d", yes(l.done), l.link.doneIn, l.n.size-1)
	if l.link.busy() || !l.io.idle() {
		fmt.Fprintf(&b, "; in flight: %d sends, %d inbound, %d reads", len(l.link.sends), l.link.inboxed, l.io.inflight)
	}
	var waits []int // the peers --peer-warn would name
	for p := range l.n.size {
		if p != r && l.waitsFor(p) {
			waits = append(waits, p)
		}
	}
	if len(waits) > 0 {
		fmt.Fprintf(&b, "; waits for rank %s", spans(waits))
	}
	if l.finished() {
		b.WriteString("; finished")
	}
	b.WriteString("\n")
	for _, m := range slices.Sorted(maps.Keys(errs)) {
		fmt.Fprintf(&b, "  answered with an error %d×: %s\n", errs[m], m)
	}
	if e.failed[r] != nil {
		fmt.Fprintf(&b, "  error: %v\n", e.failed[r])
	}
	return b.String()
}

// spans writes sorted positions as ranges: "0-4,7".
func spans(sns []int) string {
	if len(sns) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(sns); {
		j := i
		for j+1 < len(sns) && sns[j+1] == sns[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(sns[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", sns[i], sns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// close lets go of what the job holds.
func (e *loopEnv) close() {
	for r, n := range e.nodes {
		if l := e.loops[r]; l != nil {
			for _, f := range l.files {
				f.release()
			}
		}
		e.ios[r].close()
		e.pools[r].drain()
		n.dropAhead()
		n.Close()
	}
}

func (e *loopEnv) rank(c *script.Cmd) int { return e.intArg(c, "rank") }

func (e *loopEnv) epochArg(c *script.Cmd) uint32 { return uint32(e.intArg(c, "epoch")) }

func (e *loopEnv) intArg(c *script.Cmd, key string) int {
	v, err := strconv.Atoi(c.Args[key])
	if err != nil {
		e.t.Fatalf("%s: %s=%q: %v", c.Pos, key, c.Args[key], err)
	}
	return v
}

// span parses "a-b" or "a".
func (e *loopEnv) span(s string) (int, int) {
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := lo, error(nil)
	if ok {
		hi, err2 = strconv.Atoi(b)
	}
	if err1 != nil || err2 != nil {
		e.t.Fatalf("sn=%q: want a or a-b", s)
	}
	return lo, hi
}

// share parses share=i/n; none is the whole (Replicas 0).
func (e *loopEnv) share(c *script.Cmd) Share {
	if !c.Has("share") {
		return Share{}
	}
	var i, n int32
	if _, err := fmt.Sscanf(c.Args["share"], "%d/%d", &i, &n); err != nil {
		e.t.Fatalf("%s: share=%q: %v", c.Pos, c.Args["share"], err)
	}
	return Share{Replica: i, Replicas: n}
}
