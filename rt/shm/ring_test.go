package shm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// TestLayoutGolden pins the ring layout that the Python reader shares.
func TestLayoutGolden(t *testing.T) {
	ours := map[string]string{
		"ring_magic": ringMagic, "hello_magic": helloMagic, "welcome_magic": welcomeMagic,
		"release": Release, "trace_magic": traceMagic, "verdict_magic": verdictMagic, "start_magic": startMagic, "refusal_magic": refusalMagic,
	}
	for k, v := range map[string]int{
		"version": version, "hello_bytes": helloBytes, "welcome_bytes": welcomeBytes, "header_bytes": headerBytes,
		"off_magic": offMagic, "off_header_bytes": offHeaderBytes, "off_slots": offSlots, "off_data_off": offDataOff,
		"off_data_bytes": offDataBytes, "off_rank": offRank, "off_client": offClient, "off_req_head": offReqHead,
		"off_req_tail": offReqTail, "off_rep_head": offRepHead, "off_rank_sleeping": offRankSleeping,
		"off_client_sleeping": offClientSleeping, "off_data_head": offDataHead, "off_data_tail": offDataTail, "off_epoch": offEpoch, "off_trace_len": offTraceLen, "off_ranks": offRanks, "off_resume": offResume, "off_seed": offSeed, "off_resumed_epoch": offResumedEpoch, "off_resumed_from": offResumedFrom, "off_resumed_rest": offResumedRest, "off_epochs": offEpochs, "off_awaited": offAwaited, "off_awaited_first": offAwaitedFirst, "off_job_bytes": offJobBytes, "off_job": offJob, "kind_end_epoch": KindEndEpoch, "kind_session": KindSession,
		"slot_bytes": slotBytes, "unread_slots": unreadSlots, "record_header": recordHeader, "record_align": recordAlign,
		"kind_read": KindRead, "rec_file": RecFile, "rec_error": RecError, "rec_pad": RecPad, "rec_shared": RecShared, "rec_skipped": RecSkipped, "rec_handed": RecHanded, "arena_grain": arenaGrain, "kind_hand": KindHand, "kind_hold": KindHold, "kind_release": KindRelease,
		"resume_none": ResumeNone, "resume_waiting": ResumeWaiting, "resume_taken": ResumeTaken, "resume_first_word": ResumeFirstWord,
		"trace_bytes": traceBytes, "verdict_bytes": verdictBytes, "start_bytes": startBytes, "refusal_bytes": refusalBytes,
	} {
		ours[k] = fmt.Sprint(v)
	}
	f, err := os.Open("testdata/layout.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		if ours[k] != v {
			t.Errorf("golden %s = %s, Go has %q", k, v, ours[k])
		}
		seen++
	}
	if seen != len(ours) {
		t.Errorf("golden has %d entries, Go %d", seen, len(ours))
	}
}

// fakeLoop answers every request with a file whose bytes derive from sn,
// until reqs closes.
func fakeLoop(reqs <-chan rt.ClientEvent) {
	for ev := range reqs {
		r, ok := ev.(rt.Ask)
		if !ok {
			continue
		}
		data := content(r.Sn)
		r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(1000 + r.Sn), Label: r.Sn % 7, Data: data, CRC: chunk.Checksum(data)}
	}
}

func content(sn int32) []byte {
	return bytes.Repeat([]byte{byte(sn), byte(sn >> 8), 0xa5}, int(sn%97)*350)
}

func listen(t *testing.T, slots uint32, data uint64) (*Server, chan rt.ClientEvent) {
	t.Helper()
	reqs := make(chan rt.ClientEvent, 64)
	go fakeLoop(reqs)
	s, err := Listen(t.TempDir(), 0, Options{Slots: slots, Data: data, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); close(reqs) })
	return s, reqs
}

