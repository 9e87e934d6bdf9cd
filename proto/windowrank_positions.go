package proto

import "fmt"

// A window rank's positions: what its clients ask for, and the files of
// other ranks planned for them, fetched ahead within RemoteMemBytes or on
// demand.

func (w *WindowRank) clientRequest(sn int32) error {
	if !w.started {
		return fmt.Errorf("proto: rank %d: request for position %d before the first epoch", w.me, sn)
	}
	if sn < 0 || int(sn) >= len(w.asked) {
		return fmt.Errorf("proto: rank %d: position %d outside its trace of %d", w.me, sn, len(w.asked))
	}
	if sn < w.start {
		return fmt.Errorf("proto: rank %d: position %d asked for, but epoch %d resumed at position %d", w.me, sn, w.epoch, w.start)
	}
	if w.asked[sn] {
		return fmt.Errorf("proto: rank %d: position %d asked twice in epoch %d", w.me, sn, w.epoch)
	}
	w.asked[sn] = true
	w.stats.Requests++
	w.frontier = max(w.frontier, sn+1)
	f := w.plan.Files[w.me][sn]
	switch {
	case w.cfg.Mapping.Home(f) == w.me:
		w.local(f, waiter{from: -1, sn: sn})
	case w.arrived[sn]:
		w.stats.PrefetchHits++
		w.unreserve(sn, f)
		w.deliver(sn, f, FromBuffer)
	case w.failed[sn]:
		w.fail(f, waiter{from: -1, sn: sn})
	case !w.fetched[sn]:
		w.stats.RemoteRequests++
		w.fetch(sn, f, false)
	}
	w.fetchAhead()
	return nil
}

// fetch asks the home of file f, planned for position sn, for it; ahead
// reserves its bytes in the buffer until it is delivered.
func (w *WindowRank) fetch(sn int32, f FileID, ahead bool) {
	w.fetched[sn], w.reserved[sn] = true, ahead
	if ahead {
		w.buffered += w.size(f)
		w.stats.PeakBuffered = max(w.stats.PeakBuffered, w.buffered)
		w.stats.PeakMem = max(w.stats.PeakMem, w.held+w.buffered)
		w.stats.Prefetched++
		w.stats.PrefetchedBytes += w.size(f)
	}
	w.rd.Sends = append(w.rd.Sends, Message{Type: MsgRequest, From: int32(w.me), To: int32(w.cfg.Mapping.Home(f)),
		Epoch: w.epoch, Sn: sn, File: f, Frontier: w.frontier})
}

// fetchAhead asks for the files of other ranks planned for the next
// positions, in order, up to Window past the frontier and while the
// buffer has room.
func (w *WindowRank) fetchAhead() {
	if w.clientsDone {
		return
	}
	files := w.plan.Files[w.me]
	w.fetchNext = max(w.fetchNext, w.frontier)
	for ; w.fetchNext < min(w.frontier+int32(w.cfg.Window), int32(len(files))); w.fetchNext++ {
		sn, f := w.fetchNext, files[w.fetchNext]
		if w.cfg.Mapping.Home(f) == w.me || w.fetched[sn] {
			continue
		}
		if w.buffered+w.size(f) > w.cfg.RemoteMemBytes {
			return
		}
		w.fetch(sn, f, true)
	}
}

func (w *WindowRank) message(m Message) error {
	switch {
	case !w.started || m.Epoch > w.epoch:
		w.deferred = append(w.deferred, m)
		return nil
	case m.Epoch < w.epoch:
		w.stats.Stale++
		return nil
	case m.From < 0 || int(m.From) >= w.cfg.Mapping.Ranks() || int(m.From) == w.me || int(m.To) != w.me:
		return fmt.Errorf("proto: rank %d: message %v not meant for it", w.me, m)
	}
	switch m.Type {
	case MsgRequest:
		if w.done[m.From] { // a request sent ahead, overtaken by the rank's done
			w.stats.Stale++
			return nil
		}
		return w.peerRequest(m)
	case MsgReply:
		return w.reply(m)
	}
	return fmt.Errorf("proto: rank %d: unexpected %v", w.me, m)
}

// reply takes a file this rank asked for.
func (w *WindowRank) reply(m Message) error {
	files := w.plan.Files[w.me]
	if m.Sn < 0 || int(m.Sn) >= len(files) || files[m.Sn] != m.File || !w.fetched[m.Sn] || w.arrived[m.Sn] {
		return fmt.Errorf("proto: rank %d: unexpected reply of rank %d for position %d (file %d)", w.me, m.From, m.Sn, m.File)
	}
	if m.Status == StatusOK && !w.asked[m.Sn] {
		w.stats.PushesReceived++
		w.arrived[m.Sn] = true // its bytes stay reserved until its position is asked for
		return nil
	}
	w.unreserve(m.Sn, m.File)
	switch {
	case m.Status != StatusOK && w.asked[m.Sn]:
		w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: m.Sn, File: m.File, Status: m.Status})
	case m.Status != StatusOK:
		w.failed[m.Sn] = true
	default:
		w.stats.PushesReceived++
		w.deliver(m.Sn, m.File, FromRemote)
	}
	w.fetchAhead()
	return nil
}

// unreserve frees position sn's bytes in the buffer, if it had any.
func (w *WindowRank) unreserve(sn int32, f FileID) {
	if w.reserved[sn] {
		w.reserved[sn] = false
		w.buffered -= w.size(f)
	}
}
