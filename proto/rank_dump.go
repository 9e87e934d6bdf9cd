package proto

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// String returns a stable text dump of the rank's epoch state: each local
// VC's slots (file id, "f*" a file whose bytes are damaged on storage,
// "." empty, "~f" pending on a read of file f), the
// reads in flight, the buffer and the outstanding pushes. Golden tests
// compare it.
func (r *Rank) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d epoch %d held=%d buffered=%d\n", r.me, r.epoch, r.held, r.buffered)
	for v := 0; v < r.nVC; v++ {
		fmt.Fprintf(&b, "  vc %d:", r.firstVC+v)
		for o := 0; o < r.k; o++ {
			b.WriteByte(' ')
			b.WriteString(r.slotString(int32(v*r.k + o)))
		}
		b.WriteByte('\n')
	}
	for pc, rd := range r.reads {
		if rd != nil {
			fmt.Fprintf(&b, "  reading pc %d\n", r.firstPC+pc)
		}
	}
	for h := range r.owners {
		if h != r.me {
			r.dumpRemote(&b, h)
		}
	}
	return b.String()
}

func (r *Rank) slotString(x int32) string {
	switch r.state[x] {
	case slotValid:
		if r.damaged[r.slotFile[x]] {
			return fmt.Sprintf("%d*", r.slotFile[x])
		}
		return fmt.Sprint(r.slotFile[x])
	case slotPending:
		return fmt.Sprintf("~%d", r.slotFile[x])
	}
	return "."
}

func (r *Rank) dumpRemote(b *strings.Builder, h int) {
	o := &r.owners[h]
	for _, x := range slices.Sorted(maps.Keys(o.buf)) {
		e := o.buf[x]
		fmt.Fprintf(b, "  buffer from %d: file %d (push %d for sn %d)", h, e.file, e.id, e.sn)
		if e.status != StatusOK {
			fmt.Fprintf(b, " %s", e.status)
		}
		b.WriteByte('\n')
	}
	p := &r.peers[h]
	for _, id := range slices.Sorted(maps.Keys(p.out)) {
		fmt.Fprintf(b, "  pushed to %d: #%d for sn %d, unacked\n", h, id, p.out[id].sn)
	}
}
