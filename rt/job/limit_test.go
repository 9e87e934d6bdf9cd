package job

import (
	"runtime/debug"
	"testing"

	"github.com/brandrt/brandrt/rt"
)

// limitGo sets Go's memory limit to the footprint's GoLimit and its
// closer puts back the limit before: a process that goes on after
// serving (a test's) is not left collecting under a rank's limit.
func TestLimitGoPutsBack(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	f := rt.Footprint{Own: 64 << 20, Records: 8 << 20, Process: 54 << 20}
	undo := limitGo(f)
	if got := debug.SetMemoryLimit(-1); got != f.GoLimit() || got >= before {
		t.Fatalf("limit %d, want the footprint's %d", got, f.GoLimit())
	}
	undo()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d after, want %d as before", got, before)
	}
}
