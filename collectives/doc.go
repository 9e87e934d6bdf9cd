// Package collectives is brandrt's only MPI (and only cgo) package. It
// wraps github.com/sbromberger/gompi v0.3.0, used unmodified, and adds in
// its own cgo file what gompi lacks.
//
// MPI is initialised with MPI_THREAD_MULTIPLE on the calling OS thread,
// which must stay locked (runtime.LockOSThread in main's init) and must be
// the one that calls Finalize. Between the two, calls may come from any
// thread, one goroutine at a time: rt's loop makes them from its own. See
// ../shared/notes/mpi-probe.md for the facts behind these rules: Open MPI
// crashes with concurrent callers at lower thread levels, and blocking
// sends above the eager limit deadlock.
package collectives
