package rt

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// A Place is where a training job stood in an epoch when it saved a
// checkpoint: a BrandSampler's state_dict, which brandrt serve --resume
// takes up again. Epoch (from 1 here) and Position, the first position
// of every rank's trace not trained on, are those of the job that saved
// it, of Ranks ranks with --seed Seed. A job trained with DDP steps its
// processes together, so one position tells where every rank was.
//
// The rest says how that job planned the epoch, so that a job of
// another number of ranks, or with another --mem, can tell which files
// were trained on and serve the others (Node.resumePoint): the dataset
// (its manifest's hash), the policy, where the traces came from, the
// budget rule and the ramp; and, when the epoch was itself resumed on
// another plan, the stretches served before (Before, oldest first, each
// with how far it got). States saved before brandrt recorded these have
// no Dataset; they resume only in a job like the one that saved them.
type Place struct {
	Epoch    uint32 `json:"-"`
	Position int32  `json:"-"`
	Ranks    int    `json:"-"`
	Seed     uint64 `json:"-"`

	Dataset string    `json:"dataset,omitempty"`
	Policy  Policy    `json:"policy,omitempty"`
	Traces  string    `json:"traces,omitempty"`
	Plan    PlanRule  `json:"plan"`
	Before  []Stretch `json:"before,omitempty"`
}

// PlanRule is what a window plan of the dataset depends on besides the
// seed and the epoch: the ranks and their budgets, and the ramp.
type PlanRule struct {
	Ranks int `json:"ranks"`
	// MemBytes is each rank's budget; when 0, MemFraction of its shard.
	MemBytes    int64   `json:"mem_bytes"`
	MemFraction float64 `json:"mem_fraction"`
	Ramp        int     `json:"ramp"`
	// Keep is the share of the budget kept across epochs (Config.Keep);
	// 0 in a place saved before partial residency.
	Keep float64 `json:"keep,omitempty"`
}

// A Stretch is one job's part of an epoch resumed after it: the rule it
// planned with and the position every rank of it had reached.
type Stretch struct {
	PlanRule
	Position int32 `json:"position"`
}

// JobPlace is what this job's clients put in the states they save
// (Place, less the epoch, position and stretches before): the rings
// publish it.
func (n *Node) JobPlace() Place { return PlaceOf(n.cfg, n.budget, n.size, n.data.man) }

// PlaceOf is the place a job of cfg on ranks ranks saves over the
// dataset man, with its budget resolved (Node.Budget), less the epoch,
// position and stretches before: what a rank publishes, and what brandrt
// simulate --resume holds a saved state against.
func PlaceOf(cfg Config, budget Budget, ranks int, man *chunk.Manifest) Place {
	traces := "seed"
	if cfg.ClientTraces {
		traces = "clients"
	}
	rule := PlanRule{Ranks: ranks, MemBytes: budget.Bytes, MemFraction: budget.Shard, Ramp: cfg.Ramp, Keep: cfg.Keep}
	return Place{Ranks: ranks, Seed: cfg.Seed, Dataset: DatasetID(man), Policy: cfg.Policy, Traces: traces, Plan: rule}
}

// DatasetID names a dataset in a saved state: its manifest's hash.
func DatasetID(m *chunk.Manifest) string { return fmt.Sprintf("%016x", m.Hash()) }

