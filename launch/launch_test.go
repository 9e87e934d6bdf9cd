package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// place writes e as the testdata files' "want" lines do.
func place(e Env) string {
	l := e.Launcher
	if l == "" {
		l = "none"
	}
	return fmt.Sprintf("%s rank=%d size=%d local=%d/%d node=%s", l, e.Rank, e.Size, e.LocalRank, e.LocalSize, e.Node)
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestParseMeasured parses the variables each launcher really set (see
// testdata/*.txt) and compares with the place each process really had.
func TestParseMeasured(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) < 8 {
		t.Fatalf("testdata: %d files, %v", len(files), err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(data), "\nwant ")[1:] {
			lines := strings.Split(strings.TrimSpace(block), "\n")
			want := strings.ReplaceAll(lines[0], "(host)", hostname(t))
			env := map[string]string{}
			for _, l := range lines[1:] {
				k, v, _ := strings.Cut(l, "=")
				env[k] = v
			}
			got, err := Parse(func(k string) string { return env[k] })
			if err != nil || place(got) != want {
				t.Errorf("%s, process %d: got %s, %v; want %s", f, i, place(got), err, want)
			}
		}
	}
}

func TestParse(t *testing.T) {
	host := hostname(t)
	// The variables Slurm sets for a task of srun -n 4 --ntasks-per-node=2 on
	// nodes a and b, as its process 3 sees them, in a job of 8 tasks: a
	// step's SLURM_NTASKS may be the job's (testdata/hydra-in-sbatch.txt).
	srun := map[string]string{"SLURM_PROCID": "3", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4",
		"SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURMD_NODENAME": "b",
		"SLURM_NTASKS": "8"}
	// What a process started by a launcher inside a batch script of
	// sbatch -n 8 inherits from it.
	batch := map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
		"SLURM_TASKS_PER_NODE": "8", "SLURMD_NODENAME": "a"}
	// What a process started by a launcher's daemon on the job's second
	// node inherits from the srun step that started the daemons.
	daemon := map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
		"SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "b"}
	for _, c := range []struct {
		name string
		env  []map[string]string
		want string
	}{
		{"by hand", nil, "none rank=0 size=1 local=0/1 node=" + host},
		{"open mpi", []map[string]string{{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "PMIX_HOSTNAME": "n2", "PMIX_RANK": "2"}},
			"openmpi rank=2 size=4 local=0/1 node=n2"},
		{"open mpi before its daemon's srun step", []map[string]string{daemon, {"OMPI_COMM_WORLD_RANK": "5",
			"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}},
			"openmpi rank=5 size=8 local=1/4 node=" + host},
		{"hydra", []map[string]string{{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}},
			"hydra rank=1 size=2 local=1/2 node=" + host},
		{"hydra before its proxy's srun step", []map[string]string{daemon, {"PMI_RANK": "6", "PMI_SIZE": "8",
			"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"}}, "hydra rank=6 size=8 local=2/4 node=" + host},
		{"prterun in a batch script", []map[string]string{batch, {"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-a-1234@1",
			"PMIX_HOSTNAME": "a"}}, "pmix rank=3 size=0 local=0/0 node=a"},
		{"pmix before its daemon's srun step", []map[string]string{daemon, {"PMIX_RANK": "1",
			"PMIX_NAMESPACE": "prterun-a-1234@1", "PMIX_HOSTNAME": "b"}}, "pmix rank=1 size=0 local=0/0 node=b"},
		{"srun --mpi=pmix", []map[string]string{srun, {"PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.77.0",
			"PMIX_HOSTNAME": "b.cluster"}}, "slurm rank=3 size=4 local=1/2 node=b"},
		{"pmi", []map[string]string{{"PMI_RANK": "2", "PMI_SIZE": "3"}}, "pmi rank=2 size=3 local=0/0 node=" + host},
		{"pmi before its broker's srun step", []map[string]string{daemon, {"PMI_RANK": "1", "PMI_SIZE": "4"}},
			"pmi rank=1 size=4 local=0/0 node=" + host},
		{"srun --mpi=pmi2", []map[string]string{srun, {"PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "11"}},
			"slurm rank=3 size=4 local=1/2 node=b"},
		{"srun", []map[string]string{srun}, "slurm rank=3 size=4 local=1/2 node=b"},
		{"srun, uneven nodes", []map[string]string{srun, {"SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_STEP_NUM_TASKS": "4",
			"SLURM_LOCALID": "0"}}, "slurm rank=3 size=4 local=0/1 node=b"},
		{"srun, no node index", []map[string]string{srun, {"SLURM_NODEID": ""}}, "slurm rank=3 size=4 local=1/0 node=b"},
		{"batch script", []map[string]string{batch}, "none rank=0 size=1 local=0/1 node=" + host},
	} {
		got, err := Parse(getenv(c.env...))
		if err != nil || place(got) != c.want {
			t.Errorf("%s: got %s, %v; want %s", c.name, place(got), err, c.want)
		}
	}
}

// getenv reads the union of envs, a later one overriding an earlier one;
// "" unsets.
func getenv(envs ...map[string]string) func(string) string {
	all := map[string]string{}
	for _, e := range envs {
		for k, v := range e {
			all[k] = v
		}
	}
	return func(k string) string { return all[k] }
}

func TestParseErrors(t *testing.T) {
	srun := map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
		"SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2"}
	for _, c := range []struct {
		env  []map[string]string
		want string
	}{
		{[]map[string]string{{"PMI_RANK": "x", "PMI_SIZE": "2"}}, `PMI_RANK="x" is not a number`},
		{[]map[string]string{{"PMI_RANK": "3", "PMI_SIZE": "2"}}, "PMI_RANK=3 of 2 ranks: rank out of range"},
		{[]map[string]string{{"PMIX_RANK": "-1"}}, "PMIX_RANK=-1 of 0 ranks: rank out of range"},
		{[]map[string]string{{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "0"}}, "OMPI_COMM_WORLD_SIZE=0: no ranks"},
		{[]map[string]string{{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}},
			"OMPI_COMM_WORLD_LOCAL_RANK=2 of 2 ranks on the node: local rank out of range"},
		{[]map[string]string{{"PMI_RANK": "1", "PMI_SIZE": "x", "MPI_LOCALRANKID": "y"}},
			`PMI_SIZE="x" is not a number` + "\n" + `launch: MPI_LOCALRANKID="y" is not a number`},
		{[]map[string]string{srun, {"SLURM_LOCALID": "2"}}, "SLURM_LOCALID=2 of 2 ranks on the node"},
		{[]map[string]string{srun, {"SLURM_NODEID": "1"}}, `SLURM_STEP_TASKS_PER_NODE="2": no node 1 in a list of 1`},
		{[]map[string]string{srun, {"SLURM_NODEID": "-1"}}, `SLURM_NODEID="-1" is not a node index`},
		{[]map[string]string{srun, {"SLURM_STEP_TASKS_PER_NODE": "2(x)"}}, `bad entry "2(x)"`},
	} {
		_, err := Parse(getenv(c.env...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.env, err, c.want)
		}
	}
}

func TestTasksOnNode(t *testing.T) {
	const list = "2(x3),1,4(x2)" // nodes 0-2: 2 tasks, node 3: 1, nodes 4-5: 4
	for node, want := range []int{2, 2, 2, 1, 4, 4} {
		if got, err := tasksOnNode(list, node); err != nil || got != want {
			t.Errorf("node %d: %d, %v; want %d", node, got, err, want)
		}
	}
	if _, err := tasksOnNode(list, 6); err == nil || err.Error() != "no node 6 in a list of 6" {
		t.Errorf("node 6: %v", err)
	}
	for _, bad := range []string{"", "x", "0", "2(x0)", "2(x3", "2(3)", "-1", "2(x3),", "1,,1"} {
		if n, err := tasksOnNode(bad, 0); err == nil {
			t.Errorf("%q: %d, no error", bad, n)
		}
	}
}

func TestAlone(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1"}, true},
		{map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2"}, false},
		{map[string]string{"PMIX_RANK": "0"}, false}, // the size is unknown: ask MPI
	} {
		e, err := Parse(getenv(c.env))
		if err != nil || e.Alone() != c.want {
			t.Errorf("%v: Alone %v, %v; want %v", c.env, e.Alone(), err, c.want)
		}
	}
}
