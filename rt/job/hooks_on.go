//go:build testhooks

package job

import (
	"fmt"
	"os"
	"strconv"
)

// The tests' hooks, built in only with the testhooks tag (the tests of
// cmd/brandrt build their binary so): a release build has neither.

// hogForTests takes memory, a MiB at a time, until the kernel kills the
// rank, when $BRANDRT_TEST_HOG names this rank: how the tests check that
// the job names the OOM killer.
func hogForTests(rank int) {
	if os.Getenv("BRANDRT_TEST_HOG") != strconv.Itoa(rank) {
		return
	}
	for {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		hogged = append(hogged, b)
	}
}

// hogged is what hogForTests took.
var hogged [][]byte

// panicForTests panics when $BRANDRT_TEST_PANIC names this rank: how the
// tests check that a panic ends the job.
func panicForTests(rank int) {
	if os.Getenv("BRANDRT_TEST_PANIC") == strconv.Itoa(rank) {
		panic(fmt.Sprintf("rank %d: a test asked for a panic ($BRANDRT_TEST_PANIC)", rank))
	}
}
