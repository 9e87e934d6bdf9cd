package rt

import (
	"fmt"
	"strings"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// damaged deals with what a chunk read found damaged on storage (read
// again: see readChunk). With Config.OnDamage "fail" a damaged file is
// the epoch's error, which ends the job; with "skip" each damaged file is
// named once, and the loop answers its position with that news. A
// damaged header costs no file (the index has its table): it is named
// once either way.
func (n *Node) damaged(res *readResult) error {
	if d := res.transient; d != nil && n.once(d) {
		fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: %v on a first read; read again, the chunk was intact\n", n.me, d)
	}
	if d := res.header; d != nil && n.once(d) {
		fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: %v; its files match the index and are served\n", n.me, d)
	}
	if len(res.damage) == 0 {
		return nil
	}
	if n.cfg.OnDamage != "skip" {
		return fmt.Errorf("rt: damaged data (%s): %s; the job stops (brandrt serve --on-damage skip leaves damaged files out; brandrt verify checks the whole dataset)",
			readTimes(res), listDamage(res.damage, 10))
	}
	for i := range res.damage {
		d := &res.damage[i]
		if n.once(d) {
			n.lost[proto.FileID(d.ID)] = fmt.Sprintf("file %d is damaged on storage and left out (--on-damage skip): %v", d.ID, d)
			fmt.Fprintf(n.cfg.Log, "brandrt: rank %d: %v; left out of every epoch (--on-damage skip)\n", n.me, d)
		}
	}
	return nil
}

// readTimes says how often a damaged chunk was read (see readChunk).
func readTimes(res *readResult) string {
	if ioFailed(*res) {
		return fmt.Sprintf("read %d times over %v", 2+len(retryWaits), sum(retryWaits))
	}
	return "read twice"
}

// sum adds up ds.
func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// once reports whether d is news: not named before in this job.
func (n *Node) once(d *chunk.Damage) bool {
	key := [3]int{d.Rank, d.Chunk, d.Slot}
	if n.named[key] {
		return false
	}
	if n.named == nil {
		n.named, n.lost = make(map[[3]int]bool), make(map[proto.FileID]string)
	}
	n.named[key] = true
	return true
}

// listDamage joins up to most damages, saying how many more there are.
func listDamage(ds []chunk.Damage, most int) string {
	var b strings.Builder
	for i := range ds[:min(len(ds), most)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(ds[i].Error())
	}
	if len(ds) > most {
		fmt.Fprintf(&b, "; and %d more", len(ds)-most)
	}
	return b.String()
}

// lostNote is what a client hears for a damaged file of this rank.
func (n *Node) lostNote(f proto.FileID) string {
	if s, ok := n.lost[f]; ok {
		return s
	}
	return fmt.Sprintf("file %d is damaged on the storage of rank %d and left out (--on-damage skip)", f, n.me)
}
