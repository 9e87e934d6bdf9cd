package proto

// A Redirector decides which slot of a virtual chunk answers a request.
//
// Slot is given the VC's valid slots (bit i set when slot i holds a file)
// and the slot o of the requested file, and returns the slot whose file is
// delivered, or -1 when no slot may answer and slot o must be refilled. A
// policy must keep every request answerable: the protocol's exactly-once
// argument counts, per slot, the requests that land on it against the files
// mapped to it.
type Redirector interface {
	Slot(valid []uint64, o int) int
}

// SameSlot is the policy of the papers: a request is answered by whatever
// valid file sits in its own slot of its VC.
type SameSlot struct{}

// Slot returns o when slot o is valid, else -1.
func (SameSlot) Slot(valid []uint64, o int) int {
	if bitset(valid).has(o) {
		return o
	}
	return -1
}
