// Command brandrt feeds training data to PyTorch jobs whose dataset is far
// larger than node memory. See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	app := &cli.App{
		Name:  "brandrt",
		Usage: "feed training data from chunked storage through memory shared across MPI ranks",
		Description: "brandrt packs small files into chunks read in one sequential batch, keeps part\n" +
			"of the dataset in memory with file redirection (any unseen file in the same\n" +
			"memory slot may answer a request), and shares memory across nodes over MPI\n" +
			"with prefetch driven by the known access traces.",
		Commands:        []*cli.Command{packCommand(), verifyCommand(), inspectCommand(), serveCommand(), simulateCommand(), benchCommand(), infoCommand()},
		HideHelpCommand: true,
		Writer:          stdout,
		ErrWriter:       stderr,
	}
	if err := app.Run(args); err != nil {
		if !errors.As(err, new(reported)) {
			fmt.Fprintln(stderr, "brandrt:", err)
		}
		return 1
	}
	return 0
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
	return fmt.Errorf("%s takes no arguments, got %q%s", c.Command.Name, c.Args().Slice(), hint)
}
