package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// sweep is what TestNumericFlagsRangeChecked gives every numeric flag of
// every command: the edges of 32-bit and 64-bit integers, and garbage.
var sweep = []string{"0", "-1", "2147483648", "4294967296", "4294967297", "9223372036854775808", "garbage"}

// flagRange is what a numeric flag takes: its least and most values as
// its messages write them (">0" where the least is excluded), the unit
// the sweep's numbers get ("s" for durations), and which of them it
// accepts. The most is what the code that takes the value can store and
// means; each is explained in the flag's definition.
type flagRange struct {
	lo, hi, unit string
	accepts      []string
}

// Accepted values of the sweep, by the ranges that take them.
var (
	zero     = []string{"0"}
	big      = []string{"2147483648", "4294967296", "4294967297"} // bytes up to 1 PiB, seconds
	uint64s  = []string{"0", "2147483648", "4294967296", "4294967297", "9223372036854775808"}
	zeroBig  = append(slices.Clip(zero), big...)
	maxInt32 = "2147483647" // files and positions are int32s in proto
)

// Ranges of every numeric flag, by command and flag. A numeric flag
// missing here fails the test.
var numericFlags = map[string]flagRange{
	"pack --chunk-files":          {"1", "65536", "", nil},
	"pack --chunk-size":           {"1", "17179869184", "", big},
	"pack --shards":               {"0", maxInt32, "", zero},
	"pack --seed":                 {"0", "18446744073709551615", "", uint64s},
	"pack --workers":              {"1", "1024", "", nil},
	"verify --workers":            {"1", "1024", "", nil},
	"stage --rank":                {"0", "2147483646", "", zero},
	"stage --ranks":               {"1", "2147483647", "", nil},
	"stage --workers":             {"1", "1024", "", nil},
	"simulate --files":            {"1", maxInt32, "", nil},
	"simulate --chunk-files":      {"1", "65536", "", nil},
	"simulate --ranks":            {"1", "65536", "", nil},
	"simulate --mem-fraction":     {">0", "1", "", nil},
	"simulate --remote-fraction":  {"0", "1", "", zero},
	"simulate --window":           {"0", maxInt32, "", zero},
	"simulate --lead":             {"0", maxInt32, "", zero},
	"simulate --ramp":             {"0", maxInt32, "", zero},
	"simulate --keep":             {"0", "1", "", zero},
	"simulate --epochs":           {"1", "2147483647", "", nil},
	"simulate --seed":             {"0", "18446744073709551615", "", uint64s},
	"simulate --batch":            {"1", maxInt32, "", nil},
	"simulate --file-size":        {"1", "1073741824", "", nil},
	"simulate --sigma":            {"0", "4", "", zero},
	"simulate --inflight":         {"1", maxInt32, "", nil},
	"bench storage --files":       {"1", maxInt32, "", nil},
	"bench storage --file-size":   {"1", "1073741824", "", nil},
	"bench storage --chunk-files": {"1", "65536", "", nil},
	"bench storage --ranks":       {"1", maxInt32, "", nil},
	"bench storage --workers":     {"1", "1024", "", nil},
	"bench serve --message-size":  {"1", "2147483647", "", nil},
	"bench serve --messages":      {"1", "2147483647", "", nil},
}

// serveRanges are serve's, and bench serve's, which takes its flags.
var serveRanges = map[string]flagRange{
	"mem":            {"1", "1125899906842624", "", big},
	"remote-mem":     {"0", "1125899906842624", "", zeroBig},
	"read-mem":       {"1", "1125899906842624", "", big},
	"hand-mem":       {"0", "1125899906842624", "", zeroBig},
	"leave":          {"0", "1125899906842624", "", zeroBig},
	"readers":        {"1", "65536", "", nil},
	"ramp":           {"0", maxInt32, "", zero},
	"keep":           {"0", "1", "", zero},
	"batch":          {"0", maxInt32, "", zero},
	"window":         {"0", maxInt32, "", zero},
	"seed":           {"0", "18446744073709551615", "", uint64s},
	"epochs":         {"1", "2147483647", "", nil},
	"max-skipped":    {"0", maxInt32, "", zero},
	"storage-wait":   {"0s", "2562047h47m16.854775807s", "s", zeroBig},
	"peer-warn":      {">0s", "2562047h47m16.854775807s", "s", big},
	"peer-timeout":   {"0s", "2562047h47m16.854775807s", "s", zeroBig},
	"client-wait":    {"0s", "2562047h47m16.854775807s", "s", zeroBig},
	"training-wait":  {"0s", "2562047h47m16.854775807s", "s", zeroBig},
	"pause":          {"0s", "2562047h47m16.854775807s", "s", zeroBig},
	"nproc-per-node": {"1", "1024", "", nil},
	"io-workers":     {"1", "1024", "", nil},
	"open-files":     {"0", "65536", "", zero},
	"consume":        {"0", "1024", "", zero},
	"depth":          {"1", "1024", "", nil},
}

