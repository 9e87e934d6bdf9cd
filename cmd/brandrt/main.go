// Command brandrt feeds training data to PyTorch jobs whose dataset is far
// larger than node memory. See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/brandrt/brandrt/rt/shm"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/rt/job"
)

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// MPI must be initialised and finalised on one OS thread: the main one.
func init() { runtime.LockOSThread() }

// rawArgs is the command line as run got it (serve reads the training
// command after "--" from it).
var rawArgs []string

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	rawArgs = args
	app := newApp(stdout, stderr)
	if err := app.Run(args); err != nil {
		usage := errors.As(err, new(usageError))
		if !job.Printed(err) && (!usage || firstRank()) {
			fmt.Fprintln(stderr, "brandrt:", err)
		}
		if usage && !firstRank() {
			// mpirun ends the job when the first rank exits: give rank 0
			// the time to say what is wrong
			time.Sleep(500 * time.Millisecond)
		}
		return job.ExitCode(err) // the training command's status, else 1
	}
	return 0
}

// newApp returns the command line's definition: every command and flag,
// writing to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Version: shm.Release, // the Python package it attaches must be of the same (rt/shm)
		Name:    "brandrt",
		Usage:   "feed training data from chunked storage through memory shared across MPI ranks",
		Description: "brandrt packs small files into chunks read in one sequential batch, keeps part\n" +
			"of the dataset in memory with file redirection (any unseen file in the same\n" +
			"memory slot may answer a request), and shares memory across nodes over MPI\n" +
			"with prefetch driven by the known access traces.\n\n" +
			"A flag's number beyond what the flag takes (what the code keeps it in, and\n" +
			"means: epochs, counts, sizes, durations) is refused with its limit, never\n" +
			"cut to fit. Where a command writes a file you name, - is standard output, a\n" +
			"device, FIFO or socket (/dev/null, /dev/stdout) is written into, a regular\n" +
			"file replaced, and anything else refused.",
		Commands:        []*cli.Command{packCommand(), verifyCommand(), inspectCommand(), stageCommand(), serveCommand(), planCommand(), simulateCommand(), benchCommand(), infoCommand()},
		HideHelpCommand: true,
		Writer:          stdout,
		ErrWriter:       stderr,
	}
	app.OnUsageError = onUsage
	eachCommand(app.Commands, nil, func(_ []string, c *cli.Command) { c.OnUsageError = onUsage })
	return app
}

// eachCommand calls fn on every command of cmds and their subcommands,
// depth first, with the names that lead to it (bench serve: ["bench",
// "serve"]).
func eachCommand(cmds []*cli.Command, path []string, fn func(path []string, c *cli.Command)) {
	for _, c := range cmds {
		p := append(slices.Clip(path), c.Name)
		fn(p, c)
		eachCommand(c.Subcommands, p, fn)
	}
}

// usageError is a mistake in the command line, which every process of a
// job makes alike: under a launcher only rank 0 prints it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// onUsage reports a flag that does not parse in one line, with a pointer
// to the help rather than all of it (under mpirun, once per rank).
func onUsage(c *cli.Context, err error, _ bool) error {
	return badUsage(c, err)
}

// badUsage marks err as a mistake in the command line and points to the
// command's help.
func badUsage(c *cli.Context, err error) error {
	name := "brandrt"
	if c.Command != nil && c.Command.HelpName != "" { // "brandrt bench serve"; cli sets it on every command
		name = c.Command.HelpName
	}
	return usageError{fmt.Errorf("%w\n(%s --help explains every flag)", err, name)}
}

// firstRank reports whether this process prints what every process of
// its job would: it is rank 0, or was started without a launcher.
func firstRank() bool {
	env, err := launch.FromEnv()
	return err != nil || env.Rank == 0
}

// noArgs refuses positional arguments, which no command takes; hint says
// which flag the user probably meant.
func noArgs(c *cli.Context, hint string) error {
	if c.NArg() == 0 {
		return nil
	}
	if hint != "" {
		hint = " " + hint
	}
	return badUsage(c, fmt.Errorf("%s takes no arguments, got %q%s", c.Command.Name, c.Args().Slice(), hint))
}
