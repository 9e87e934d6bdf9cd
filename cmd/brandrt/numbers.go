package main

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/proto"
)

// Numeric flags. Every flag that takes a number takes it through one of
// the values here or in units.go, each with the range that the code it
// goes to can store and means: a value beyond it is refused as the
// command line is parsed, with the limit, never cut to fit (--epochs
// 4294967296 once served no epoch, cut to 32 bits). Commands read them as
// they read cli's own (c.Int, c.Uint64, c.Float64 and c.Duration parse
// String), or by their type. TestNumericFlagsRangeChecked sweeps them
// all.

// Limits that several flags share.
const (
	// maxFiles bounds what counts files or positions: a file id, a
	// position in a trace and a trace's length are int32s in proto.
	maxFiles = proto.MaxFiles
	// maxWorkers bounds goroutines that each hold a chunk or a file in
	// memory (readers, writers, copiers).
	maxWorkers = 1024
	// maxRanks bounds a number of MPI ranks, a C int.
	maxRanks = math.MaxInt32
	// maxMemory bounds a memory budget in bytes: 1 PiB, so that the sums
	// of a few budgets a rank checks stay within an int64.
	maxMemory = 1 << 50
	// maxProcsPerNode bounds the training processes serve starts on a
	// node.
	maxProcsPerNode = 1024
	// maxReaders bounds the clients a rank's footprint counts.
	maxReaders = 1 << 16
)

// Reasons given with the limits above, in messages.
const (
	whyFiles     = "proto numbers files and positions in 32 bits"
	whyWorkers   = "each holds a buffer of its own"
	whyReaders   = "far more than a node runs"
	whyOpenFiles = "more than a process may open"
	whyMemory    = "1 PiB"
	whyEpochs    = "epochs are numbered in 32 bits"
	whyRanks     = "an MPI rank is a C int"
	whyK         = "the most files a chunk holds"
)

// tooBig is the error for a value s over the limit hi; why, if set, says
// where the limit comes from.
func tooBig(s, hi, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return fmt.Errorf("%s is more than the limit of %s%s", strings.TrimSpace(s), hi, why)
}

// tooSmall is the error for a value s under the minimum lo.
func tooSmall(s, lo string) error {
	return fmt.Errorf("%s is less than the minimum of %s", strings.TrimSpace(s), lo)
}

// negative reports whether s is written with a minus sign.
func negative(s string) bool { return strings.HasPrefix(strings.TrimSpace(s), "-") }

// intValue is a flag value for a whole number from lo to hi; why says
// where hi comes from.
type intValue struct {
	n, lo, hi int64
	why       string
}

// intFlag is a flag for a whole number from lo to hi, n unless set.
func intFlag(name string, n, lo, hi int64, why, usage string) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Value: &intValue{n: n, lo: lo, hi: hi, why: why}, Usage: usage}
}

// Set parses s, refusing what intValue does not take.
func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && negative(s), err == nil && n < v.lo:
		return tooSmall(s, strconv.FormatInt(v.lo, 10))
	case errors.Is(err, strconv.ErrRange), err == nil && n > v.hi:
		return tooBig(s, strconv.FormatInt(v.hi, 10), v.why)
	case err != nil:
		return fmt.Errorf("%q is not a whole number", s)
	}
	v.n = n
	return nil
}

// String writes the value as Set reads it.
func (v *intValue) String() string { return strconv.FormatInt(v.n, 10) }

// Get returns the number, for cli.Context.Value.
func (v *intValue) Get() any { return v.n }

// bounds returns the least and the most v takes.
func (v *intValue) bounds() (string, string) {
	return strconv.FormatInt(v.lo, 10), strconv.FormatInt(v.hi, 10)
}

// seedValue is a flag value for a seed: any unsigned 64-bit number.
type seedValue uint64

// seedFlag is a flag for a seed, n unless set.
func seedFlag(name string, n uint64, usage string) *cli.GenericFlag {
	v := seedValue(n)
	return &cli.GenericFlag{Name: name, Value: &v, Usage: usage}
}

