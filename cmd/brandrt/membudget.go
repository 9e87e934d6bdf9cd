package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/rt"
)

// bytesOnly sets *into from the memBudget flag name when it is given,
// refusing a percentage: the flag takes bytes (example, as in 1GiB).
func bytesOnly(c *cli.Context, name, example string, into *int64) error {
	if !c.IsSet(name) {
		return nil
	}
	m := c.Generic(name).(*memBudget)
	if m.fraction > 0 {
		return fmt.Errorf("--%s takes bytes (e.g. %s), not a percentage", name, example)
	}
	*into = m.bytes
	return nil
}

// memBudget is a flag value: bytes, or a percentage of the rank's shard;
// with positive, 0 bytes is refused.
type memBudget struct {
	bytes    int64
	fraction float64
	positive bool
	// cgroup is a share of what the memory cgroup leaves (P%cgroup;
	// rt.Budget.Cgroup), when allowed.
	cgroup, allowCgroup bool
}

// Set parses s, refusing what m does not take.
func (m *memBudget) Set(s string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%cgroup"); ok && m.allowCgroup {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v > 100 {
			return fmt.Errorf("%q is not a percentage in (0, 100] of the memory cgroup", s)
		}
		*m = memBudget{fraction: v / 100, cgroup: true, positive: m.positive, allowCgroup: true}
		return nil
	}
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v > 100 {
			return fmt.Errorf("%q is not a percentage in (0, 100]", s)
		}
		*m = memBudget{fraction: v / 100, positive: m.positive, allowCgroup: m.allowCgroup}
		return nil
	}
	if v, err := humanize.ParseBytes(s); err == nil && v == 0 && m.positive {
		return errors.New("0 is less than the minimum of 1: the rank needs memory for at least one chunk (examples: 12GiB, 25%)")
	}
	b := m.byteSize()
	if err := b.Set(s); err != nil {
		return err
	}
	*m = memBudget{bytes: b.n, positive: m.positive, allowCgroup: m.allowCgroup}
	return nil
}

// budget returns the rank's budget m gives (rt.Config.Mem).
func (m *memBudget) budget() rt.Budget {
	switch {
	case m.cgroup:
		return rt.Budget{Cgroup: m.fraction}
	case m.fraction > 0:
		return rt.Budget{Shard: m.fraction}
	}
	return rt.Budget{Bytes: m.bytes}
}

// byteSize is the range of m's bytes: 1 (0 unless positive) to
// maxMemory.
func (m *memBudget) byteSize() byteSize {
	b := byteSize{intValue{hi: maxMemory, why: whyMemory}}
	if m.positive {
		b.lo = 1
	}
	return b
}

// Get returns the bytes, or the share as String writes it, for
// cli.Context.Value.
func (m *memBudget) Get() any {
	if m.fraction > 0 {
		return m.String()
	}
	return m.bytes
}

// bounds returns the least and the most bytes m takes.
func (m *memBudget) bounds() (string, string) {
	b := m.byteSize()
	return b.bounds()
}

// String writes the value for the help.
func (m *memBudget) String() string {
	if m.bytes < 0 {
		return "a tenth of --mem"
	}
	if m.fraction > 0 && m.cgroup {
		return strconv.FormatFloat(m.fraction*100, 'g', -1, 64) + "%cgroup"
	}
	if m.fraction > 0 {
		return strconv.FormatFloat(m.fraction*100, 'g', -1, 64) + "%"
	}
	b := byteSize{intValue{n: m.bytes}}
	return b.String()
}

func halfRAM() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(si.Unit) / 2
}
