// Package inproc runs N protocol ranks in one process: a Cluster steps
// them, whatever their policy (any proto.Machine: the papers' Rank or the
// window policy's WindowRank), carries their messages and reads, and
// checks after every step what the protocol promises across ranks: no
// file loaded twice in an epoch, each position answered once with a file
// that may answer it, each file delivered at most once (Check,
// CheckComplete), and, unless Options.Light, each rank's own invariants.
//
// Package sim drives it at scale for `brandrt simulate`; proto/prototest
// drives it from datadriven scripts, randomized schedules and random
// clients in tests. It imports no test code, so the binary may link it.
package inproc
