package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/internal/human"
)

// count is a flag value for a number of things, written plainly (1281167)
// or with a decimal suffix: 40k, 1.28M, 2G.
type count int64

func (c *count) Set(s string) error {
	mult := 1.0
	t := strings.TrimSpace(s)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult, t = 1e3, t[:n-1]
		case 'M':
			mult, t = 1e6, t[:n-1]
		case 'G':
			mult, t = 1e9, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || v*mult > math.MaxInt64/2 {
		return fmt.Errorf("%q is not a count (examples: 40000, 40k, 1.28M)", s)
	}
	if r := math.Round(v * mult); math.Abs(r-v*mult) > 1e-6 {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*c = count(math.Round(v * mult))
	return nil
}

func (c *count) String() string { return strconv.FormatInt(int64(*c), 10) }

// byteSize is a flag value for a number of bytes: 110000, 110KB, 1.5GiB.
type byteSize int64

func (b *byteSize) Set(s string) error {
	v, err := humanize.ParseBytes(s)
	if err != nil || v > math.MaxInt64 {
		return fmt.Errorf("%q is not a size in bytes (examples: 110KB, 12GiB)", s)
	}
	*b = byteSize(v)
	return nil
}

func (b *byteSize) String() string {
	if *b == 0 {
		return "0"
	}
	return humanize.Bytes(uint64(*b))
}

// Short names for the formats of internal/human.
var (
	ibytes  = human.IBytes
	comma   = human.Comma
	seconds = human.Seconds
	percent = human.Percent
)

// countOrShare is a flag value for a number of files (count's forms) or a
// percentage of them (0.1%).
type countOrShare struct {
	n        int64
	fraction float64
}

func (c *countOrShare) Set(s string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v > 100 {
			return fmt.Errorf("%q is not a percentage from 0 to 100%%", s)
		}
		*c = countOrShare{fraction: v / 100}
		return nil
	}
	var n count
	if err := n.Set(s); err != nil {
		return fmt.Errorf("%q is not a count or a percentage (examples: 30, 0.1%%)", s)
	}
	*c = countOrShare{n: int64(n)}
	return nil
}

func (c *countOrShare) String() string {
	if c.n > 0 || c.fraction == 0 {
		return strconv.FormatInt(c.n, 10)
	}
	return strconv.FormatFloat(100*c.fraction, 'g', -1, 64) + "%"
}
