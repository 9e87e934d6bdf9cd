package launch

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Env is what the launcher told this process.
type Env struct {
	// Launcher names the launcher that started this process: "openmpi",
	// "hydra", "pmix", "pmi", "slurm" (see the package doc), or "" when it
	// was started by hand.
	Launcher string
	// Rank is the process's rank, Size the number of ranks (0: the
	// launcher does not say; MPI knows).
	Rank, Size int
	// LocalRank is the process's rank among the ranks of its node (0 when
	// the launcher does not say), LocalSize the number of ranks on its
	// node (0: the launcher does not say).
	LocalRank, LocalSize int
	// Node is the name of this process's node: the launcher's name for it
	// where it gives one, else the host name.
	Node string
}

// Alone reports whether this process is the whole job, so that MPI need not
// be started: it was started by hand, or by a launcher that started one
// process. A launcher that does not tell the size (pmix) is not alone.
func (e Env) Alone() bool { return e.Size == 1 }

// lookup reads an environment variable: os.Getenv, or a test's map.
type lookup = func(string) string

// A launcher is one way a process may have been started: the variables that
// tell its place, and whether it started this process.
type launcher struct {
	name string
	// rank, size, localRank and localSize name the launcher's variables;
	// "" where it sets none.
	rank, size, localRank, localSize string
	// node names the variable that gives the node's name; "" where none
	// does.
	node string
	// started reports whether the launcher started this process, given
	// that its rank variable is set; nil means it did.
	started func(getenv lookup) bool
	// localSizeOf, if not nil, reads the local size instead of localSize.
	localSizeOf func(getenv lookup) (int, error)
}

// launchers in the order of precedence: the innermost launcher first.
var launchers = []launcher{
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: "OMPI_COMM_WORLD_LOCAL_SIZE", node: "PMIX_HOSTNAME"},
	{name: "hydra", rank: "PMI_RANK", size: "PMI_SIZE", localRank: "MPI_LOCALRANKID", localSize: "MPI_LOCALNRANKS",
		started: func(getenv lookup) bool { return getenv("MPI_LOCALRANKID") != "" }},
	{name: "pmix", rank: "PMIX_RANK", node: "PMIX_HOSTNAME",
		started: func(getenv lookup) bool { return !srunPMIx(getenv) }},
	{name: "pmi", rank: "PMI_RANK", size: "PMI_SIZE",
		started: func(getenv lookup) bool { return !srunPMI(getenv) }},
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_STEP_NUM_TASKS", localRank: "SLURM_LOCALID", node: "SLURMD_NODENAME",
		started: srunTask, localSizeOf: slurmLocalSize},
}

// FromEnv reads the environment of the current process.
func FromEnv() (Env, error) { return Parse(os.Getenv) }

// Parse reads the environment through getenv, as the package doc says. A
// process with none of the launchers' variables is rank 0 of 1, local rank
// 0 of 1. A variable that is set but is not a number, a size below 1, or a
// rank or local rank that its size does not hold is an error naming the
// variable.
func Parse(getenv func(string) string) (Env, error) {
	for _, l := range launchers {
		if getenv(l.rank) != "" && (l.started == nil || l.started(getenv)) {
			return l.read(getenv)
		}
	}
	node, err := nodeName("", getenv)
	return Env{Size: 1, LocalSize: 1, Node: node}, err
}

// read reads l's variables, reporting every bad one, and checks them.
func (l launcher) read(getenv lookup) (Env, error) {
	e := Env{Launcher: l.name}
	var errs [5]error
	e.Rank, errs[0] = number(getenv, l.rank)
	e.Size, errs[1] = count(getenv, l.size)
	e.LocalRank, errs[2] = number(getenv, l.localRank)
	if l.localSizeOf != nil {
		e.LocalSize, errs[3] = l.localSizeOf(getenv)
	} else {
		e.LocalSize, errs[3] = count(getenv, l.localSize)
	}
	e.Node, errs[4] = nodeName(l.node, getenv)
	if err := errors.Join(errs[:]...); err != nil {
		return Env{}, err
	}
	return e, l.check(e)
}

// check refuses a rank or local rank that its size does not hold; an
// unknown size (0) holds any.
func (l launcher) check(e Env) error {
	if e.Rank < 0 || (e.Size > 0 && e.Rank >= e.Size) {
		return fmt.Errorf("launch: %s=%d of %d ranks: rank out of range", l.rank, e.Rank, e.Size)
	}
	if e.LocalRank < 0 || (e.LocalSize > 0 && e.LocalRank >= e.LocalSize) {
		return fmt.Errorf("launch: %s=%d of %d ranks on the node: local rank out of range", l.localRank, e.LocalRank, e.LocalSize)
	}
	return nil
}

// number reads the whole number in variable name; unset (or no name) is 0.
func number(getenv lookup, name string) (int, error) {
	if name == "" || getenv(name) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(getenv(name))
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q is not a number", name, getenv(name))
	}
	return n, nil
}

// count reads a number of ranks: unset is 0 (unknown), set it is at least 1.
func count(getenv lookup, name string) (int, error) {
	n, err := number(getenv, name)
	if err == nil && n < 1 && getenv(name) != "" {
		err = fmt.Errorf("launch: %s=%d: no ranks", name, n)
	}
	return n, err
}

// nodeName reads the node's name from variable name, or is the host name
// where name is "" or unset.
func nodeName(name string, getenv lookup) (string, error) {
	if name != "" && getenv(name) != "" {
		return getenv(name), nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("launch: host name: %w", err)
	}
	return host, nil
}