// planRanges are plan's: serve's where plan takes serve's flag.
var planRanges = map[string]flagRange{
	"mem":            serveRanges["mem"],
	"node-mem":       {"0", "1125899906842624", "", zeroBig},
	"leave":          serveRanges["leave"],
	"readers":        serveRanges["readers"],
	"nproc-per-node": serveRanges["nproc-per-node"],
	"remote-mem":     serveRanges["remote-mem"],
	"hand-mem":       serveRanges["hand-mem"],
	"read-mem":       serveRanges["read-mem"],
	"io-workers":     serveRanges["io-workers"],
	"ramp":           serveRanges["ramp"],
	"keep":           serveRanges["keep"],
	"batch":          serveRanges["batch"],
	"window":         serveRanges["window"],
	"seed":           serveRanges["seed"],
	"epochs":         serveRanges["epochs"],
	"storage-rate":   {"1", "1125899906842624", "", big},
	"link-rate":      {"1", "1125899906842624", "", big},
	"serve-rate":     {"1", maxInt32, "", nil},
	"train-rate":     {"1", maxInt32, "", nil},
	"cores":          {">0", "65536", "", nil},
}

func init() {
	for name, r := range serveRanges {
		numericFlags["serve --"+name], numericFlags["bench serve --"+name] = r, r
	}
	for name, r := range planRanges {
		numericFlags["plan --"+name] = r
	}
}

// bounded is what the test asks of a numeric flag's value: its range,
// as its messages write it.
type bounded interface{ bounds() (lo, hi string) }

// validators turn a command's flags into its Config and validate it,
// without running it.
var validators = map[string]func(*cli.Context) error{
	"serve":       func(c *cli.Context) error { _, err := serveConfig(c); return err },
	"bench serve": func(c *cli.Context) error { _, err := serveConfig(c); return err },
	"simulate":    func(c *cli.Context) error { _, err := simConfig(c); return err },
}

// TestNumericFlagsRangeChecked gives every numeric flag of every command,
// found in the app's definition, each value of sweep. A value is either
// accepted, where the flag's range holds it, and then read back whole by
// the command (with its Config validated, for serve and simulate), or
// refused as a usage error naming the flag and the limit it passes.
func TestNumericFlagsRangeChecked(t *testing.T) {
	seen := map[string]bool{}
	eachCommand(newApp(nil, nil).Commands, nil, func(path []string, cmd *cli.Command) {
		for _, f := range cmd.Flags {
			key := strings.Join(path, " ") + " --" + f.Names()[0]
			if !numeric(t, key, f) {
				continue
			}
			seen[key] = true
			r, ok := numericFlags[key]
			if !ok {
				t.Errorf("%s: a numeric flag with no range in numericFlags: add its range (what the code stores it in)", key)
				continue
			}
			checkBounds(t, key, f, r)
			for _, v := range sweep {
				sweepFlag(t, path, f.Names()[0], v, r)
			}
		}
	})
	for key := range numericFlags {
		if !seen[key] {
			t.Errorf("numericFlags has %s, which the app does not define", key)
		}
	}
}

// numeric reports whether f takes a number; a flag of a type the test
// does not know fails it.
func numeric(t *testing.T, key string, f cli.Flag) bool {
	switch f := f.(type) {
	case *cli.StringFlag, *cli.BoolFlag:
		return false
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag, *cli.Float64Flag, *cli.DurationFlag:
		t.Errorf("%s is a %T, which takes any number its type holds: give it a range (numbers.go)", key, f)
		return true
	case *cli.GenericFlag:
		return true
	default:
		t.Errorf("%s: a flag of type %T, unknown to this test", key, f)
		return false
	}
}

