package proto

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Epoch returns the epoch the rank is in, and whether it started one.
func (w *WindowRank) Epoch() (uint32, bool) { return w.epoch, w.started }

// String returns a stable text dump of the rank's epoch state: its
// budget's use, each own chunk's files (id in memory, "id*" in memory
// with its bytes damaged on storage, "~id" being read,
// "." not read, "-" gone: delivered, sent or dropped, "!id" lost to a
// failed read), the requests waiting for a file, its positions whose
// file of another rank was requested, arrived or failed, the pushes other
// ranks granted that wait for their chunk, and the next epoch's reads
// ahead. Golden tests compare it.
func (w *WindowRank) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d epoch %d held=%d buffered=%d reads=%d/%d low=%d granted=%d told=%d\n", w.me, w.epoch, w.held,
		w.buffered, w.nextRd, len(w.home.Reads), w.low, w.granted, w.told)
	w.dumpChunks(&b, w.state, w.damaged)
	for _, f := range slices.Sorted(maps.Keys(w.waiters)) {
		for _, q := range w.waiters[f] {
			if q.from < 0 {
				fmt.Fprintf(&b, "  file %d awaited by its client for sn %d\n", f, q.sn)
			} else {
				fmt.Fprintf(&b, "  file %d awaited by rank %d for sn %d\n", f, q.from, q.sn)
			}
		}
	}
	var files []FileID
	if w.share != nil {
		files = w.share.Files
	}
	for sn, f := range files {
		var tags []string
		for _, t := range []struct {
			on   bool
			name string
		}{{w.fetched[sn], "requested"}, {w.arrived[sn], "arrived"}, {w.arrived[sn] && w.arrivedAs[sn] == StatusDamaged, "damaged"},
			{w.failed[sn], "failed"}} {
			if t.on {
				tags = append(tags, t.name)
			}
		}
		if len(tags) > 0 {
			fmt.Fprintf(&b, "  sn %d: file %d of rank %d %s\n", sn, f, w.cfg.Mapping.Home(f), strings.Join(tags, ", "))
		}
	}
	for r, list := range w.pushTo {
		var out []string
		for _, a := range list[w.pushNext[r]:] {
			if a.Sn > w.grantOf[r] {
				break
			}
			if f := a.File; !w.pushedOut[f-w.first] && w.state[f-w.first] != gone {
				out = append(out, fmt.Sprintf("sn %d (file %d)", a.Sn, f))
			}
		}
		if len(out) > 0 {
			fmt.Fprintf(&b, "  granted by rank %d, not yet pushed: %s\n", r, strings.Join(out, ", "))
		}
	}
	if w.clientsDone {
		b.WriteString("  its clients are done\n")
	}
	for r, d := range w.done {
		if d && r != w.me {
			fmt.Fprintf(&b, "  rank %d is done\n", r)
		}
	}
	if x := w.early; x != nil && x.home != nil {
		fmt.Fprintf(&b, "  epoch %d read ahead: held=%d reads=%d/%d\n", x.epoch, x.held, x.nextRd, len(x.home.Reads))
		w.dumpChunks(&b, x.state, x.damaged)
	}
	return b.String()
}

// dumpChunks writes a line per own chunk with the state of each file.
func (w *WindowRank) dumpChunks(b *strings.Builder, state []fileState, damaged []bool) {
	m := w.cfg.Mapping
	lo, n := m.RankPCs(w.me)
	for pc := lo; pc < lo+n; pc++ {
		fmt.Fprintf(b, "  pc %d:", pc)
		first, end := m.PCFiles(pc)
		for f := first; f < end; f++ {
			b.WriteByte(' ')
			switch state[f-w.first] {
			case inMemory:
				fmt.Fprint(b, f)
				if damaged[f-w.first] {
					b.WriteByte('*')
				}
			case reading:
				fmt.Fprintf(b, "~%d", f)
			case notRead:
				b.WriteByte('.')
			case gone:
				b.WriteByte('-')
			case lost:
				fmt.Fprintf(b, "!%d", f)
			}
		}
		b.WriteByte('\n')
	}
}
