package proto

import "fmt"

// A window rank's positions: what its clients ask for, and the files of
// other ranks planned for them. The plan pushes some of those ahead
// (PushAt before the position): their homes send them unasked, once the
// rank grants them (MsgGrant) and their chunks are in. The rank grants in
// position order, from the lowest position not yet asked for, as far as
// Remote bytes allow, counting every planned push from there on not yet
// asked for as if it had arrived: however early the pushes come, the
// files arrived and not yet asked for stay within Remote. The homes are
// told of a grant only once the clients come within Window positions of
// what the homes know (or ask for a position granted but not told), so a
// grant covers many pushes (grant says when exactly). The files the plan sends on demand, and a
// planned push asked for before it was granted, are asked of their home
// (MsgRequest): the fallback.

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
	for int(w.low) < len(w.asked) && w.asked[w.low] {
		w.low++
	}
	if w.share == nil { // its own answers it knows; the others once every home's answers are in
		if f, ok := w.answerOf(w.me, sn); ok {
			w.local(f, waiter{from: -1, sn: sn})
		} else {
			w.queued = append(w.queued, sn)
		}
		return nil
	}
	w.serve(sn, w.planned[sn] && sn <= w.granted)
	return nil
}

// serve answers this rank's client at position sn, asked for; granted,
// when its push was granted before it was asked for (its bytes counted
// in grantBytes).
func (w *WindowRank) serve(sn int32, granted bool) {
	f := w.share.Files[sn]
	if granted {
		w.grantBytes -= w.size(f)
	}
	w.grant(sn)
	switch {
	case w.cfg.Mapping.Home(f) == w.me:
		w.local(f, waiter{from: -1, sn: sn})
	case w.arrived[sn]:
		w.stats.PrefetchHits++
		w.arrived[sn] = false
		w.buffered -= w.size(f)
		w.deliver(sn, f, FromBuffer, w.arrivedAs[sn])
	case w.failed[sn]:
		w.fail(f, waiter{from: -1, sn: sn})
	case w.planned[sn] && sn <= w.told:
		// granted: its home pushes it once its chunk is in
	default:
		w.stats.RemoteRequests++
		w.fetch(sn, f)
	}
}

// grant grows the grant as far as Remote allows, and tells the homes when
// the clients came within Window positions of what they know and the
// grant reaches at least half again as far as that (so that where Remote,
// not the window, bounds the grant, the homes hear of it about twice per
// grant's length, not at every position), or at once when position asked
// (−1: none) is granted but not yet told.
func (w *WindowRank) grant(asked int32) {
	if w.clientsDone || w.share == nil {
		return
	}
	files := w.share.Files
	limit := w.remoteLimit()
	w.granted = max(w.granted, w.low-1)
	for int(w.granted)+1 < len(files) {
		sn := w.granted + 1
		if w.planned[sn] && !w.asked[sn] {
			b := w.size(files[sn])
			if w.grantBytes+b > limit {
				break
			}
			w.grantBytes += b
		}
		w.granted = sn
	}
	near := w.told-w.low < int32(w.cfg.Window) && w.granted-w.told >= max(1, (w.granted-w.low)/2)
	if w.granted > w.told && (near || (asked > w.told && asked <= w.granted && w.planned[asked])) {
		w.tell()
	}
}

// tell sends the grant to every home with a planned push among the
// positions granted since the homes were last told.
func (w *WindowRank) tell() {
	files := w.share.Files
	to := make([]bool, w.cfg.Mapping.Ranks())
	for sn := w.told + 1; sn <= w.granted; sn++ {
		if w.planned[sn] {
			to[w.cfg.Mapping.Home(files[sn])] = true
		}
	}
	for h, ok := range to {
		if ok {
			w.stats.Grants++
			w.rd.Sends = append(w.rd.Sends, Message{Type: MsgGrant, From: int32(w.me), To: int32(h), Epoch: w.epoch, Sn: w.granted})
		}
	}
	w.told = w.granted
}

// remoteLimit is this rank's limit on bytes of other ranks' files
// received ahead of their positions.
func (w *WindowRank) remoteLimit() int64 {
	if w.cfg.Remote == nil {
		return 0
	}
	return w.cfg.Remote[w.me]
}

// fetch asks the home of file f, planned for position sn, for it: a
// position not pushed ahead, or asked for before its push was granted.
func (w *WindowRank) fetch(sn int32, f FileID) {
	w.fetched[sn] = true
	w.rd.Sends = append(w.rd.Sends, Message{Type: MsgRequest, From: int32(w.me), To: int32(w.cfg.Mapping.Home(f)),
		Epoch: w.epoch, Sn: sn, File: f})
}

