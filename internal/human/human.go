// Package human formats numbers for people: bytes in binary units,
// counts with thousands separators, durations in a unit that fits.
package human

import (
	"fmt"

	"github.com/dustin/go-humanize"
)

// IBytes formats n bytes in binary units (1.5 MiB); below 0 as 0 B.
func IBytes(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// Comma formats n with thousands separators.
func Comma(n int64) string { return humanize.Comma(n) }

// Seconds formats a duration in seconds in a unit that fits it: 850 µs,
// 12 ms, 1.25 s.
func Seconds(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f s", s)
}

// Plural writes n with its noun, in the plural unless n is 1.
func Plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return Comma(n) + " " + noun + "s"
}

// Percent formats a fraction as a percentage with 3 decimals, or "-"
// when there is none.
func Percent(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f%%", 100**x)
}
