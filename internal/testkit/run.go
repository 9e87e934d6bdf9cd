package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// MpirunArgs are the mpirun options every test and example uses on our
// machines: running as root, more ranks than cores, and no binding (a
// bound rank gets a single core, and Go then runs on one thread).
var MpirunArgs = []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}

// Run runs a command in its own process group with a deadline and returns
// its combined output. On timeout the whole group (mpirun and its ranks)
// gets SIGTERM, then SIGKILL five seconds later, so nothing outlives the
// call; the error then says it timed out.
func Run(timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers, if any
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s timed out after %v: %w", name, timeout, err)
	}
	return out, err
}