// ParsePlace decodes the JSON a client sends with its start (a
// BrandSampler state: the epoch counted from 0 there) into a Place. A
// state without "dataset" (saved before brandrt recorded its plan) gives
// a Place with Dataset empty.
func ParsePlace(b []byte) (Place, error) {
	var raw struct {
		Epoch    *int64  `json:"epoch"`
		Position *int64  `json:"position"`
		Ranks    *int64  `json:"ranks"`
		Seed     *uint64 `json:"seed"`
		Place
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Place{}, fmt.Errorf("the saved state is not one a BrandSampler writes: %w", err)
	}
	if raw.Epoch == nil || raw.Position == nil || raw.Ranks == nil || raw.Seed == nil {
		return Place{}, errors.New(`the saved state lacks one of "epoch", "position", "ranks" and "seed"`)
	}
	p := raw.Place
	switch {
	case *raw.Epoch < 0 || *raw.Epoch >= 1<<31:
		return Place{}, fmt.Errorf("the saved state's epoch %d is not one", *raw.Epoch)
	case *raw.Position < 0 || *raw.Position > proto.MaxFiles:
		return Place{}, fmt.Errorf("the saved state's position %d is past any trace", *raw.Position)
	case *raw.Ranks < 1 || *raw.Ranks > 1<<20:
		return Place{}, fmt.Errorf("the saved state was saved in a job of %d ranks", *raw.Ranks)
	}
	p.Epoch, p.Position, p.Ranks, p.Seed = uint32(*raw.Epoch+1), int32(*raw.Position), int(*raw.Ranks), *raw.Seed
	if p.Dataset == "" {
		return p, nil
	}
	if p.Plan.Ranks != p.Ranks {
		return Place{}, fmt.Errorf("the saved state says %d ranks and its plan %d", p.Ranks, p.Plan.Ranks)
	}
	for i, s := range append(p.Before, Stretch{PlanRule: p.Plan}) {
		if err := s.check(); err != nil {
			return Place{}, fmt.Errorf("the saved state's stretch %d of epoch %d: %w", i+1, p.Epoch, err)
		}
	}
	return p, nil
}

func (r PlanRule) check() error {
	switch {
	case r.Ranks < 1 || r.Ranks > 1<<20:
		return fmt.Errorf("%d ranks", r.Ranks)
	case r.MemBytes < 0 || r.MemFraction < 0 || r.MemBytes == 0 && r.MemFraction <= 0:
		return fmt.Errorf("a budget of %d bytes or %g of a shard", r.MemBytes, r.MemFraction)
	case r.Ramp < 0:
		return fmt.Errorf("a ramp of %d chunks", r.Ramp)
	}
	return nil
}

// key identifies the place less the position, which may differ across
// the ranks of a job resumed on its own plan: every rank must resume
// from the same state.
func (p Place) key() int32 {
	b, _ := json.Marshal(struct {
		E uint32
		R int
		S uint64
		P Place
	}{p.Epoch, p.Ranks, p.Seed, p})
	h := fnv.New32a()
	h.Write(b)
	return int32(h.Sum32() >> 1)
}

// SamePlan reports whether p was saved by a job of ranks ranks that
// plans as one with rule and policy does: its positions then mean the
// same files in both, and the job resumes on that plan.
func (p Place) SamePlan(ranks int, rule PlanRule, policy Policy) bool {
	if p.Dataset == "" { // saved before plans were recorded: as before, by ranks
		return p.Ranks == ranks
	}
	return len(p.Before) == 0 && p.Plan == rule && p.Policy == policy
}

// A Takeup is how a job takes up a saved Place (Resume).
type Takeup int

const (
	// OnItsPlan: the job plans as the one that saved the place did, and
	// each rank's clients begin at the saved position.
	OnItsPlan Takeup = iota + 1
	// AfterDelivered: the job plans the rest of the epoch, the files not
	// trained on before the restart (Delivered), and its clients begin
	// at position 0.
	AfterDelivered
)

// Resume decides whether a job takes up the saved place p, and how: job
// is the place the job itself would save (Node.JobPlace: its ranks,
// seed, dataset, policy, traces and plan rule), epochs its last epoch.
// It is the one rule: a rank (Node.fits) and `brandrt simulate --resume`
// both call it. The error says what differs, in the flags' words.
func Resume(p, job Place, epochs int) (Takeup, error) {
	switch {
	case p.Seed != job.Seed:
		return 0, fmt.Errorf("the state was saved in a job with --seed %d and this one has --seed %d: the order would not be the interrupted one's", p.Seed, job.Seed)
	case p.Epoch < 1 || int(p.Epoch) > epochs:
		return 0, fmt.Errorf("resuming at epoch %d, but this job serves epochs 1 to %d (--epochs)", p.Epoch, epochs)
	case p.Dataset == "" && p.Ranks != job.Ranks:
		return 0, fmt.Errorf("the state was saved in a job of %d brandrt ranks by a brandrt that did not record its plan: it resumes only on %d ranks; this job has %d (or start epoch %d over)",
			p.Ranks, p.Ranks, job.Ranks, p.Epoch)
	case p.Dataset == "":
		return OnItsPlan, nil
	case p.Dataset != job.Dataset:
		return 0, fmt.Errorf("the state was saved in a job serving another dataset (manifest hash %s; this job's has %s): resume with the dataset it was saved with",
			p.Dataset, job.Dataset)
	case p.Policy != job.Policy:
		return 0, fmt.Errorf("the state was saved with --policy %s and this job serves --policy %s: resume with --policy %s", p.Policy, job.Policy, p.Policy)
	case p.Traces != job.Traces:
		return 0, fmt.Errorf("the state was saved with traces from %s and this job takes them from %s: resume with --traces %s", p.Traces, job.Traces, p.Traces)
	case p.SamePlan(job.Ranks, job.Plan, job.Policy):
		return OnItsPlan, nil
	case p.Policy != PolicyWindow:
		return 0, fmt.Errorf("the state was saved with --policy %s, whose order depends on timing: it resumes only in a job like the one that saved it (%d ranks, --mem and --ramp as then); this job has %d ranks",
			p.Policy, p.Ranks, job.Ranks)
	case p.Traces != "seed":
		return 0, fmt.Errorf("the state was saved with the clients' traces (--traces clients): it resumes only on %d ranks; this job has %d", p.Ranks, job.Ranks)
	}
	return AfterDelivered, nil
}