// Set parses s, refusing what seedValue does not take.
func (v *seedValue) Set(s string) error {
	t := strings.TrimSpace(s)
	n, err := strconv.ParseUint(t, 0, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return tooBig(s, strconv.FormatUint(math.MaxUint64, 10), "64 bits")
	case err != nil && negative(t) && isNumber(t[1:]):
		return tooSmall(s, "0")
	case err != nil:
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v = seedValue(n)
	return nil
}

// isNumber reports whether s is a number, of any size.
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}

// String writes the value as Set reads it.
func (v *seedValue) String() string { return strconv.FormatUint(uint64(*v), 10) }

// Get returns the seed, for cli.Context.Value.
func (v *seedValue) Get() any { return uint64(*v) }

// bounds returns the least and the most v takes.
func (v *seedValue) bounds() (string, string) { return "0", strconv.FormatUint(math.MaxUint64, 10) }

// floatValue is a flag value for a number from lo (excluded if open) to
// hi.
type floatValue struct {
	x, lo, hi float64
	open      bool
}

// floatFlag is a flag for a number from lo (excluded if open) to hi, x
// unless set.
func floatFlag(name string, x, lo, hi float64, open bool, usage string) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Value: &floatValue{x: x, lo: lo, hi: hi, open: open}, Usage: usage}
}

// Set parses s, refusing what floatValue does not take.
func (v *floatValue) Set(s string) error {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	lo, hi := v.bounds()
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), math.IsNaN(x):
		return fmt.Errorf("%q is not a number", s)
	case x > v.hi:
		return tooBig(s, hi, "")
	case v.open && x <= v.lo:
		return fmt.Errorf("%s is too small: want more than %s", strings.TrimSpace(s), lo[1:])
	case x < v.lo:
		return tooSmall(s, lo)
	}
	v.x = x
	return nil
}

// String writes the value as Set reads it.
func (v *floatValue) String() string { return formatFloat(v.x) }

// formatFloat writes x as briefly as it reads back.
func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// Get returns the number, for cli.Context.Value.
func (v *floatValue) Get() any { return v.x }

// bounds returns the least (">lo" if excluded) and the most v takes.
func (v *floatValue) bounds() (string, string) {
	lo := formatFloat(v.lo)
	if v.open {
		lo = ">" + lo
	}
	return lo, formatFloat(v.hi)
}

// durationValue is a flag value for a duration of 0 (excluded if
// positive) or more, up to time.Duration's most.
type durationValue struct {
	d        time.Duration
	positive bool
}

// durationFlag is a flag for a duration, d unless set; positive refuses
// 0.
func durationFlag(name string, d time.Duration, positive bool, usage string) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Value: &durationValue{d: d, positive: positive}, Usage: usage}
}

// oneDuration is a number and a unit: what time.ParseDuration refuses
// only when it overflows.
var oneDuration = regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)$`)

// Set parses s, refusing what durationValue does not take.
func (v *durationValue) Set(s string) error {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	lo, hi := v.bounds()
	below := err == nil && d < 0 || err != nil && oneDuration.MatchString(t) && negative(t)
	switch {
	case below && !v.positive:
		return tooSmall(s, lo)
	case below, err == nil && d == 0 && v.positive:
		return fmt.Errorf("%s is too small: want more than 0s", t)
	case err != nil && oneDuration.MatchString(t):
		return tooBig(s, hi, "")
	case err != nil:
		return fmt.Errorf("%q is not a duration (examples: 30s, 2m, 1h30m)", s)
	}
	v.d = d
	return nil
}

// String writes the value as Set reads it.
func (v *durationValue) String() string { return v.d.String() }

// Get returns the duration, for cli.Context.Value.
func (v *durationValue) Get() any { return v.d }

// bounds returns the least (">0s" if excluded) and the most v takes.
func (v *durationValue) bounds() (string, string) {
	lo := "0s"
	if v.positive {
		lo = ">0s"
	}
	return lo, time.Duration(math.MaxInt64).String()
}

// withAliases gives f other names.
func withAliases(f *cli.GenericFlag, aliases ...string) *cli.GenericFlag {
	f.Aliases = aliases
	return f
}

// withDefault makes the help say text of f's default.
func withDefault(f *cli.GenericFlag, text string) *cli.GenericFlag {
	f.DefaultText = text
	return f
}