// TestClientsReadThroughRings: three clients at once, each keeping up to
// its slot count in flight through a ring small enough to wrap many times.
func TestClientsReadThroughRings(t *testing.T) {
	s, _ := listen(t, 8, 256<<10)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- readAll(s.Dir(), int32(i), 3, 600, 8) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// readAll asks for positions first, first+step, … below n, with up to
// depth in flight, and checks every reply.
func readAll(dir string, first, step, n int32, depth int) error {
	c, err := Attach(dir)
	if err != nil {
		return err
	}
	defer c.Close()
	next, inflight, got := first, 0, map[int32]bool{}
	for next < n || inflight > 0 {
		for ; inflight < depth && next < n; next += step {
			if err := c.Request(1, next); err != nil {
				return err
			}
			inflight++
		}
		rec, err := c.Next(5 * time.Second)
		if err != nil {
			return err
		}
		inflight--
		if rec.Kind != RecFile || rec.File != 1000+rec.Sn || !bytes.Equal(rec.Data, content(rec.Sn)) ||
			rec.CRC != chunk.Checksum(rec.Data) || got[rec.Sn] {
			return fmt.Errorf("client at %d: bad reply %+v (%d bytes)", first, rec, len(rec.Data))
		}
		got[rec.Sn] = true
		c.Release(rec)
	}
	return nil
}

// TestDeadClientIsFreed: a client that goes away is noticed and its
// resources freed; the server then accepts a new one.
func TestDeadClientIsFreed(t *testing.T) {
	s, _ := listen(t, 4, 256<<10)
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for sn := range int32(4) {
		c.Request(1, sn)
	}
	c.Close() // with replies still coming
	for end := time.Now().Add(5 * time.Second); s.Gone.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the server did not notice the client leave")
		}
	}
	if err := readAll(s.Dir(), 0, 1, 50, 4); err != nil {
		t.Fatal(err)
	}
}

// TestRankGoneIsAnError: when the rank stops, a waiting client gets an
// error within a second instead of hanging.
func TestRankGoneIsAnError(t *testing.T) {
	reqs := make(chan rt.ClientEvent, 4) // nobody answers
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 256 << 10, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Request(1, 0)
	go func() {
		time.Sleep(100 * time.Millisecond)
		(<-reqs).(rt.Ask).Reply <- rt.Delivery{Err: errors.New("x")}
		s.Close()
	}()
	start := time.Now()
	for {
		_, err := c.Next(10 * time.Second)
		if errors.Is(err, ErrRankGone) {
			break
		}
		if err != nil || time.Since(start) > 5*time.Second {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("noticed after %v", d)
	}
}

func TestSecondServerRefused(t *testing.T) {
	s, _ := listen(t, 4, 64<<10)
	if _, err := Listen(s.Dir(), 0, Options{Slots: 4, Data: 64 << 10}); err == nil || !strings.Contains(err.Error(), "another brandrt rank serves") {
		t.Fatalf("got %v", err)
	}
}

// TestOtherReleaseRefused: a client of another release, or of another
// attach protocol, is refused with a message naming both releases and
// what to install.
func TestOtherReleaseRefused(t *testing.T) {
	s, _ := listen(t, 4, 64<<10)
	other := helloMessage(1)
	clear(other[16 : 16+releaseBytes])
	copy(other[16:], "0.0.9")
	old := helloMessage(1)[:16] // protocol 5's hello had no release
	binary.LittleEndian.PutUint32(old[8:], 5)
	for _, tc := range []struct {
		hello []byte
		want  string
	}{
		{other, "this client is brandrt 0.0.9 (attach protocol 6) and the rank brandrt " + Release},
		{old, "this client is of another brandrt release (attach protocol 5) and the rank brandrt " + Release},
	} {
		conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(s.Dir(), SocketName), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(tc.hello); err != nil {
			t.Fatal(err)
		}
		err = refusal(conn)
		conn.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pip install dist/brandrt-"+Release) {
			t.Errorf("a hello of %d bytes: %v, want a refusal saying %q and what to install", len(tc.hello), err, tc.want)
		}
	}
}

// TestTooLargeForTheRing: a file that cannot fit the ring comes back as an
// error record naming the sizes.
func TestTooLargeForTheRing(t *testing.T) {
	s, _ := listen(t, 4, 64<<10)
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Request(1, 96) // 96×350×3 bytes
	rec, err := c.Next(5 * time.Second)
	if err != nil || rec.Kind != RecError || !strings.Contains(string(rec.Data), "a file of 100800 bytes, a ring of 65536") {
		t.Fatalf("%+v %q %v", rec, rec.Data, err)
	}
}

// TestRunawayHeadDropsTheClient: a client whose request head runs past
// the ring is dropped rather than trusted.
func TestRunawayHeadDropsTheClient(t *testing.T) {
	s, _ := listen(t, 4, 64<<10)
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	atomic.StoreUint32(c.ring.u32(offReqHead), 1000)
	futexWake(c.ring.u32(offReqHead))
	for end := time.Now().Add(5 * time.Second); s.Gone.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the client was not dropped")
		}
	}
	if _, err := c.Next(2 * time.Second); !errors.Is(err, ErrRankGone) {
		t.Fatalf("the dropped client got %v", err)
	}
}

