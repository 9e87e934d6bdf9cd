// Package launch tells a brandrt process where it stands: its rank, the
// job size and its rank on the node, as the launcher (Open MPI's mpirun,
// a PMI-based launcher, Slurm's srun) set them in the environment, before
// MPI is initialised.
package launch

import (
	"fmt"
	"os"
	"strconv"
)

// Env is what the launcher told this process.
type Env struct {
	// Launcher names the launcher: "mpirun" (Open MPI), "pmi", "slurm", or
	// "" when the process was started by hand.
	Launcher string
	// Rank and Size are the process's rank and the number of ranks;
	// LocalRank is its rank among the ranks of its node.
	Rank, Size, LocalRank int
}

// The variables each launcher sets, in the order they are tried.
var launchers = []struct{ name, rank, size, local string }{
	{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
	{"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
}

// FromEnv reads the environment of the current process.
func FromEnv() (Env, error) { return Parse(os.Getenv) }

// Parse reads the environment through getenv. A process with none of the
// launchers' variables is rank 0 of 1. A variable that is set but is not a
// number, or a rank outside [0, size), is an error naming the variable.
func Parse(getenv func(string) string) (Env, error) {
	for _, l := range launchers {
		if getenv(l.rank) == "" {
			continue
		}
		e := Env{Launcher: l.name}
		var err error
		if e.Rank, err = number(getenv, l.rank, 0); err != nil {
			return Env{}, err
		}
		if e.Size, err = number(getenv, l.size, 1); err != nil {
			return Env{}, err
		}
		if e.LocalRank, err = number(getenv, l.local, 0); err != nil {
			return Env{}, err
		}
		if e.Size < 1 || e.Rank < 0 || e.Rank >= e.Size {
			return Env{}, fmt.Errorf("launch: %s=%d and %s=%d: rank out of range", l.rank, e.Rank, l.size, e.Size)
		}
		return e, nil
	}
	return Env{Size: 1}, nil
}

func number(getenv func(string) string, name string, def int) (int, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q is not a number", name, s)
	}
	return n, nil
}
