package job

import (
	"fmt"
	"io"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
)

// Group joins the processes that a command other than serve (pack, say)
// runs with: the MPI world when a launcher started several, else a group
// of one. Defer Finish with its done.
func Group() (g chunk.Broadcaster, done func(), err error) {
	env, err := launch.FromEnv()
	if err != nil || env.Alone() {
		return chunk.Solo, func() {}, err
	}
	w, err := collectives.Init()
	if err != nil {
		return nil, nil, err
	}
	return w, w.Finalize, nil
}

// Finish ends a Group's command: it prints the command's error while this
// process is still part of the job, then leaves it (done); the error is
// then Printed. Printed after MPI_Finalize, the message could be lost:
// once one rank has exited with an error, mpirun ends the others.
func Finish(w io.Writer, done func(), err *error) {
	if *err != nil {
		fmt.Fprintln(w, "brandrt:", *err)
		*err = printed{*err}
	}
	done()
}