// TestEndEpochThenLeave: a client that ends the epoch and closes at once
// still ends it.
func TestEndEpochThenLeave(t *testing.T) {
	reqs := make(chan rt.ClientEvent, 4)
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20 {
		c, err := Attach(s.Dir())
		if err != nil {
			t.Fatal(err)
		}
		c.push(7, 0, KindEndEpoch)
		c.Close()
		select {
		case ev := <-reqs:
			if r, ok := ev.(rt.End); !ok || r.Epoch != 7 {
				t.Fatalf("round %d: got %+v", i, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the end of the epoch was lost", i)
		}
	}
}

// TestCloseLetsRingsTakeDeliveries: files the loop delivered just before
// the rank stops still reach the client.
func TestCloseLetsRingsTakeDeliveries(t *testing.T) {
	reqs := make(chan rt.ClientEvent, 8)
	s, err := Listen(t.TempDir(), 0, Options{Slots: 8, Data: 256 << 10, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for sn := range int32(8) {
		c.Request(1, sn)
	}
	for range 8 { // the loop answers every request, then the rank stops at once
		r := (<-reqs).(rt.Ask)
		data := content(r.Sn)
		r.Reply <- rt.Delivery{Sn: r.Sn, File: proto.FileID(1000 + r.Sn), Data: data, CRC: chunk.Checksum(data)}
	}
	s.Close()
	for range 8 {
		rec, err := c.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("a delivered file was lost at shutdown: %v", err)
		}
		c.Release(rec)
	}
}

// offerTrace sends a trace message for epoch with files, as the Python
// client does, and returns the rank's verdict: "" when accepted.
func offerTrace(t *testing.T, c *Client, epoch uint32, files []int32, count uint32) string {
	t.Helper()
	fd, err := memfd("trace")
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	b := make([]byte, 4*len(files))
	for i, f := range files {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(f))
	}
	if _, err := syscall.Write(fd, b); err != nil {
		t.Fatal(err)
	}
	return sendMessage(t, c, traceMessage(epoch, count), fd)
}

// traceMessage returns a trace message for epoch of count ids.
func traceMessage(epoch, count uint32) []byte {
	msg := make([]byte, traceBytes)
	copy(msg, traceMagic)
	binary.LittleEndian.PutUint32(msg[8:], version)
	binary.LittleEndian.PutUint32(msg[12:], epoch)
	binary.LittleEndian.PutUint32(msg[16:], count)
	return msg
}

// sendMessage sends msg, with fd unless it is -1, and returns the rank's
// verdict: "" when accepted.
func sendMessage(t *testing.T, c *Client, msg []byte, fd int) string {
	t.Helper()
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := c.conn.WriteMsgUnix(msg, oob, nil); err != nil {
		t.Fatal(err)
	}
	epoch := binary.LittleEndian.Uint32(msg[12:])
	got := make([]byte, 8192)
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.conn.Read(got)
	if err != nil || n < verdictBytes || string(got[:8]) != verdictMagic || binary.LittleEndian.Uint32(got[12:]) != epoch {
		t.Fatalf("verdict: %d bytes %q, %v", n, got[:n], err)
	}
	if binary.LittleEndian.Uint32(got[16:]) == 0 {
		return ""
	}
	return string(got[verdictBytes:n])
}

// TestTraceMessages: a rank that makes its own traces refuses a client's;
// one that takes them hands the file ids to the loop and returns its
// verdict; a trace whose file is shorter than its count is refused.
func TestTraceMessages(t *testing.T) {
	reqs := make(chan rt.ClientEvent)
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if got := offerTrace(t, c, 1, []int32{1, 2}, 2); !strings.Contains(got, "--traces clients") {
		t.Errorf("a rank without client traces: %q", got)
	}
	c.Close()
	s.Close()

	traces := make(chan rt.TraceOffer)
	s, err = Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: reqs, Traces: traces})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() { // the loop: accepts epoch 1, refuses epoch 2
		for o := range traces {
			if o.Epoch == 1 && fmt.Sprint(o.Files) == "[5 -1 70000]" {
				o.Reply <- nil
			} else {
				o.Reply <- fmt.Errorf("not this one: epoch %d, %v", o.Epoch, o.Files)
			}
		}
	}()
	defer close(traces)
	c, err = Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := offerTrace(t, c, 1, []int32{5, -1, 70000}, 3); got != "" {
		t.Errorf("accepted trace: refused with %q", got)
	}
	if got := offerTrace(t, c, 2, []int32{5}, 1); got != "not this one: epoch 2, [5]" {
		t.Errorf("the loop's refusal came back as %q", got)
	}
	if got := offerTrace(t, c, 1, []int32{5}, 3); !strings.Contains(got, "holds 4 bytes, 3 file ids need 12") {
		t.Errorf("a short trace file: %q", got)
	}
}

