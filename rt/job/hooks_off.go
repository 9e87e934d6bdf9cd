//go:build !testhooks

package job

// Without the testhooks tag (a release build) the tests' hooks do
// nothing (hooks_on.go).

func hogForTests(int)   {}
func panicForTests(int) {}
