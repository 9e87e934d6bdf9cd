// Package prototest runs N protocol ranks in one process: a Cluster steps
// them, whatever their policy (any proto.Machine: the papers' Rank or the
// window policy's WindowRank), carries their messages and reads, and
// checks the invariants after every step: each rank's own
// (CheckInvariants), and the cluster's (no file loaded twice in an epoch,
// each position answered once with a file that may answer it, each file
// delivered at most once). Datadriven scripts (Env, testdata/*.txt, run
// by internal/script/scripttest and regenerated with go test -rewrite),
// randomized schedules of either policy (Schedule, which prints a
// replayable script on failure) and random clients (Clients) drive it in
// tests; package sim drives it at scale. It imports no testing: the
// brandrt binary links it through sim.
package prototest
