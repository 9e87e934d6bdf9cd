package prototest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/brandrt/brandrt/internal/script"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/proto/inproc"
)

// WindowEnv interprets datadriven commands over window plans:
//
//	plan files=6,6 k=2 budget=4,4 [lead=1] [ramp=1] [window=2]
//	     [remote=2,2] [seed=1] [e=1] [size=1 | size-seed=5] [keep=0.9]
//	                 plan epoch e (sizes as for Env's init; budgets and
//	                 remote budgets in bytes) on the traces given as
//	                 input lines "rank: file file …", or on
//	                 proto.Traces of the seed and epoch; print the plan
//	                 (keep: WindowInput.Keep)
//	next             plan the next epoch into the previous one's drain,
//	                 with the chunks it kept resident, on the traces
//	                 given or drawn
//	check            CheckWindowPlan, and the plan equals ReferencePlan
//
// Every file id, step and byte count in the output is the plan's own.
type WindowEnv struct {
	in   proto.WindowInput
	plan *proto.WindowPlan
}

var windowArgs = map[string]string{
	"plan": "files k budget lead ramp window remote seed e size size-seed keep", "next": "", "check": "",
}

// Handle runs one command and returns its output.
func (w *WindowEnv) Handle(cmd *script.Cmd) (out string) {
	defer func() {
		switch p := recover().(type) {
		case nil:
		case badArg:
			out = "error: " + string(p) + "\n"
		default:
			panic(p)
		}
	}()
	for _, k := range cmd.Order {
		if !slices.Contains(strings.Fields(windowArgs[cmd.Name]), k) {
			return fmt.Sprintf("error: %s: unknown argument %q\n", cmd.Name, k)
		}
	}
	out, err := w.handle(cmd)
	if err != nil {
		return out + "error: " + err.Error() + "\n"
	}
	return out
}

func (w *WindowEnv) handle(cmd *script.Cmd) (string, error) {
	if cmd.Name != "plan" && w.plan == nil {
		return "", fmt.Errorf("%s before a plan", cmd.Name)
	}
	switch cmd.Name {
	case "plan":
		if err := w.setup(cmd); err != nil {
			return "", err
		}
		return w.run(cmd)
	case "next":
		w.in.Epoch++
		w.in.After, w.in.Resident = w.plan.Drains, w.plan.Resident
		return w.run(cmd)
	case "check":
		if err := w.check(); err != nil {
			return "", err
		}
		return "ok\n", nil
	}
	return "", fmt.Errorf("unknown command %q", cmd.Name)
}

func (w *WindowEnv) setup(cmd *script.Cmd) error {
	files, err := ints(cmd.Args["files"])
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	sizes := inproc.Sizes(files, int64(argInt(cmd, "size", 1)))
	if cmd.Has("size-seed") {
		sizes = randomSizes(files, uint64(argInt(cmd, "size-seed", 0)))
	}
	m, err := inproc.Mapping(inproc.Options{K: argInt(cmd, "k", 4), Sizes: sizes, MemFraction: 1})
	if err != nil {
		return err
	}
	w.in = proto.WindowInput{Mapping: m, Sizes: sizes, Seed: uint64(argInt(cmd, "seed", 1)),
		Epoch: uint32(argInt(cmd, "e", 1)), Lead: argInt(cmd, "lead", 1), Ramp: argInt(cmd, "ramp", 1),
		Window: argInt(cmd, "window", 2), Keep: argFloat(cmd, "keep", 0)}
	if w.in.Budget, err = int64s(cmd, "budget"); err != nil {
		return err
	}
	if cmd.Has("remote") {
		w.in.Remote, err = int64s(cmd, "remote")
	}
	return err
}

// run plans w.in's epoch on the command's traces, or drawn ones.
func (w *WindowEnv) run(cmd *script.Cmd) (string, error) {
	m := w.in.Mapping
	w.in.Traces = proto.Traces(m.Files(), m.Ranks(), w.in.Seed, w.in.Epoch)
	if cmd.Input != "" {
		var err error
		if w.in.Traces, err = parseTraces(cmd.Input, m.Ranks()); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	for r, tr := range w.in.Traces {
		fmt.Fprintf(&b, "rank %d trace: %v\n", r, tr)
	}
	p, err := proto.PlanWindow(w.in)
	if err != nil {
		w.plan = nil
		return b.String(), err
	}
	w.plan = p
	b.WriteString(p.String())
	return b.String(), nil
}

func (w *WindowEnv) check() error {
	if err := CheckWindowPlan(w.in, w.plan); err != nil {
		return err
	}
	return CheckWindowReference(w.in, w.plan)
}
