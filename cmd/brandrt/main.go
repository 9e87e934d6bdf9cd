// Command brandrt feeds training data to PyTorch jobs whose dataset is far
// larger than node memory. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "brandrt",
		Usage: "feed training data from chunked storage through memory shared across MPI ranks",
		Description: "brandrt packs small files into chunks read in one sequential batch, keeps part\n" +
			"of the dataset in memory with file redirection (any unseen file in the same\n" +
			"memory slot may answer a request), and shares memory across nodes over MPI\n" +
			"with prefetch driven by the known access traces.",
		Commands:        []*cli.Command{simulateCommand()},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "brandrt:", err)
		os.Exit(1)
	}
}
