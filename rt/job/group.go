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
	w, err := initWorld()
	if err != nil {
		return nil, nil, err
	}
	return w, w.Finalize, nil
}

// initWorld joins the MPI world. Every process has joined when it
// returns, before any may abort: an abort while another is still inside
// MPI_Init leaves its shared-memory segment in /dev/shm (seen in one run
// of three).
func initWorld() (*collectives.World, error) {
	w, err := collectives.Init()
	if err != nil {
		return nil, err
	}
	if err := w.Barrier(); err != nil {
		return nil, err
	}
	return w, nil
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