func (w *WindowRank) message(m Message) error {
	switch {
	case !w.started || m.Epoch > w.epoch:
		w.deferred = append(w.deferred, m)
		return nil
	case m.Epoch < w.epoch:
		if m.Type != MsgAnswers && m.Type != MsgAhead { // those of a rank that ended the epoch first
			w.stats.Stale++
		}
		return nil
	case m.From < 0 || int(m.From) >= w.cfg.Mapping.Ranks() || int(m.From) == w.me || int(m.To) != w.me:
		return fmt.Errorf("proto: rank %d: message %v not meant for it", w.me, m)
	}
	switch m.Type {
	case MsgAnswers:
		for _, a := range m.Answers {
			if a.Rank != int32(w.me) {
				return fmt.Errorf("proto: rank %d: rank %d answers position %d of rank %d to it", w.me, m.From, a.Sn, a.Rank)
			}
		}
		return w.answersFrom(int(m.From), m.Answers)
	case MsgAhead:
		return w.aheadFrom(int(m.From), m.Ahead)
	case MsgReply, MsgPush:
		if w.share == nil {
			return fmt.Errorf("proto: rank %d: %v before it had every home's answers", w.me, m)
		}
	}
	switch m.Type {
	case MsgRequest:
		if w.done[m.From] { // a request sent ahead, overtaken by the rank's done
			w.stats.Stale++
			return nil
		}
		return w.peerRequest(m)
	case MsgGrant:
		return w.granting(m)
	case MsgDone:
		if !w.done[m.From] {
			w.done[m.From] = true
			w.drop(int(m.From))
		}
		return nil
	case MsgReply:
		return w.reply(m)
	case MsgPush:
		return w.pushed(m)
	}
	return fmt.Errorf("proto: rank %d: unexpected %v", w.me, m)
}

// reply takes a file this rank asked for on demand.
func (w *WindowRank) reply(m Message) error {
	files := w.share.Files
	if m.Sn < 0 || int(m.Sn) >= len(files) || files[m.Sn] != m.File || int(m.From) != w.cfg.Mapping.Home(m.File) || w.arrived[m.Sn] || w.failed[m.Sn] {
		return fmt.Errorf("proto: rank %d: unexpected reply of rank %d for position %d (file %d)", w.me, m.From, m.Sn, m.File)
	}
	if !m.Status.HasFile() && m.Status != StatusReadFailed {
		return fmt.Errorf("proto: rank %d: reply of rank %d for position %d of status %s", w.me, m.From, m.Sn, m.Status)
	}
	// an answer on demand, or, for a push granted, its read's failure
	granted := w.planned[m.Sn] && m.Sn <= w.told && m.Status == StatusReadFailed
	if !w.fetched[m.Sn] && !granted {
		return fmt.Errorf("proto: rank %d: unexpected reply of rank %d for position %d (file %d)", w.me, m.From, m.Sn, m.File)
	}
	w.fetched[m.Sn] = false // answered
	switch {
	case m.Status.HasFile():
		w.deliver(m.Sn, m.File, FromRemote, m.Status)
	case w.asked[m.Sn]:
		w.rd.Deliveries = append(w.rd.Deliveries, Delivery{Sn: m.Sn, File: m.File, Status: m.Status})
	default:
		w.failed[m.Sn] = true
	}
	return nil
}

// pushed takes the files a home pushed for positions this rank granted:
// delivered at once to a client that asked already, else kept until one
// does.
func (w *WindowRank) pushed(m Message) error {
	files := w.share.Files
	for _, p := range m.Pushes {
		sn := p.Sn
		if sn < 0 || int(sn) >= len(files) || files[sn] != p.File || !w.planned[sn] || sn > w.told ||
			int(m.From) != w.cfg.Mapping.Home(p.File) || w.arrived[sn] || w.failed[sn] || !p.Status.HasFile() {
			return fmt.Errorf("proto: rank %d: unexpected push of rank %d for position %d (file %d)", w.me, m.From, sn, p.File)
		}
	}
	for _, p := range m.Pushes {
		w.stats.PushesReceived++
		w.fetched[p.Sn] = false // asked on demand too: the push answers
		switch {
		case w.clientsDone:
			w.rd.Forget = append(w.rd.Forget, p.File)
		case w.asked[p.Sn]:
			w.deliver(p.Sn, p.File, FromRemote, p.Status)
		default:
			w.arrived[p.Sn], w.arrivedAs[p.Sn] = true, p.Status
			w.buffered += w.size(p.File)
			w.stats.PeakBuffered = max(w.stats.PeakBuffered, w.buffered)
			w.stats.PeakMem = max(w.stats.PeakMem, w.held+w.buffered)
		}
	}
	return nil
}
