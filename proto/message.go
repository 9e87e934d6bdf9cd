package proto

import (
	"fmt"
	"strings"
)

// MsgType is the kind of a message between ranks.
type MsgType uint8

// Message types.
const (
	// MsgRequest asks the owner for a file on behalf of a trace position.
	MsgRequest MsgType = iota + 1
	// MsgReply answers a request: a file (Status OK), a pointer to a pushed
	// file (StatusRedirect) or a failure.
	MsgReply
	// MsgPush carries prefetched files for upcoming positions.
	MsgPush
	// MsgGrant (the window policy) tells a home that it may push the
	// files planned for the sender's positions up to Sn.
	MsgGrant
	// MsgDone tells every other rank that the sender's clients will ask
	// for nothing more in the epoch (all answered, or they ended it
	// early): the window policy drops what it keeps for them; the
	// papers' protocol has nothing to do. A rank sends it on ClientsDone.
	MsgDone
	// MsgAnswers (the window policy) carries, at an epoch's start, the
	// sender's answers to the receiver's positions that ask for a file of
	// the sender's: which of its files answers each, from which step of
	// its pool (Answers; every home sends one to every other rank, empty
	// or not). A rank puts its positions together from them (PlanShare).
	MsgAnswers
	// MsgAhead (the window policy) tells a home, once the sender has
	// every home's answers, which of the sender's positions its files are
	// pushed to ahead (Ahead: RankShare.AheadBy, in position order; sent
	// to every other rank, empty or not).
	MsgAhead
)

var msgNames = [...]string{"", "request", "reply", "push", "grant", "done", "answers", "ahead"}

func (t MsgType) String() string { return enumName(t, msgNames[:], "msg") }

// Status qualifies a reply or a delivery.
type Status uint8

// Reply and delivery statuses.
const (
	// StatusOK: the file was delivered.
	StatusOK Status = iota
	// StatusRedirect: the owner already pushed a file for this position
	// (push PushID); the requester takes it from its buffer.
	StatusRedirect
	// StatusReadFailed: the chunk read that should have produced the file
	// failed; no file is delivered.
	StatusReadFailed
	// StatusDamaged: the file's bytes are damaged on its home's storage
	// (ReadDone.Damaged): it answers its position, and goes where a file
	// goes (a reply, a push, a delivery), but without its bytes; the
	// runtime tells the client it was left out.
	StatusDamaged
)

var statusNames = [...]string{"ok", "redirect", "read-failed", "damaged"}

func (s Status) String() string { return enumName(s, statusNames[:], "status") }

// HasFile reports whether a reply, push or delivery of status s moves its
// file: with its bytes (ok) or without them (damaged).
func (s Status) HasFile() bool { return s == StatusOK || s == StatusDamaged }

// Ack tells an owner that its push ID was consumed at the requester by the
// trace position By (which may differ from the position it was pushed for).
type Ack struct {
	ID uint64
	By int32
}

// Pushed is one prefetched file: push ID, the requester's trace position it
// is meant for, and the file in the owner's slot for that position; its
// Status is ok or damaged.
type Pushed struct {
	ID     uint64
	Sn     int32
	File   FileID
	Size   int64
	Status Status
}

// Message is what ranks send each other. Fields not used by a type are zero.
type Message struct {
	Type  MsgType
	From  int32
	To    int32
	Epoch uint32
	// Sn is the requester's trace position (request, reply).
	Sn int32
	// File is the requested file (request) or the delivered one (reply OK).
	File FileID
	// Size is the delivered file's size in bytes (reply OK).
	Size int64
	// BufLimit is the buffer bytes the requester grants this owner (request).
	BufLimit int64
	// Frontier is one past the highest position the requester has asked
	// for (request); the owner's prefetch window starts there.
	Frontier int32
	// Status qualifies a reply.
	Status Status
	// PushID names the push a StatusRedirect reply points to.
	PushID uint64
	// Acks are the requester's consumed pushes from this owner (request).
	Acks []Ack
	// Pushes are the prefetched files (push).
	Pushes []Pushed
	// Answers are the sender's answers to the receiver's positions
	// (answers); each Answer's Rank is the receiver.
	Answers []Answer
	// Ahead are the receiver's positions the sender is pushed ahead
	// (ahead).
	Ahead []int32
}

func (m Message) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d→%d %s", m.From, m.To, m.Type)
	switch m.Type {
	case MsgRequest:
		fmt.Fprintf(&b, " sn=%d file=%d frontier=%d limit=%d", m.Sn, m.File, m.Frontier, m.BufLimit)
		for _, a := range m.Acks {
			fmt.Fprintf(&b, " ack(%d by %d)", a.ID, a.By)
		}
	case MsgReply:
		fmt.Fprintf(&b, " sn=%d %s", m.Sn, m.Status)
		switch m.Status {
		case StatusOK, StatusDamaged:
			fmt.Fprintf(&b, " file=%d", m.File)
		case StatusRedirect:
			fmt.Fprintf(&b, " push=%d", m.PushID)
		}
	case MsgGrant:
		fmt.Fprintf(&b, " up to sn=%d", m.Sn)
	case MsgAnswers:
		for i, a := range m.Answers {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " sn=%d file=%d at=%d", a.Sn, a.File, a.At)
		}
	case MsgAhead:
		fmt.Fprintf(&b, " sns=%v", m.Ahead)
	case MsgPush:
		for i, p := range m.Pushes {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " #%d sn=%d file=%d", p.ID, p.Sn, p.File)
			if p.Status != StatusOK {
				fmt.Fprintf(&b, " %s", p.Status)
			}
		}
	}
	return b.String()
}

// Source says where a delivered file came from.
type Source uint8

// Delivery sources.
const (
	// FromMemory: a valid slot of a local VC.
	FromMemory Source = iota
	// FromRead: a chunk read issued or joined for this request.
	FromRead
	// FromBuffer: a file an owner pushed ahead of time.
	FromBuffer
	// FromRemote: the owner's reply to an on-demand request.
	FromRemote
)

var sourceNames = [...]string{"memory", "read", "buffer", "remote"}

func (s Source) String() string { return enumName(s, sourceNames[:], "source") }

// enumName returns the name of v, or "kind(v)" for a value without one.
func enumName[T ~uint8](v T, names []string, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// Delivery hands a file to the local client that asked for trace position
// Sn. File may differ from the requested file: that is redirection.
type Delivery struct {
	Sn     int32
	File   FileID
	Size   int64
	Source Source
	Status Status
}

func (d Delivery) String() string {
	if d.Status == StatusDamaged {
		return fmt.Sprintf("sn=%d file=%d damaged (%s)", d.Sn, d.File, d.Source)
	}
	if d.Status != StatusOK {
		return fmt.Sprintf("sn=%d %s", d.Sn, d.Status)
	}
	return fmt.Sprintf("sn=%d file=%d (%s)", d.Sn, d.File, d.Source)
}

// Read asks the caller to read physical chunk PC whole and to answer with a
// ReadDone event carrying the same PC and Epoch.
type Read struct {
	PC    int
	VC    int
	Epoch uint32
	// Keep: the chunk stays in memory once read, for the rest of the
	// run (the window policy's kept chunks); later reads of it are
	// answered from there.
	Keep bool
}
