// Package prototest runs N protocol ranks in one process: a Cluster steps
// them, carries their messages and reads, and checks the protocol's
// invariants after every step. Datadriven scripts (Env, testdata/*.txt,
// run by internal/script/scripttest and regenerated with go test
// -rewrite) and randomized schedules (Schedule, which prints a replayable
// script on failure) drive it in tests; package sim drives it at scale.
// It imports no testing: the brandrt binary links it through sim.
package prototest
