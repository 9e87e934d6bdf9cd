package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/launch"
)

// MPI must be initialised and finalised on one OS thread: the main one.
func init() { runtime.LockOSThread() }

// joinGroup returns the processes this one works with: the MPI world when
// a launcher started several, else a group of one. Call done before
// returning from the command.
func joinGroup() (g chunk.Broadcaster, done func(), err error) {
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

// reported is an error already printed: main does not print it again.
type reported struct{ error }

// finish is deferred by commands that may run as several MPI processes:
// it prints the command's error while this process is still part of the
// job, then finalizes MPI (done). Printed after MPI_Finalize, the message
// could be lost: once one rank has exited with an error, mpirun ends the
// others.
func finish(w io.Writer, done func(), err *error) {
	if *err != nil {
		fmt.Fprintln(w, "brandrt:", *err)
		*err = reported{*err}
	}
	done()
}
