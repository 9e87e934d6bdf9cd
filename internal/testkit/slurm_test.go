package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
)

// TestSlurmTwice starts a cluster, runs a job with a PMIx step on it and
// stops it, twice: the second start must work after the first stop, and
// each stop must leave none of its daemons running, remove its directory,
// and leave no PMIx directory of its job in /tmp.
func TestSlurmTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Slurm cluster; not with -short")
	}
	for _, name := range []string{"first", "second"} {
		var s *Slurm
		var job string
		t.Run(name, func(t *testing.T) {
			s = StartSlurm(t)
			script := filepath.Join(t.TempDir(), "hello.sbatch")
			text := "#!/bin/bash\nsrun --mpi=pmix -n 1 bash -c 'echo hello from job $SLURM_JOB_ID'\n"
			if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
				t.Fatal(err)
			}
			out, code := s.Sbatch(t, script)
			m := regexp.MustCompile(`hello from job (\d+)`).FindStringSubmatch(out)
			if code != 0 || m == nil {
				t.Fatalf("exit code %d, output:\n%s", code, out)
			}
			job = m[1]
		})
		if s == nil || job == "" {
			return // skipped or failed
		}
		for _, d := range s.daemons {
			if err := syscall.Kill(d.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s: %s (pid %d) still there after the cleanup: %v", name, d.name, d.cmd.Process.Pid, err)
			}
		}
		if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s still there after the cleanup: %v", name, s.Dir, err)
		}
		left, _ := filepath.Glob(fmt.Sprintf("/tmp/spmix_appdir_*_%s.*", job))
		if len(left) > 0 {
			t.Errorf("%s: job %s left %v", name, job, left)
		}
	}
}
