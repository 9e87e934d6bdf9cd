package shm

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestLineage: a process's lineage is itself, its parent and so on up to
// init, also when its command name holds spaces and parentheses.
func TestLineage(t *testing.T) {
	line, _ := lineage(os.Getpid())
	if len(line) < 2 || line[0] != os.Getpid() || line[1] != os.Getppid() || line[len(line)-1] != 1 {
		t.Fatalf("lineage of this process %d (parent %d): %v", os.Getpid(), os.Getppid(), line)
	}
	odd := filepath.Join(t.TempDir(), "a) 9 (b")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	b, err := os.ReadFile(sleep)
	if err == nil {
		err = os.WriteFile(odd, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got, _ := lineage(cmd.Process.Pid); !slices.Equal(got, append([]int{cmd.Process.Pid}, line...)) {
		t.Fatalf("lineage of a child named %q: %v, want it and %v", filepath.Base(odd), got, line)
	}
	if got, err := lineage(1 << 30); got != nil || err != nil {
		t.Fatalf("lineage of a process that does not exist: %v, %v", got, err)
	}
}
