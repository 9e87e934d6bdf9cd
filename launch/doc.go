// Package launch tells a brandrt process where it stands before MPI is
// initialised: its rank, the job size, its rank among the ranks of its node,
// how many ranks its node holds and the node's name, as the launcher that
// started it wrote them into its environment. It also ties the process to
// that launcher (Lifeline) and checks that no two ranks share a node
// (OneRankPerNode).
//
// # Launchers
//
// Parse knows five launchers. A variable in the table that is not set
// leaves its field unknown, which is 0 (a local rank of 0 is then a guess);
// a node name that no variable gives is the host name (os.Hostname).
//
//	launcher  started by                rank / size                 local rank / local size                    node
//	openmpi   Open MPI's mpirun         OMPI_COMM_WORLD_RANK/SIZE   OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE      PMIX_HOSTNAME
//	hydra     MPICH's (or Intel MPI's)  PMI_RANK, PMI_SIZE          MPI_LOCALRANKID, MPI_LOCALNRANKS           host name
//	          mpiexec (Hydra)
//	pmix      a PMIx server (PRRTE's    PMIX_RANK / unknown         unknown                                    PMIX_HOSTNAME
//	          prterun, …)
//	pmi       another PMI-1/PMI-2       PMI_RANK, PMI_SIZE          unknown                                    host name
//	          launcher (Flux, …)
//	slurm     srun                      SLURM_PROCID,               SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE   SLURMD_NODENAME
//	                                    SLURM_STEP_NUM_TASKS        at SLURM_NODEID
//
// PMIx passes the size and the local ranks through its library
// (PMIx_Get), not the environment, so a process started by a PMIx server
// learns its size only from MPI: Env.Alone is false for it.
// SLURM_STEP_TASKS_PER_NODE counts the step's tasks on each of its nodes in
// Slurm's compressed form ("2(x3),1" is 2, 2, 2, 1), and SLURM_NODEID is
// this node's index among the step's nodes.
//
// # Precedence
//
// Several launchers' variables are often set at once, and one wrong choice
// gives every rank the same rank number. The rule: the launcher that
// started this very process wins, and that is the innermost one. An MPI
// launcher runs inside a Slurm job, never the other way round, so the
// launchers are tried in the order of the table and the first that started
// the process is used:
//
//   - openmpi: OMPI_COMM_WORLD_RANK is set. Open MPI's mpirun also sets
//     PMIX_RANK (measured with Open MPI 4.1.4), and inside a batch job the
//     batch script's SLURM_PROCID (0 on every rank) stays set.
//   - hydra: PMI_RANK and MPI_LOCALRANKID are set. Inside a Slurm job Hydra
//     starts its proxies with srun, so its ranks also carry the proxy's
//     step: SLURM_STEP_ID, SLURM_PROCID 0 and SLURM_STEP_NUM_TASKS 1 on a
//     single node (measured with MPICH 4.0.2 and Slurm 22.05).
//   - pmix: PMIX_RANK is set and PMIX_NAMESPACE does not begin with
//     "slurm.pmix.". That namespace is the one srun --mpi=pmix gives its
//     tasks ("slurm.pmix.JOB.STEP"), and srun's variables are then read
//     instead, as they tell the local rank and size too.
//   - pmi: PMI_RANK is set and PMI_RANK and PMI_SIZE are not the
//     SLURM_PROCID and SLURM_STEP_NUM_TASKS of a Slurm step: srun
//     --mpi=pmi2 sets PMI_RANK and PMI_SIZE to those, and srun's variables
//     are then read instead.
//   - slurm: SLURM_PROCID and SLURM_STEP_ID are set, that is, the process
//     is a task of an srun step. A batch script and what it starts without
//     srun have SLURM_PROCID=0 and SLURM_NTASKS set to the job's task count
//     but no SLURM_STEP_ID: that is no launcher, and a brandrt started by
//     hand in a batch script is rank 0 of 1, not rank 0 of the job.
//
// With none of these the process was started by hand: rank 0 of 1, local
// rank 0 of 1, Launcher "".
//
// The directory testdata holds the variables each case set, measured with
// Open MPI 4.1.4, MPICH 4.0.2 and Slurm 22.05.8 on one host; the tests parse
// them.
//
// # One rank per node
//
// brandrt runs one rank per node: the rank owns the node's memory budget
// and its attach point. After MPI is initialised, the caller gathers every
// rank's Env.Node and passes them to OneRankPerNode, which names each node
// that holds several ranks and the flag that allows it.
package launch
