// Package job runs one rank of a brandrt job: it joins the job's MPI
// world, opens the rank's shard and the memory it shares with the
// training processes of its node, serves the epochs, starts the training
// command beside the rank when given one (co-launch, see Train), and ends
// the job on every rank when this one fails or is signalled, so that no
// rank is left waiting for it.
//
// The command line (brandrt serve) turns its flags into a Config and
// calls Run. Run joins the world and checks the nodes (job.go); serve
// (serve.go) then goes through phases, each a function that returns what
// undoes it, undone in the reverse order when the rank ends: stop on a
// signal, stage the shard (--stage), find the node's memory and the
// cgroup, make the memory shared with the training, open the shard
// (rt.Open), watch for the OOM killer (oom.go), open the attach point
// (rt/shm), start the training (train.go); then it serves the epochs
// and reports how the training read its files.
//
// # Co-launch
//
// With a training command (Config.Train), each rank starts it on its node
// once it serves, ProcsPerNode times. Each process gets:
//   - what a torchrun worker gets, so that torch.distributed's env://
//     finds its peers: RANK (rank × ProcsPerNode + its index on the node),
//     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node's
//     rank), MASTER_ADDR (rank 0's node) and MASTER_PORT (a port free on
//     it), unless MASTER_ADDR and MASTER_PORT are set already;
//   - what a brandrt client needs: BRANDRT_ATTACH and BRANDRT_LOCAL_RANK
//     name the rank's attach point, and BrandSampler reads its share of the
//     rank's trace from LOCAL_RANK and LOCAL_WORLD_SIZE;
//   - none of the MPI launcher's variables (OMPI_*, PMIX_*, PMI_*,
//     MPI_LOCAL*): it is not part of the MPI job.
//
// A training process that exits with status 0 is done; once all of its
// node's are, the rank's training is over (rt.Node.TrainingOver), and the
// job ends when every node's is. One that fails (a status other than 0,
// or a signal) ends the job on every node within seconds, naming the
// node, the rank and the status; the job then exits with that status.
// SIGINT and SIGTERM to a rank go on to its training processes (to their
// process groups: DataLoader workers too), and should the rank die they
// get SIGKILL (the parent-death signal). While the training runs, the
// rank does not judge it by its clients (a BrandSampler's session gone, or
// every client leaving: see rt.Node.SuperviseTraining); its exit status
// says how it went.
//
// # Stopping
//
// A signal, or a training process that fails, cancels the rank's loop; the
// training still running gets SIGTERM (or the signal, passed on) and
// trainGrace to end before SIGKILL; then the job ends on every rank
// (MPI_Abort, with the training's status). A rank stuck in a collective
// is ended interruptGrace after that.
package job
