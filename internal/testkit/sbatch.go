package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sbatch submits a batch script with sbatch --wait, the job's output (its
// stdout and stderr) going to Dir/job-<id>.out whatever the script's
// #SBATCH lines say, and env (KEY=VALUE) added to the environment the job
// inherits. It returns that output and the exit code sbatch --wait
// reports: the batch script's exit status, or 1 if a signal ended it. A
// job still running after Timeout is cancelled and the test fails.
func (s *Slurm) Sbatch(t *testing.T, script string, env ...string) (output string, exitCode int) {
	t.Helper()
	return s.SbatchWith(t, script, nil, env...)
}

// SbatchWith is Sbatch with options of sbatch's own (they override the
// script's #SBATCH lines): -N 1 -n 2, say.
func (s *Slurm) SbatchWith(t *testing.T, script string, options []string, env ...string) (output string, exitCode int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	args := append([]string{"--wait", "--parsable", "--output", filepath.Join(s.Dir, "job-%j.out")}, options...)
	cmd := exec.CommandContext(ctx, s.bin["sbatch"], append(args, script)...)
	cmd.Env = append(s.Env(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	first, _, _ := strings.Cut(stdout.String(), "\n")
	first, _, _ = strings.Cut(first, ";") // "<id>;<cluster>" with a cluster name
	id, perr := strconv.Atoi(strings.TrimSpace(first))
	if perr != nil {
		t.Fatalf("testkit: sbatch %s submitted no job: %v\n%s%s", script, err, &stdout, &stderr)
	}
	if ctx.Err() != nil {
		s.cancelJobs(t, strconv.Itoa(id))
		t.Fatalf("testkit: job %d (%s) still ran after %v and was cancelled; its output:\n%s", id, script, s.Timeout, s.jobOutput(id))
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("testkit: sbatch %s: %v\n%s", script, err, &stderr)
	}
	return s.jobOutput(id), cmd.ProcessState.ExitCode()
}

func (s *Slurm) jobOutput(id int) string {
	data, _ := os.ReadFile(filepath.Join(s.Dir, fmt.Sprintf("job-%d.out", id)))
	return string(data)
}

// cancelJobs cancels jobs (scancel's arguments) and waits up to 30 s
// until the cluster runs no job.
func (s *Slurm) cancelJobs(t *testing.T, args ...string) {
	t.Helper()
	if err := s.check("scancel", args...); err != nil {
		t.Error(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := s.output(10*time.Second, "squeue", "--noheader")
		if err == nil && strings.TrimSpace(out) == "" {
			return
		}
	}
	t.Errorf("testkit: jobs still in the queue 30s after scancel %s", strings.Join(args, " "))
}