// checkBounds fails unless f's value states the range r says.
func checkBounds(t *testing.T, key string, f cli.Flag, r flagRange) {
	g, ok := f.(*cli.GenericFlag)
	if !ok {
		return
	}
	b, ok := g.Value.(bounded)
	if !ok {
		t.Errorf("%s: its value (%T) states no range", key, g.Value)
		return
	}
	if lo, hi := b.bounds(); lo != r.lo || hi != r.hi {
		t.Errorf("%s takes %s to %s, the test expects %s to %s", key, lo, hi, r.lo, r.hi)
	}
}

// sweepFlag runs the command at path with --name v, its action replaced by
// one that reads the value back and validates the Config, and checks the
// outcome against r.
func sweepFlag(t *testing.T, path []string, name, v string, r flagRange) {
	t.Helper()
	arg := v
	if v != "garbage" {
		arg += r.unit
	}
	key := fmt.Sprintf("%s --%s %s", strings.Join(path, " "), name, arg)
	var got any
	app := stubbed(path, name, &got)
	args := append(append([]string{"brandrt"}, path...), required(app, path)...)
	err := app.Run(append(args, "--"+name, arg))
	want := slices.Contains(r.accepts, v)
	switch {
	case want && err != nil:
		t.Errorf("%s: refused (%v), want it accepted", key, err)
	case want && !sameNumber(got, arg):
		t.Errorf("%s: accepted as %v", key, got)
	case !want && err == nil:
		t.Errorf("%s: accepted (read as %v), want it refused naming the limit", key, got)
	case !want:
		checkRefusal(t, key, name, v, r, err)
	}
}

// checkRefusal fails unless err is a usage error naming flag name and,
// for a number, the limit v passes.
func checkRefusal(t *testing.T, key, name, v string, r flagRange, err error) {
	t.Helper()
	msg := err.Error()
	if !errors.As(err, new(usageError)) || !strings.Contains(msg, "-"+name) {
		t.Errorf("%s: refused with %q, want a usage error naming --%s", key, msg, name)
		return
	}
	limit := "limit of " + r.hi
	switch {
	case v == "garbage":
		return
	case strings.HasPrefix(r.lo, ">") && (v == "0" || v == "-1"):
		limit = "more than " + r.lo[1:]
	case v == "0" || v == "-1":
		limit = "minimum of " + r.lo
	}
	if !strings.Contains(msg, limit) {
		t.Errorf("%s: refused with %q, which does not name the %s", key, msg, limit)
	}
}

// stubbed returns the app with the action of the command at path
// replaced: it stores flag name's value in got and validates the
// command's Config where it has one.
func stubbed(path []string, name string, got *any) *cli.App {
	app := newApp(new(bytes.Buffer), new(bytes.Buffer))
	key := strings.Join(path, " ")
	eachCommand(app.Commands, nil, func(p []string, cmd *cli.Command) {
		if strings.Join(p, " ") == key {
			cmd.Action = func(c *cli.Context) error {
				*got = valueOf(c, name)
				if v := validators[key]; v != nil {
					if err := v(c); err != nil {
						return badUsage(c, err)
					}
				}
				return nil
			}
		}
	})
	return app
}

// required returns a value for each required flag of the command at path.
func required(app *cli.App, path []string) []string {
	var args []string
	eachCommand(app.Commands, nil, func(p []string, cmd *cli.Command) {
		if slices.Equal(p, path) {
			for _, f := range cmd.Flags {
				if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
					args = append(args, "--"+f.Names()[0], "x")
				}
			}
		}
	})
	return args
}

// valueOf returns flag name's value as the command reads it.
func valueOf(c *cli.Context, name string) (v any) {
	defer func() {
		if recover() != nil { // a cli.Generic that is no flag.Getter
			v = c.Generic(name)
		}
	}()
	return c.Value(name)
}

// sameNumber reports whether got is the number arg says, whole.
func sameNumber(got any, arg string) bool {
	if d, ok := got.(time.Duration); ok {
		want, err := time.ParseDuration(arg)
		return err == nil && d == want
	}
	return fmt.Sprint(got) == arg
}
