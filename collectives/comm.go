package collectives

// Comm is what the runtime needs from MPI: collectives over all ranks and
// nonblocking point-to-point messages. World implements it over
// MPI_COMM_WORLD; Local implements it in one process, for tests.
//
// A Comm is used by one goroutine at a time: the runtime's loop owns it.
type Comm interface {
	// Rank returns this process's rank; Size the number of ranks.
	Rank() int
	Size() int
	// Barrier waits until every rank has called it.
	Barrier() error
	// AllreduceSum and AllreduceMax return the element-wise sum or
	// maximum of in over all ranks; every rank passes the same length.
	AllreduceSum(in []int64) ([]int64, error)
	AllreduceMax(in []int64) ([]int64, error)
	// Allgatherv concatenates every rank's send in rank order and returns
	// the result and each rank's count. Totals beyond what one MPI call
	// can carry (2^31−1 elements) are gathered in several rounds.
	Allgatherv(send []int32) (all []int32, counts []int, err error)
	// Gatherv is Allgatherv whose elements come to rank root only: the
	// other ranks get each rank's count and no elements.
	Gatherv(send []int32, root int) (all []int32, counts []int, err error)
	// Isend starts sending b to rank dst with tag. b must not change
	// until the request completes.
	Isend(b []byte, dst, tag int) (Request, error)
	// Issend is Isend that completes only once dst has posted the
	// receive that takes b (synchronous mode).
	Issend(b []byte, dst, tag int) (Request, error)
	// Irecv starts receiving into b a message from src (AnySource) with
	// tag (AnyTag); Test reports its source, tag and length.
	Irecv(b []byte, src, tag int) (Request, error)
	// Iprobe reports whether a message from any rank with any tag can be
	// received now, and if so its source, tag and length in bytes.
	Iprobe() (ok bool, st Status, err error)
	// Recv receives the message Iprobe reported into b, which must be
	// exactly as long as the message.
	Recv(b []byte, src, tag int) error
	// Abort ends every rank of the job with code; it does not return.
	Abort(code int)
}

// Request is a nonblocking operation in flight.
type Request interface {
	// Test reports whether the operation completed, and for a receive
	// what arrived. After it reports done, the buffer is the caller's.
	Test() (done bool, st Status, err error)
}

// Status describes a received or probed message.
type Status struct {
	Source, Tag, Len int
}

// Wildcards for Irecv.
const (
	AnySource = -1
	AnyTag    = -1
)

// MaxTag is the largest tag the runtime uses; MPI guarantees at least
// 32767.
const MaxTag = 32767
