package proto

import "fmt"

// A Stretch is one job's part of an epoch that was interrupted and then
// resumed by another job, perhaps on another number of ranks: In is what
// that job planned with (Mapping, Sizes, Seed, Budget, Lead and Ramp;
// the epoch, traces, drains and delivered files are filled in here), and
// every one of its ranks had delivered the first Position positions of
// its trace (all of it, when shorter) when it stopped. A job trained with
// DDP steps every process together, so one position tells where all of
// its ranks were.
type Stretch struct {
	In       WindowInput
	Position int
}

// FreshPlan returns epoch e's plan for a job that planned epochs 1 to e
// on in with seeded traces (Traces), each from the drains of the one
// before it, as serve does when nothing interrupts it.
func FreshPlan(in WindowInput, e uint32) (*WindowPlan, error) {
	return planThrough(in, e, func(k uint32) [][]FileID { return Traces(in.Mapping.Files(), in.Mapping.Ranks(), in.Seed, k) })
}

// planThrough plans epochs 1 to e on in with traces, each from the drains
// of the one before it, and returns epoch e's plan (nil when e is 0).
func planThrough(in WindowInput, e uint32, traces func(uint32) [][]FileID) (*WindowPlan, error) {
	in.After, in.Delivered, in.Resident = nil, nil, nil
	var p *WindowPlan
	for k := uint32(1); k <= e; k++ {
		in.Epoch, in.Traces = k, traces(k)
		var err error
		if p, err = PlanWindow(in); err != nil {
			return nil, fmt.Errorf("proto: epoch %d: %w", k, err)
		}
		in.After, in.Resident = p.Drains, p.Resident
	}
	return p, nil
}

// RestPlan plans what is left of epoch e on in once the files marked in
// delivered were delivered: the traces are RestTraces, and every pool
// starts empty, as a restarted job's memory does. Its Drains are those of
// the fresh job's epoch e (FreshPlan), so that the epochs after it are
// planned as that job's are.
func RestPlan(in WindowInput, e uint32, delivered []bool) (*WindowPlan, error) {
	fresh, err := FreshPlan(in, e)
	if err != nil {
		return nil, err
	}
	in.Epoch, in.After, in.Delivered, in.Resident = e, nil, delivered, nil
	in.Traces = RestTraces(in.Mapping.Files(), in.Mapping.Ranks(), in.Seed, e, delivered)
	p, err := PlanWindow(in)
	if err != nil {
		return nil, fmt.Errorf("proto: the rest of epoch %d: %w", e, err)
	}
	p.Drains, p.Resident = fresh.Drains, fresh.Resident
	return p, nil
}

// Delivered returns which files of epoch e the stretches delivered, in
// order: the first served the epoch from its beginning as a job that was
// not interrupted (FreshPlan), each later one what the ones before it
// left (RestPlan). Every stretch must plan the same dataset with the
// same seed.
func Delivered(e uint32, stretches []Stretch) ([]bool, error) {
	var delivered []bool
	for i, s := range stretches {
		if i > 0 && (s.In.Mapping.Files() != len(delivered) || s.In.Seed != stretches[0].In.Seed) {
			return nil, fmt.Errorf("proto: stretch %d of epoch %d plans %d files with seed %d, the first %d files with seed %d",
				i+1, e, s.In.Mapping.Files(), s.In.Seed, len(delivered), stretches[0].In.Seed)
		}
		var p *WindowPlan
		var err error
		if i == 0 {
			p, err = FreshPlan(s.In, e)
			delivered = make([]bool, s.In.Mapping.Files())
		} else {
			p, err = RestPlan(s.In, e, delivered)
		}
		if err != nil {
			return nil, fmt.Errorf("proto: stretch %d of epoch %d: %w", i+1, e, err)
		}
		if s.Position < 0 {
			return nil, fmt.Errorf("proto: stretch %d of epoch %d ends at position %d", i+1, e, s.Position)
		}
		for _, fs := range p.Files {
			for _, f := range fs[:min(s.Position, len(fs))] {
				delivered[f] = true
			}
		}
	}
	return delivered, nil
}
