package collectives

import (
	"errors"
	"fmt"
	"os"
	"slices"

	mpi "github.com/sbromberger/gompi"
)

// World is this process's view of MPI_COMM_WORLD.
type World struct {
	m    *mpi.MPI
	comm *mpi.Communicator
}

var _ Comm = (*World)(nil)

// tcpDefaults are the settings of Open MPI's TCP transport (ranks on
// different nodes over Ethernet) that brandrt starts with: a file of up to
// 1 MiB goes in one eager message instead of a rendezvous, which over TCP
// waits for the receiver's rank to progress MPI at each step. Measured on
// 3 emulated nodes (serve --consume 4, 6,000 files of ~110 KB held in
// memory): 1,100–2,100 files/s with Open MPI's defaults (64 KiB eager,
// 128 KiB fragments), 3,500–6,600 with these.
var tcpDefaults = [][2]string{
	{"OMPI_MCA_btl_tcp_eager_limit", "1048576"},
	{"OMPI_MCA_btl_tcp_rndv_eager_limit", "1048576"},
	{"OMPI_MCA_btl_tcp_max_send_size", "1048576"},
}

// Init starts MPI with MPI_THREAD_MULTIPLE. Call it once, from the locked
// main thread. Open MPI's TCP transport gets tcpDefaults where neither the
// user nor the launcher set them.
func Init() (*World, error) {
	if mpi.IsInitialized() {
		return nil, errors.New("collectives: MPI is already initialised")
	}
	for _, kv := range tcpDefaults {
		if _, set := os.LookupEnv(kv[0]); !set {
			os.Setenv(kv[0], kv[1])
		}
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
func (w *World) Barrier() error {
	w.comm.Barrier()
	return nil
}

// AllreduceSum returns the element-wise sum of in over all ranks.
func (w *World) AllreduceSum(in []int64) ([]int64, error) {
	out := make([]int64, len(in))
	if err := w.comm.Allreduce(out, in, mpi.OpSum); err != nil {
		return nil, fmt.Errorf("collectives: allreduce: %w", err)
	}
	return out, nil
}

// AllreduceMax returns the element-wise maximum of in over all ranks.
func (w *World) AllreduceMax(in []int64) ([]int64, error) {
	out := make([]int64, len(in))
	if err := w.comm.Allreduce(out, in, mpi.OpMax); err != nil {
		return nil, fmt.Errorf("collectives: allreduce: %w", err)
	}
	return out, nil
}

// allgatherLimit bounds the elements one MPI_Allgatherv gathers: its
// counts and displacements are C ints. A variable so tests can lower it.
var allgatherLimit = 1<<31 - 1

// Allgatherv concatenates every rank's send in rank order and returns it
// with each rank's count. Totals over allgatherLimit elements go in
// rounds: in round i each rank sends its elements [i*piece, (i+1)*piece),
// piece = allgatherLimit/Size().
func (w *World) Allgatherv(send []int32) ([]int32, []int, error) {
	return w.gather(send, -1)
}

// Gatherv concatenates every rank's send in rank order on rank root and
// returns it there; every rank gets each rank's count, the others no
// elements. Totals over allgatherLimit elements go in rounds, as
// Allgatherv's.
func (w *World) Gatherv(send []int32, root int) ([]int32, []int, error) {
	if root < 0 || root >= w.Size() {
		return nil, nil, fmt.Errorf("collectives: Gatherv to rank %d of %d", root, w.Size())
	}
	return w.gather(send, root)
}

// gather is Gatherv to root, or Allgatherv with root −1.
func (w *World) gather(send []int32, root int) ([]int32, []int, error) {
	counts, err := w.lengths(len(send))
	if err != nil {
		return nil, nil, err
	}
	mine := root < 0 || root == w.Rank() // whether the elements come here
	call := func(send, recv, part, displs []int32) error {
		if root < 0 {
			return allgatherv(send, recv, part, displs)
		}
		return gatherv(send, recv, part, displs, root)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	var all []int32
	if mine {
		all = make([]int32, total)
	}
	piece := max(allgatherLimit/len(counts), 1)
	var buf []int32 // one round's elements, if there are several rounds
	if slices.Max(counts) > piece && mine {
		buf = make([]int32, piece*len(counts))
	}
	for lo := 0; lo < slices.Max(counts); lo += piece {
		if err := gatherRound(send, all, buf, counts, lo, piece, call); err != nil {
			return nil, nil, err
		}
	}
	return all, counts, nil
}

// lengths returns every rank's n.
func (w *World) lengths(n int) ([]int, error) {
	v := make([]int64, w.Size())
	v[w.Rank()] = int64(n)
	sums, err := w.AllreduceSum(v)
	if err != nil {
		return nil, err
	}
	counts := make([]int, len(sums))
	for r, s := range sums {
		counts[r] = int(s)
	}
	return counts, nil
}

// gatherRound gathers elements [lo, lo+piece) of every rank's send (of
// counts[r] elements) with call, into buf, then copies them to their
// places in all. With one round, they are gathered in all in place; with
// no all (a rank that gets none), only sent.
func gatherRound(send, all, buf []int32, counts []int, lo, piece int, call func(send, recv, part, displs []int32) error) error {
	part, displs := make([]int32, len(counts)), make([]int32, len(counts))
	n := 0
	for r, c := range counts {
		part[r], displs[r] = int32(min(max(c-lo, 0), piece)), int32(n)
		n += int(part[r])
	}
	mine := send[min(lo, len(send)):min(lo+piece, len(send))]
	if slices.Max(counts) <= piece || all == nil {
		return call(mine, all, part, displs)
	}
	if err := call(mine, buf[:n], part, displs); err != nil {
		return err
	}
	start := 0
	for r, c := range counts {
		copy(all[start+lo:], buf[displs[r]:displs[r]+part[r]])
		start += c
	}
	return nil
}

// Isend starts sending b to rank dst with tag (MPI_Isend). b must not
// change until Test reports the request done; the Status it reports is
// zero.
func (w *World) Isend(b []byte, dst, tag int) (Request, error) { return isend(b, dst, tag, false) }

// Issend is Isend in synchronous mode (MPI_Issend): it completes only
// once dst posted the receive that takes it, so that a sender that
// bounds its Issends in flight bounds what waits, unmatched, in dst's
// MPI buffers.
func (w *World) Issend(b []byte, dst, tag int) (Request, error) { return isend(b, dst, tag, true) }

// Irecv starts receiving into b a message from src, or AnySource, with
// tag, or AnyTag (MPI_Irecv). Test reports its source, tag and length.
func (w *World) Irecv(b []byte, src, tag int) (Request, error) { return irecv(b, src, tag) }

// Iprobe reports whether a message from any rank with any tag can be
// received now (MPI_Iprobe), and if so its source, tag and length.
func (w *World) Iprobe() (bool, Status, error) { return iprobe() }

// Recv receives the message Iprobe reported from src with tag into b,
// which must be exactly as long as the message (MPI_Recv).
func (w *World) Recv(b []byte, src, tag int) error { return recv(b, src, tag) }

// Abort ends every rank of the job with code (MPI_Abort); it does not
// return.
func (w *World) Abort(code int) {
	w.comm.Abort(code)
	os.Exit(code) // MPI_Abort should not return; make sure
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
