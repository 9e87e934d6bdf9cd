package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/internal/human"
)

// count is a flag value for a number of things from lo to hi, written
// plainly (1281167) or with a decimal suffix: 40k, 1.28M, 2G. It reads
// as intValue does (String, Get, bounds).
type count struct{ intValue }

// Set parses s, refusing what count does not take.
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
	lo, hi := c.bounds()
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), math.IsNaN(v):
		return fmt.Errorf("%q is not a count (examples: 40000, 40k, 1.28M)", s)
	case v*mult < float64(c.lo):
		return tooSmall(s, lo)
	case v*mult > float64(c.hi):
		return tooBig(s, hi, c.why)
	}
	if r := math.Round(v * mult); math.Abs(r-v*mult) > 1e-6 {
		return fmt.Errorf("%q is not a whole number", s)
	}
	c.n = int64(math.Round(v * mult))
	return nil
}

// fileCount is a count of files, n unless set: at least one, at most a
// dataset's most.
func fileCount(n int) *count {
	return &count{intValue{n: int64(n), lo: 1, hi: maxFiles, why: whyFiles}}
}

// byteSize is a flag value for a number of bytes from lo to hi: 110000,
// 110KB, 1.5GiB; why says where hi comes from. It reads as intValue
// does (Get, bounds), but for String.
type byteSize struct{ intValue }

// fileSize is the size of a file, n bytes unless set: at least one, at
// most what pack takes.
func fileSize(n int64) *byteSize {
	return &byteSize{intValue{n: n, lo: 1, hi: chunk.MaxFileSize, why: "the largest file pack takes"}}
}

// Set parses s, refusing what byteSize does not take.
func (b *byteSize) Set(s string) error {
	v, err := humanize.ParseBytes(s)
	lo, hi := b.bounds()
	switch {
	case err != nil && negative(s):
		if _, err := humanize.ParseBytes(strings.TrimSpace(s)[1:]); err == nil {
			return tooSmall(s, lo)
		}
	case err != nil && strings.HasPrefix(err.Error(), "too large"), err == nil && v > uint64(b.hi):
		return tooBig(s, hi, b.why)
	case err == nil && v < uint64(b.lo):
		return tooSmall(s, lo)
	}
	if err != nil {
		return fmt.Errorf("%q is not a size in bytes (examples: 110KB, 12GiB)", s)
	}
	b.n = int64(v)
	return nil
}

// String writes the value for the help.
func (b *byteSize) String() string {
	if b.n == 0 {
		return "0"
	}
	return humanize.Bytes(uint64(b.n))
}

// Short names for the formats of internal/human.
var (
	ibytes  = human.IBytes
	comma   = human.Comma
	seconds = human.Seconds
	percent = human.Percent
)

// countOrShare is a flag value for a number of files (count's forms, up
// to a dataset's most) or a percentage of them (0.1%).
type countOrShare struct {
	n        int64
	fraction float64
}

// Set parses s, refusing what countOrShare does not take.
func (c *countOrShare) Set(s string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v > 100 {
			return fmt.Errorf("%q is not a percentage from 0 to 100%%", s)
		}
		*c = countOrShare{fraction: v / 100}
		return nil
	}
	n := count{shareCounts}
	if err := n.Set(s); err != nil {
		return fmt.Errorf("%w (a count or a percentage: 30, 0.1%%)", err)
	}
	*c = countOrShare{n: n.n}
	return nil
}

// String writes the value for the help.
func (c *countOrShare) String() string {
	if c.n > 0 || c.fraction == 0 {
		return strconv.FormatInt(c.n, 10)
	}
	return strconv.FormatFloat(100*c.fraction, 'g', -1, 64) + "%"
}

// Get returns the count, or the share as a percentage, for
// cli.Context.Value.
func (c *countOrShare) Get() any {
	if c.fraction > 0 {
		return c.String()
	}
	return c.n
}

// bounds returns the least and the most count c takes.
func (c *countOrShare) bounds() (string, string) { return shareCounts.bounds() }

// shareCounts is the range of countOrShare's counts.
var shareCounts = intValue{lo: 0, hi: maxFiles, why: whyFiles}
