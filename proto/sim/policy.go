package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/brandrt/brandrt/proto"
)

// A Policy answers every rank's positions, one epoch at a time: it decides
// which file answers each position and reports what that cost (reads,
// messages, memory). Run measures the randomness of what it delivered,
// the same way for every policy. A policy is one type in its own file,
// which registers it by name; adding one touches that file and its tests.
type Policy interface {
	// Epoch answers epoch e's traces: files[r][sn] answers position sn of
	// rank r. The Result carries the policy's own counters; Run fills in
	// the configuration, the randomness and the time.
	Epoch(e int, traces [][]proto.FileID, progress func(done, total int64)) (files [][]proto.FileID, res Result, err error)
}

// A policyDef is a registered policy: its family ("paper", "window"),
// and how to build it for a run.
type policyDef struct {
	name, family string
	build        func(cfg Config, sizes [][]int64, m *proto.Mapping) (Policy, error)
}

var registry []policyDef

// register adds a policy; each policy's file calls it from init, in file
// name order, which is the order Names lists them.
func register(name, family string, build func(Config, [][]int64, *proto.Mapping) (Policy, error)) {
	registry = append(registry, policyDef{name, family, build})
}

// Names lists the registered policies, the paper's variants first.
func Names() []string {
	var out []string
	for _, d := range registry {
		out = append(out, d.name)
	}
	return out
}

// Family returns the family of the named policy: "paper" for the papers'
// protocol's variants, or the policy's own name.
func Family(name string) string {
	d, _ := lookup(name)
	return d.family
}

// Families lists the registered policies' families, in Names order.
func Families() []string {
	var out []string
	for _, d := range registry {
		if !slices.Contains(out, d.family) {
			out = append(out, d.family)
		}
	}
	return out
}

func lookup(name string) (policyDef, error) {
	for _, d := range registry {
		if d.name == name {
			return d, nil
		}
	}
	return policyDef{}, fmt.Errorf("sim: no policy %q (have %s)", name, strings.Join(Names(), ", "))
}
