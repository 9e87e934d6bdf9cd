package collectives

import (
	"errors"
	"fmt"

	mpi "github.com/sbromberger/gompi"
)

// World is this process's view of MPI_COMM_WORLD.
type World struct {
	m    *mpi.MPI
	comm *mpi.Communicator
}

// Init starts MPI with MPI_THREAD_MULTIPLE. Call it once, from the locked
// main thread.
func Init() (*World, error) {
	if mpi.IsInitialized() {
		return nil, errors.New("collectives: MPI is already initialised")
	}
	m, err := mpi.StartThreaded()
	if err != nil {
		return nil, fmt.Errorf("collectives: MPI_Init_thread: %w", err)
	}
	return &World{m: m, comm: m.NewCommunicator(nil)}, nil
}

// Rank returns this process's rank.
func (w *World) Rank() int { return w.comm.Rank() }

// Size returns the number of ranks.
func (w *World) Size() int { return w.comm.Size() }

// Barrier waits until every rank has called it.
func (w *World) Barrier() { w.comm.Barrier() }

// AllreduceSum returns the element-wise sum of in over all ranks.
func (w *World) AllreduceSum(in []int64) ([]int64, error) {
	out := make([]int64, len(in))
	if err := w.comm.Allreduce(out, in, mpi.OpSum); err != nil {
		return nil, fmt.Errorf("collectives: allreduce: %w", err)
	}
	return out, nil
}

// bcastPiece bounds each MPI_Bcast: MPI counts are C ints.
const bcastPiece = 1 << 30

// Bcast sends root's b to every rank and returns it there (root gets b
// back). Any length works: it goes in pieces of at most 1 GiB.
func (w *World) Bcast(b []byte, root int) ([]byte, error) {
	n := []int64{int64(len(b))}
	w.comm.Bcast(n, root)
	if w.Rank() != root {
		b = make([]byte, n[0])
	}
	for off := int64(0); off < n[0]; off += bcastPiece {
		w.comm.Bcast(b[off:min(off+bcastPiece, n[0])], root)
	}
	return b, nil
}

// Finalize shuts MPI down; call it from the thread that called Init.
func (w *World) Finalize() { w.m.Stop() }
