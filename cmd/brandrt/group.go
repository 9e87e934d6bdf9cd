package main

import (
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
func joinGroup() (g chunk.Broadcaster, env launch.Env, done func(), err error) {
	env, err = launch.FromEnv()
	if err != nil || env.Size <= 1 {
		return chunk.Solo, env, func() {}, err
	}
	w, err := collectives.Init()
	if err != nil {
		return nil, env, nil, err
	}
	return w, env, w.Finalize, nil
}