// Delivered returns the files of p's epoch trained on before the
// restart, from the plans of the jobs that served it (proto.Delivered),
// for the dataset man whose files have sizes (by file id).
func Delivered(man *chunk.Manifest, sizes []int64, p Place) ([]bool, error) {
	var st []proto.Stretch
	for _, s := range append(p.Before, Stretch{PlanRule: p.Plan, Position: p.Position}) {
		in, err := windowInput(man, sizes, p.Seed, s.PlanRule)
		if err != nil {
			return nil, err
		}
		st = append(st, proto.Stretch{In: in, Position: int(s.Position)})
	}
	return proto.Delivered(p.Epoch, st)
}

// windowInput returns the window input of a job that served dataset man
// (its files' sizes by file id) on rule r with seed (the epoch and the
// traces left out).
func windowInput(man *chunk.Manifest, sizes []int64, seed uint64, r PlanRule) (proto.WindowInput, error) {
	homes, err := chunk.Assign(man, r.Ranks)
	if err != nil {
		return proto.WindowInput{}, err
	}
	m, err := newMapping(man, homes, r.MemBytes, r.MemFraction)
	if err != nil {
		return proto.WindowInput{}, err
	}
	if len(sizes) != m.Files() {
		return proto.WindowInput{}, fmt.Errorf("rt: %d file sizes for a dataset of %d files", len(sizes), m.Files())
	}
	in := proto.WindowInput{Mapping: m, Seed: seed, Lead: proto.DefaultLead, Ramp: r.Ramp, Keep: r.Keep}
	for h := range r.Ranks {
		first, c := m.RankFiles(h)
		in.Sizes = append(in.Sizes, sizes[first:int(first)+c])
		in.Budget = append(in.Budget, m.MemBytes(h))
	}
	return in, nil
}

// newMapping returns the mapping of dataset man served by the ranks that
// homes gives the shards of (chunk.Assign), each with a budget of mem
// bytes, or when 0, frac of its shard.
func newMapping(man *chunk.Manifest, homes []int, mem int64, frac float64) (*proto.Mapping, error) {
	d := proto.Dataset{K: man.K}
	chunks := man.RankChunks(homes) // nil for chunks of K files
	for r := range len(homes) - 1 {
		var files, bytes int64
		for _, s := range man.Shards[homes[r]:homes[r+1]] {
			files, bytes = files+s.Files, bytes+s.Bytes
		}
		b := mem
		if b == 0 {
			b = int64(frac * float64(bytes))
		}
		s := proto.Shard{Files: int(files), Bytes: bytes, MemBytes: b}
		if chunks != nil {
			s.Chunks = chunks[r]
		}
		d.Shards = append(d.Shards, s)
	}
	return proto.NewMapping(d)
}

// String prints p for messages.
func (p Place) String() string {
	s := "epoch " + strconv.Itoa(int(p.Epoch)) + ", position " + strconv.Itoa(int(p.Position)) + " of " + strconv.Itoa(p.Ranks) + " ranks"
	if len(p.Before) > 0 {
		s += fmt.Sprintf(" (the epoch resumed %d times before)", len(p.Before))
	}
	return s
}