// TestRingShowsEpochAtWelcome: a client that attaches once an epoch has
// started reads that epoch, and where the rank stands with resuming, as
// soon as Attach returns (a resumed job's training read epoch 0 there and
// offered its start again, which was never answered).
func TestRingShowsEpochAtWelcome(t *testing.T) {
	starts := make(chan rt.StartOffer, 1)
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Events: make(chan rt.ClientEvent), Starts: starts})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resume := func(c *Client) uint32 { return atomic.LoadUint32(c.ring.u32(offResume)) }
	c, err := Attach(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := c.Epoch(); e != 0 || resume(c) != ResumeWaiting {
		t.Errorf("before the first epoch: epoch %d, resume %d; want 0, %d", e, resume(c), ResumeWaiting)
	}
	s.StartEpoch(2, 77)
	if e, n := c.Epoch(); e != 2 || n != 77 || resume(c) != ResumeTaken {
		t.Errorf("a client attached before the epoch: epoch %d of %d positions, resume %d; want 2, 77, %d", e, n, resume(c), ResumeTaken)
	}
	c.Close()
	for i := range 200 {
		c, err := Attach(s.Dir())
		if err != nil {
			t.Fatal(err)
		}
		e, n := c.Epoch()
		r := resume(c)
		c.Close()
		if e != 2 || n != 77 || r != ResumeTaken {
			t.Fatalf("client %d, at its welcome: epoch %d of %d positions, resume %d; want 2, 77, %d", i, e, n, r, ResumeTaken)
		}
	}
}

// TestRingRewinds: a client that reads each record as it comes leaves
// the ring empty; the rank then starts again at its beginning once it is
// RewindAt in, so a ring of small records costs RewindAt and a few pages,
// not its size. Records that do not fit the rest of the ring wrap as
// before, and every record reads back whole.
func TestRingRewinds(t *testing.T) {
	const data = 4 << 20
	r, fd, err := newRing(64, data, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	alive := func() bool { return true }
	for i := range 100000 {
		rec := Record{Kind: RecFile, Sn: int32(i), Data: []byte(fmt.Sprintf("file %d", i))}
		if i%1000 == 999 {
			rec.Data = make([]byte, 300<<10) // now and then a large copy
		}
		end, err := r.putRecord(rec, alive)
		if err != nil {
			t.Fatal(err)
		}
		// the client: skips pads, reads the record, releases it
		for tail := r.released(); tail < end; {
			h := r.mem[r.dataOff+tail%r.dataBytes:]
			n, kind := binary.LittleEndian.Uint32(h), binary.LittleEndian.Uint32(h[4:])
			if kind == RecFile {
				if sn := int32(binary.LittleEndian.Uint32(h[8:])); sn != int32(i) || tail+uint64(n) != end {
					t.Fatalf("record %d: found %d ending at %d, want one ending at %d", i, sn, tail+uint64(n), end)
				}
				if size := binary.LittleEndian.Uint32(h[20:]); int(size) != len(rec.Data) || !bytes.Equal(h[recordHeader:recordHeader+size], rec.Data) {
					t.Fatalf("record %d: %d bytes read back, %d written, or other bytes", i, size, len(rec.Data))
				}
			}
			tail += uint64(n)
			atomic.StoreUint64(r.u64(offDataTail), tail)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if RewindAt != rt.RingRewind {
		t.Fatalf("shm.RewindAt is %d, rt.RingRewind %d: rt counts rings by it", RewindAt, rt.RingRewind)
	}
	if got, most := st.Blocks*512, int64(r.dataOff+RewindAt+2*(300<<10)+8192); got > most {
		t.Fatalf("100,000 records read one by one: the ring holds %d bytes of pages, want at most %d of its %d", got, most, data)
	}
}
