package main

import (
	"fmt"
	"math"

	"github.com/brandrt/brandrt/rt"
)

// memFills are how full the calibration's runs kept the footprint's
// bounds at each rank's peak (examples/bench/calibrate.py fits them
// against the peak of the memory cgroup of what mpirun started on each
// node: the rank and its launcher's daemon). The footprint is what a
// rank may take at most, what serve checks its cgroup against; each of
// its bounds on files in flight is reached only when the training holds
// what the DataLoader has in flight. From the fills plan says what a
// rank likely takes at its peak (likelyPeak). All optional: a costs file
// without Process and InFlight gives no likely peak.
type memFills struct {
	// Process is the rank's process beside its files and tables (the
	// runtime, MPI's, the launcher's daemon, the page cache of their
	// libraries), in bytes.
	Process *float64 `json:"mem_process_bytes,omitempty"`
	// InFlight is the share of the bounds on files moving between ranks
	// and answered in place that the peak held (rt.Footprint's Remote,
	// MPI, Answered and Received).
	InFlight *float64 `json:"mem_fill_in_flight,omitempty"`
	// Handed is the share of the bound on files handed on in place
	// (Handed) held at the peak by a training that takes batches as they
	// come; HandedTraining by one that bounds the epoch (it holds what
	// the DataLoader has in flight). Either, not given (no run of the
	// calibration had such a training), counts the bound whole.
	Handed         *float64 `json:"mem_fill_handed,omitempty"`
	HandedTraining *float64 `json:"mem_fill_handed_training,omitempty"`
}

// check names the fills out of range.
func (m memFills) check() []error {
	var errs []error
	if m.Process != nil && !(*m.Process >= 0 && *m.Process <= 1<<30) {
		errs = append(errs, fmt.Errorf(`"mem_process_bytes" is %g, want 0 to 1 GiB`, *m.Process))
	}
	return append(errs, outOfRange(1, ", want 0 to 1 (a share of a bound)", optional{"mem_fill_in_flight", m.InFlight},
		optional{"mem_fill_handed", m.Handed}, optional{"mem_fill_handed_training", m.HandedTraining})...)
}

// optional is a value a costs file may leave out, by its key.
type optional struct {
	name string
	v    *float64
}

// outOfRange names each value given that is not within 0 to hi, by its
// key and value, then want: `"mem_fill_handed" is 1.5, want 0 to 1 …`.
func outOfRange(hi float64, want string, vs ...optional) []error {
	var errs []error
	for _, f := range vs {
		if f.v != nil && !(*f.v >= 0 && *f.v <= hi) {
			errs = append(errs, fmt.Errorf("%q is %g%s", f.name, *f.v, want))
		}
	}
	return errs
}

// likelyPeak is what a rank of footprint f likely takes at its peak:
// what it holds whatever the training does (its own files, as the pages
// they write where the budget holds the shard and lends no place twice;
// their records, its tables, the chunk reads and the rings, at their bounds),
// its process, and its bounds on files in flight filled as the
// calibration's runs filled them; training says that the training bounds
// the rank's epochs. false without the fills.
func (m memFills) likelyPeak(f rt.Footprint, training bool) (int64, bool) {
	if m.Process == nil || m.InFlight == nil {
		return 0, false
	}
	fill := m.Handed
	if training {
		fill = m.HandedTraining
	}
	handed := 1.0
	if fill != nil {
		handed = *fill
	}
	own := f.Own
	if f.Budget >= f.Shard {
		own = f.Written
	}
	held := own + f.Records + f.Tables + f.Dataset + f.Order + f.OrderOut + f.Reads + f.Rings
	inFlight := f.Remote + f.MPI + f.Answered + f.Received
	return held + int64(math.Round(*m.Process+*m.InFlight*float64(inFlight)+handed*float64(f.Handed))), true
}

// likelyPeaks is each rank's likely peak in p (nil without costs or
// their fills): the training bounds its epochs when it bounds the last.
func likelyPeaks(c *cpuCosts, p planned) []int64 {
	if c == nil || len(p.Epochs) == 0 {
		return nil
	}
	training := p.Epochs[len(p.Epochs)-1].Bound == boundTraining
	var out []int64
	for _, f := range p.Terms {
		b, ok := c.likelyPeak(f, training)
		if !ok {
			return nil
		}
		out = append(out, b)
	}
	return out
}
