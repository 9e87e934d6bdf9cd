package rt

import (
	"errors"
	"fmt"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// carry carries out everything proto asked for since the last Advance.
func (l *loop) carry() error {
	for l.p.HasReady() {
		rd := l.p.Ready()
		if len(rd.Dropped) > 0 {
			return fmt.Errorf("rt: rank %d: %w", l.n.me, errors.Join(rd.Dropped...))
		}
		for _, r := range rd.Reads {
			l.io.add(r)
		}
		for _, f := range rd.Loaded {
			l.load(f, l.files)
		}
		for _, f := range rd.Early {
			if l.n.next.files == nil {
				l.n.next.files = make(map[proto.FileID]*file)
			}
			l.load(f, l.n.next.files)
		}
		l.keepOrCopy() // before any of the files leaves the loop
		for _, m := range rd.Sends {
			if err := l.send(m); err != nil {
				return err
			}
		}
		for _, d := range rd.Deliveries {
			l.deliver(d)
		}
		for _, f := range rd.Forget {
			l.files[f].release()
			delete(l.files, f)
		}
		l.p.Advance(rd)
	}
	return nil
}

// load keeps file f of the chunk just read, in files.
func (l *loop) load(f proto.FileID, files map[proto.FileID]*file) {
	li := int(f - l.n.data.first)
	res := l.just
	e, c := l.n.data.shard.Locate(li)
	if res == nil || res.ch == nil || res.ch.Index != c {
		panic(fmt.Sprintf("rt: rank %d: file %d loaded without its chunk", l.n.me, f))
	}
	data, buf := res.ch.File(e.Slot), res.buf
	if res.kc != nil { // a kept chunk: its own copy
		data, buf = res.kc.ch.File(e.Slot), res.kc.bufs[e.Slot]
	}
	if data == nil { // damaged on storage (Node.damaged): proto knows (ReadDone.Damaged); it has no bytes
		files[f] = &file{id: f, label: e.Label, crc: e.CRC}
		return
	}
	if buf != nil {
		buf.hold()
	}
	kf := &file{id: f, data: data, label: e.Label, crc: e.CRC, buf: buf}
	res.kept = append(res.kept, kf)
	res.keptBytes += int64(len(kf.data))
	files[f] = kf
}

// keepOrCopy lets go of the chunk just read. The files of a chunk read
// straight into Site.Memory (shared with the clients), kept into the
// next epoch, or read from memory, are in buffers of their own already
// (readOnce, ioPool.keep): the read lets go of its holds on them.
// Otherwise the files kept from it are copied out, so that its buffer
// can go at once, unless they fill at least 7/8 of it: memory then stays
// within 8/7 of what proto accounts for. (At half, the rule before, a
// quarter of the data in memory cost up to twice the budget.) With
// Site.Memory they are always copied, each into its own buffer from it,
// so that they still reach the clients in place. Either way each file's
// memory goes back as soon as the file goes: files of one chunk read
// leave one by one over the epoch, and a buffer shared by them all cost
// what its last one held up (three times the budget, measured).
func (l *loop) keepOrCopy() {
	res := l.just
	if res == nil {
		return
	}
	if res.kc != nil || res.buf == nil {
		res.letGo() // the read's holds: its files hold theirs
		return
	}
	defer func() { res.buf = nil }()
	mem := l.n.site.Memory
	if mem != nil || res.keptBytes*8 < res.ch.BytesRead*7 {
		for _, f := range res.kept {
			f.data, f.buf = copyOut(f.data, mem)
			res.buf.release()
		}
	}
	res.buf.release()
}

// copyOut copies data into a buffer of its own from mem (the buffer that
// holds it), or into Go memory without mem or should mem fail. An empty
// file stays non-nil: nil bytes are a damaged file's.
func copyOut(data []byte, mem chunk.Memory) ([]byte, *chunkBuf) {
	if len(data) == 0 {
		return []byte{}, nil
	}
	b, buf := lend(int64(len(data)), mem)
	n := copy(b, data)
	return b[:n:n], buf
}

// lend lends n bytes from mem, with the buffer that gives them back (one
// hold), or Go memory (no buffer) without mem or should mem fail.
func lend(n int64, mem chunk.Memory) ([]byte, *chunkBuf) {
	if mem != nil {
		if b, err := mem.Alloc(n); err == nil {
			return b, newBuf(func() { mem.Free(b) })
		}
	}
	return make([]byte, n), nil
}

// send starts sending m's frame, then the bytes of each file it moves
// straight from memory (a damaged file has none). The files leave this
// rank's memory when their sends complete.
func (l *loop) send(m proto.Message) error {
	items := cargo(&m)
	files := make([]*file, len(items))
	for i, it := range items {
		if files[i] = l.files[it.id]; files[i] == nil {
			panic(fmt.Sprintf("rt: rank %d: sending file %d, which it does not hold", l.n.me, it.id))
		}
		delete(l.files, it.id)
	}
	b := encodeFrame(m, files)
	if err := l.link.sendFrame(b, int(m.To)); err != nil {
		return err
	}
	l.stats.bytesOut += int64(len(b))
	if m.Type == proto.MsgRequest || m.Type == proto.MsgGrant || m.Type == proto.MsgAnswers { // a reply, a push, or the peer's own answers are owed
		l.n.peers.askedOf(int(m.To))
	}
	for i, f := range files {
		if !items[i].bytes {
			continue
		}
		if err := l.link.sendFile(f, int(m.To)); err != nil {
			return err
		}
		l.stats.bytesOut += int64(len(f.data))
	}
	return nil
}

// deliver hands a file to the client waiting for its position.
func (l *loop) deliver(d proto.Delivery) {
	reply, drop := l.asks.answer(l.n.me, d.Sn)
	if drop { // asked by the rank to end a share's epoch: nobody reads it
		if f := l.files[d.File]; d.Status.HasFile() && f != nil {
			delete(l.files, d.File)
			f.release()
		}
		return
	}
	l.clock.answeredOne()
	if !d.Status.HasFile() {
		l.stats.failed++
		answer(reply, Delivery{Sn: d.Sn, File: proto.NoFile, Err: fmt.Errorf("rt: rank %d: position %d: %s", l.n.me, d.Sn, d.Status)})
		return
	}
	f := l.files[d.File]
	if f == nil {
		panic(fmt.Sprintf("rt: rank %d: delivering file %d, which it does not hold", l.n.me, d.File))
	}
	delete(l.files, d.File)
	l.asks.delivered(d.Sn, d.File)
	l.n.tally.counts[f.id]++
	if d.Status == proto.StatusDamaged {
		l.stats.skipped++
		l.stats.skippedCRC += int64(f.crc)
		l.stats.skippedLabel += int64(f.label)
		answer(reply, Delivery{Sn: d.Sn, File: d.File, Label: f.label, CRC: f.crc, Damaged: l.n.damageNote(d.File)})
		return
	}
	l.count(f)
	if d.Source == proto.FromRemote || d.Source == proto.FromBuffer {
		l.stats.remoteFiles++
		l.stats.remoteBytes += int64(len(f.data))
	}
	answer(reply, Delivery{Sn: d.Sn, File: d.File, Label: f.label, Data: f.data, CRC: f.crc, Holder: f})
}

// count adds a delivered file to the epoch's tallies.
func (l *loop) count(f *file) {
	l.stats.delivered++
	l.stats.deliveredBytes += int64(len(f.data))
	l.stats.crcSum += int64(f.crc)
	l.stats.labelSum += int64(f.label)
}
