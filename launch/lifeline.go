package launch

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// parent is the process that started this one, as it was at start-up.
var parent = os.Getppid()

// Lifeline ties this process to the launcher that started it: when the
// launcher dies (mpirun killed by SIGKILL, or by a batch system's time
// limit), the kernel sends this process SIGTERM (Linux's parent-death
// signal), which it handles as any SIGTERM. Without it a rank whose
// mpirun was killed serves on alone, an orphan holding its node's attach
// point. A process started by hand (Launcher "") gets no lifeline.
//
// A launcher that died leaves the rank's output a pipe nobody reads, and
// Go ends a process that writes to such a pipe on its standard output or
// error (SIGPIPE) before it could clean up. So the rank catches SIGPIPE:
// such writes fail instead. It is caught, not ignored, so that the
// processes the rank starts get SIGPIPE's default.
func (e Env) Lifeline() error {
	if e.Launcher == "" {
		return nil
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("launch: parent-death signal: %w", errno)
	}
	if os.Getppid() != parent { // the launcher died before the lifeline was tied
		return syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	return nil
}
