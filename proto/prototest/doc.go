// Package prototest drives an in-process cluster of protocol ranks
// (proto/inproc) in tests: datadriven scripts (Env and WindowEnv,
// testdata/*.txt, run by internal/script/scripttest and regenerated with
// go test -rewrite), randomized schedules of either policy (Schedule,
// which prints a replayable script on failure), random clients (Clients)
// and checks of a window plan against a brute-force reference
// (CheckWindowPlan, CheckWindowReference). Only tests import it: the
// brandrt binary does not link it.
package prototest
