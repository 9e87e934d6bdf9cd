package launch

import (
	"fmt"
	"os"
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
func (e Env) Lifeline() error {
	if e.Launcher == "" {
		return nil
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("launch: parent-death signal: %w", errno)
	}
	if os.Getppid() != parent { // the launcher died before the lifeline was tied
		return syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	return nil
}
