package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// srunTask reports whether this process is a task of an srun step. The
// batch script of a job also has SLURM_PROCID (0), but no SLURM_STEP_ID.
func srunTask(getenv lookup) bool {
	return getenv("SLURM_PROCID") != "" && getenv("SLURM_STEP_ID") != ""
}

// srunPMIx reports whether the PMIx server of this process is srun's
// (srun --mpi=pmix), which names its namespace "slurm.pmix.JOB.STEP".
func srunPMIx(getenv lookup) bool {
	return srunTask(getenv) && strings.HasPrefix(getenv("PMIX_NAMESPACE"), "slurm.pmix.")
}

// srunPMI reports whether PMI_RANK and PMI_SIZE are srun's (srun
// --mpi=pmi2): they are then the rank and size of the Slurm step.
func srunPMI(getenv lookup) bool {
	return srunTask(getenv) && getenv("PMI_RANK") == getenv("SLURM_PROCID") &&
		getenv("PMI_SIZE") == getenv("SLURM_STEP_NUM_TASKS")
}

// slurmLocalSize is the number of the step's tasks on this node: the entry
// of SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID; 0 when either is unset.
func slurmLocalSize(getenv lookup) (int, error) {
	list, id := getenv("SLURM_STEP_TASKS_PER_NODE"), getenv("SLURM_NODEID")
	if list == "" || id == "" {
		return 0, nil
	}
	node, err := strconv.Atoi(id)
	if err != nil || node < 0 {
		return 0, fmt.Errorf("launch: SLURM_NODEID=%q is not a node index", id)
	}
	n, err := tasksOnNode(list, node)
	if err != nil {
		return 0, fmt.Errorf("launch: SLURM_STEP_TASKS_PER_NODE=%q: %w", list, err)
	}
	return n, nil
}

// tasksOnNode reads Slurm's tasks-per-node list, counts separated by
// commas where "c(xr)" stands for r nodes of c tasks each ("2(x3),1" is
// 2, 2, 2, 1), and returns the count of node index node. Every entry must
// be well formed, not only those up to the node.
func tasksOnNode(list string, node int) (int, error) {
	n, nodes := 0, 0
	for _, entry := range strings.Split(list, ",") {
		c, r, err := tasksEntry(entry)
		if err != nil {
			return 0, err
		}
		if node >= nodes && node < nodes+r {
			n = c
		}
		nodes += r
	}
	if node >= nodes {
		return 0, fmt.Errorf("no node %d in a list of %d", node, nodes)
	}
	return n, nil
}

// tasksEntry reads one entry of a tasks-per-node list: "c" or "c(xr)",
// c tasks on each of r nodes, both at least 1.
func tasksEntry(entry string) (c, r int, err error) {
	count, rep, repeated := strings.Cut(entry, "(x")
	r = 1
	if repeated {
		rest, ok := strings.CutSuffix(rep, ")")
		if r, err = strconv.Atoi(rest); !ok || err != nil || r < 1 {
			return 0, 0, fmt.Errorf("bad entry %q", entry)
		}
	}
	if c, err = strconv.Atoi(count); err != nil || c < 1 {
		return 0, 0, fmt.Errorf("bad entry %q", entry)
	}
	return c, r, nil
}
