package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// TestSlurmJob runs brandrt in a batch job of 2 tasks on a one-node Slurm
// started for the test: srun --mpi=pmix launches info on both ranks
// directly, then mpirun, which takes its ranks from the allocation, serves
// a packed dataset for one epoch to in-process readers that check every
// file. A second job, whose step exits 3, must come back as exit code 3.
func TestSlurmJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Slurm cluster; not with -short")
	}
	s := testkit.StartSlurm(t)
	bin := binary(t)
	chunks := servePack(t, 400, 2, filepath.Join(t.TempDir(), "chunks"))
	script := writeScript(t, "serve.sbatch", fmt.Sprintf(`#!/bin/bash
#SBATCH --ntasks 2
set -e
srun --mpi=pmix -n 2 %q info
echo "== mpirun"
mpirun %s %q serve --chunks %q --mem 25%% --consume 2 --epochs 1
`, bin, strings.Join(testkit.MpirunArgs, " "), bin, chunks))
	out, code := s.Sbatch(t, script)
	if code != 0 {
		t.Fatalf("exit code %d, output:\n%s", code, out)
	}
	direct, mpirun, _ := strings.Cut(out, "== mpirun\n")
	for _, c := range []struct{ step, out, want string }{
		{"srun", direct, `(?m)^rank 0/2: `}, // info prints its lines per rank
		{"srun", direct, `(?m)^rank 1/2: `},
		{"mpirun", mpirun, `(?m)^epoch 1/1: 400 files, .* delivered by 2 ranks`},
		{"mpirun", mpirun, `every file delivered exactly once`},
	} {
		if !regexp.MustCompile(c.want).MatchString(c.out) {
			t.Errorf("the %s step's output lacks %q; the job's output:\n%s", c.step, c.want, out)
		}
	}

	script = writeScript(t, "fail.sbatch", `#!/bin/bash
#SBATCH --ntasks 1
set -e
echo before the step
srun -n 1 bash -c 'exit 3'
echo after the step
`)
	out, code = s.Sbatch(t, script)
	if code != 3 || !strings.Contains(out, "before the step") || strings.Contains(out, "after the step") {
		t.Errorf("a job whose step exits 3: exit code %d, output:\n%s", code, out)
	}
}

func writeScript(t *testing.T, name, text string) string {
	t.Helper()
	return writeTemp(t, name, 0o755, text)
}

// writeTemp writes text to a file name of mode in a directory of the
// test's own, and returns its path.
func writeTemp(t *testing.T, name string, mode os.FileMode, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSlurmTrains submits examples/slurm/train.sbatch, as a user would,
// to a one-node Slurm: two ranks (srun --mpi=pmix, sharing the node by
// --allow-shared-node) stage their shards of a packed JPEG dataset to
// "node-local" disk (STAGE), serve them, and each starts
// train.py beside it, which trains one epoch with the other through DDP.
// The job ends with the training, with status 0, and its output has the
// epoch's statistics and the training's line.
func TestSlurmTrains(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Slurm cluster; not with -short")
	}
	needTorch(t)
	s := testkit.StartSlurm(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	jpegs, chunks := filepath.Join(t.TempDir(), "jpegs"), filepath.Join(t.TempDir(), "chunks")
	if out, err := testkit.Run(time.Minute, nil, python, filepath.Join(root, "examples/pytorch/make_jpegs.py"), "--out", jpegs, "--classes", "4", "--images", "240"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", chunks, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	out, code := s.SbatchWith(t, filepath.Join(root, "examples/slurm/train.sbatch"),
		[]string{"--nodes", "1", "--ntasks", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1", "--time", "5"},
		"BRANDRT="+binary(t), "CHUNKS="+chunks, "STAGE="+filepath.Join(t.TempDir(), "local"), "MEM=25%", "SERVE_FLAGS=--allow-shared-node", "BRANDRT_ATTACH="+t.TempDir(),
		"TRAIN="+python+" -W ignore "+filepath.Join(root, "examples/pytorch/train.py")+" --num-classes 4 --epochs 1 --workers 1")
	if code != 0 {
		t.Fatalf("exit code %d, output:\n%s", code, out)
	}
	for _, want := range []string{`rank 0: staged shard 0 to `, `rank 1: staged shard 1 to `,
		`(?m)^epoch 1: 240 files, .* delivered by 2 ranks`, `every file delivered exactly once`,
		`(?m)^epoch 1 from brandrt, 2 training processes: 240 images`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the job's output lacks %q:\n%s", want, out)
		}
	}
}
