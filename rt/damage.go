package rt

import (
	"fmt"
	"math"
	"strings"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// damageLog is the damage a rank found in this job (Node.damage): named
// holds what was already named (shard, chunk, slot; slot −1 the header),
// lost what a client hears for each damaged file of this rank
// (Config.OnDamage "skip"), staged the chunks (shard, chunk) of staged
// copies found damaged and read from the source instead (fallback).
type damageLog struct {
	named  map[[3]int]bool
	lost   map[proto.FileID]string
	staged map[[2]int]bool
}

// damaged deals with what a chunk read found damaged on storage (read
// twice: see readChunk). With Config.OnDamage "fail" a damaged file is
// the epoch's error, which ends the job; with "skip" each damaged file is
// left out of every epoch, the files of a chunk named in one line, and
// the loop answers their positions with that news, until more files are
// left out than Config.MaxSkipped allows. A damaged header costs no file
// (the index has its table): it is named once either way.
func (n *Node) damaged(res *readResult) error {
	if res.replaced != nil {
		return res.replaced
	}
	n.stagedDamage(res)
	if d := res.transient; d != nil && n.once(d) {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %v on a first read; read again, the chunk was intact\n", n.me, d)
	}
	if d := res.header; d != nil && n.once(d) {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %v; its files match the index and are served\n", n.me, d)
	}
	if len(res.damage) == 0 {
		return nil
	}
	also := "" // why the source of a staged copy did not stand in
	if res.source != nil {
		also = "; " + res.source.Error()
	}
	if n.cfg.OnDamage != "skip" {
		return fmt.Errorf("rt: rank %d: damaged data (read twice): %v%s%s; the job stops (brandrt serve --on-damage skip leaves damaged files out; brandrt verify checks the whole dataset)",
			n.me, &res.damage[0], moreSlots(res.damage[1:]), also)
	}
	var news []chunk.Damage
	for i := range res.damage {
		if d := &res.damage[i]; n.once(d) {
			n.damage.lost[proto.FileID(d.ID)] = fmt.Sprintf("file %d is damaged on storage and left out (--on-damage skip): %v%s", d.ID, d, also)
			news = append(news, *d)
		}
	}
	if len(news) == 0 {
		return nil
	}
	most := n.skipLimit()
	fmt.Fprintf(n.site.Log, "brandrt: rank %d: %v%s%s; left out of every epoch (--on-damage skip; this rank has left out %d files, the job may leave out %d: --max-skipped)\n",
		n.me, &news[0], moreSlots(news[1:]), also, len(n.damage.lost), most)
	if int64(len(n.damage.lost)) > most {
		return n.tooManySkipped(int64(len(n.damage.lost)), "on this rank")
	}
	return nil
}

// stagedDamage says, once per chunk, that res's chunk was damaged in its
// staged copy and read from the source instead (fallback).
func (n *Node) stagedDamage(res *readResult) {
	d := res.staged
	if d == nil || n.damage.staged[[2]int{d.Rank, d.Chunk}] {
		return
	}
	if n.damage.staged == nil {
		n.damage.staged = make(map[[2]int]bool)
	}
	n.damage.staged[[2]int{d.Rank, d.Chunk}] = true
	fmt.Fprintf(n.site.Log, "brandrt: rank %d: its staged copy of shard %d chunk %d is damaged (read twice): %v; read the chunk from the source, %s, instead\n",
		n.me, d.Rank, d.Chunk, d, res.stagedFrom)
}

// moreSlots names the slots of more damaged files of the same chunk.
func moreSlots(ds []chunk.Damage) string {
	if len(ds) == 0 {
		return ""
	}
	const most = 12
	var b strings.Builder
	fmt.Fprintf(&b, "; and %d more of its files: slot", len(ds))
	if len(ds) > 1 {
		b.WriteString("s")
	}
	for i, d := range ds[:min(len(ds), most)] {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d", d.Slot)
	}
	if len(ds) > most {
		b.WriteString(", …")
	}
	return b.String()
}

// skipLimit is the most files the job may leave out as damaged
// (Config.MaxSkipped).
func (n *Node) skipLimit() int64 {
	if n.cfg.MaxSkipped > 0 {
		return n.cfg.MaxSkipped
	}
	return int64(math.Ceil(n.cfg.MaxSkippedFraction * float64(n.data.man.Files)))
}

// tooManySkipped is the error that ends a job which left out skipped
// files, where.
func (n *Node) tooManySkipped(skipped int64, where string) error {
	return fmt.Errorf("rt: rank %d: %d files damaged on storage and left out %s, more than the %d --max-skipped allows (of %d in the dataset); the job stops: brandrt verify --chunks %s names every damaged file",
		n.me, skipped, where, n.skipLimit(), n.data.man.Files, n.cfg.Chunks)
}

// once reports whether d is news: not named before in this job.
func (n *Node) once(d *chunk.Damage) bool {
	key := [3]int{d.Rank, d.Chunk, d.Slot}
	if n.damage.named[key] {
		return false
	}
	if n.damage.named == nil {
		n.damage.named, n.damage.lost = make(map[[3]int]bool), make(map[proto.FileID]string)
	}
	n.damage.named[key] = true
	return true
}

// damageNote is what a client hears for damaged file f (a delivery of
// proto.StatusDamaged): where it is damaged, and, for a file of this
// rank, what the read found.
func (n *Node) damageNote(f proto.FileID) string {
	if s, ok := n.damage.lost[f]; ok {
		return s
	}
	if h := n.data.m.Home(f); h != n.me {
		return fmt.Sprintf("file %d is damaged on the storage of rank %d, which names it in its log, and left out (--on-damage skip)", f, h)
	}
	return fmt.Sprintf("file %d is damaged on the storage of rank %d and left out (--on-damage skip)", f, n.me)
}

// damagedIn lists the files of res's chunk that it holds without bytes,
// damaged on storage (proto.ReadDone.Damaged): found so by this read, or
// by the one that made the chunk resident.
func (n *Node) damagedIn(res *readResult) []proto.FileID {
	var fs []proto.FileID
	if res.ch == nil {
		return nil
	}
	for i := range res.ch.Slots() {
		if res.ch.File(i) == nil {
			fs = append(fs, n.data.first+proto.FileID(n.data.shard.ChunkFirst(res.ch.Index)+i))
		}
	}
	return fs
}
