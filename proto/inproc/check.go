package inproc

import (
	"errors"
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// record checks and notes one delivery to rank r in epoch b.
func (c *Cluster) record(b *book, r int, d proto.Delivery) {
	if c.out != nil {
		c.printf("rank %d: deliver %v", r, d)
	}
	if d.Sn < 0 || int(d.Sn) >= len(b.asked[r]) || !b.asked[r][d.Sn] {
		c.violate("rank %d: sn %d answered, which its client did not ask for in epoch %d", r, d.Sn, b.epoch)
		return
	}
	if b.answered[r][d.Sn] {
		c.violate("rank %d: sn %d answered twice in epoch %d", r, d.Sn, b.epoch)
		return
	}
	b.answered[r][d.Sn] = true
	b.outstanding[r]--
	if !d.Status.HasFile() {
		return
	}
	if damaged := d.Status == proto.StatusDamaged; damaged != c.damaged[d.File] {
		c.violate("rank %d: sn %d answered with file %d, status %s, whose bytes are %s on storage", r, d.Sn, d.File, d.Status,
			map[bool]string{true: "damaged", false: "sound"}[c.damaged[d.File]])
	}
	if prev := b.delivered[r][d.Sn]; prev != proto.NoFile {
		c.violate("rank %d: sn %d delivered twice (files %d and %d)", r, d.Sn, prev, d.File)
	}
	if prev := b.byFile[d.File]; prev != 0 {
		c.violate("file %d delivered twice in epoch %d (ranks %d and %d)", d.File, b.epoch, prev-1, r)
	}
	if !b.loaded[d.File] {
		c.violate("file %d delivered to rank %d but never loaded in epoch %d", d.File, r, b.epoch)
	}
	if p := c.Ranks[r].Plan(); p != nil {
		if want := p.Files[r][d.Sn]; d.File != want {
			c.violate("rank %d: sn %d got file %d, planned %d", r, d.Sn, d.File, want)
		}
	} else if c.Mapping.GlobalSlot(b.traces[r][d.Sn]) != c.Mapping.GlobalSlot(d.File) {
		c.violate("rank %d: sn %d got file %d, which does not share file %d's slot", r, d.Sn, d.File, b.traces[r][d.Sn])
	}
	b.byFile[d.File] = int32(r) + 1
	b.delivered[r][d.Sn] = d.File
}

func (c *Cluster) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// Check returns the invariant violations seen so far in this epoch (at
// most once, memory, no double load, pushed files finding empty slots),
// plus a full consistency check of every rank.
func (c *Cluster) Check() error {
	errs := make([]error, 0, len(c.violations))
	for _, v := range c.violations {
		errs = append(errs, errors.New(v))
	}
	for r, rank := range c.Ranks {
		if err := rank.CheckInvariants(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// CheckAnswered returns an error unless every request of the current
// epoch was answered (with a file or a failure): nothing hangs.
func (c *Cluster) CheckAnswered() error {
	var errs []error
	for r, n := range c.Outstanding {
		if n != 0 {
			errs = append(errs, fmt.Errorf("rank %d: %d requests of epoch %d never answered", r, n, c.Epoch))
		}
	}
	return errors.Join(errs...)
}

// CheckComplete returns an error unless every position of every trace was
// delivered and every file of the dataset exactly once.
func (c *Cluster) CheckComplete() error {
	if err := c.Check(); err != nil {
		return err
	}
	var errs []error
	for r, d := range c.Delivered {
		for sn, f := range d {
			if f == proto.NoFile && (c.Start == nil || int32(sn) >= c.Start[r]) {
				errs = append(errs, fmt.Errorf("rank %d: sn %d never delivered", r, sn))
			}
		}
	}
	covered := 0
	for _, t := range c.Traces {
		covered += len(t)
	}
	for f, by := range c.cur.byFile {
		if by == 0 && covered == c.Mapping.Files() {
			errs = append(errs, fmt.Errorf("file %d never delivered", f))
		}
	}
	if len(errs) > 8 {
		errs = append(errs[:8], fmt.Errorf("… and %d more", len(errs)-8))
	}
	return errors.Join(errs...)
}

// Stats returns the sum of every rank's counters.
func (c *Cluster) Stats() proto.Stats {
	var s proto.Stats
	for _, r := range c.Ranks {
		s = s.Add(r.Stats())
	}
	return s
}
