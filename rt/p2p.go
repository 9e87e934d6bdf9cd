package rt

import (
	"fmt"
	"runtime"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// P2P is the point-to-point bandwidth of the communicator, measured the
// way the loop moves files: every rank streams messages of one size to
// the next rank while receiving from the previous one, with Isend, Iprobe
// and Recv, a few sends in flight.
type P2P struct {
	MessageBytes int
	Messages     int
	// Seconds is the slowest rank's time; BytesPerSecond what one rank
	// received per second.
	Seconds        float64
	BytesPerSecond float64
}

// tagBench is the tag of P2P's messages, used before serving starts.
const tagBench = 3

// MeasureP2P streams messages of size bytes from each rank to the next;
// every rank must call it. It needs at least two ranks.
func MeasureP2P(comm collectives.Comm, size, messages int) (P2P, error) {
	n, me := comm.Size(), comm.Rank()
	if n < 2 {
		return P2P{}, fmt.Errorf("rt: point-to-point bandwidth needs two ranks or more, not %d", n)
	}
	if err := comm.Barrier(); err != nil {
		return P2P{}, err
	}
	start := time.Now()
	if err := stream(comm, (me+1)%n, size, messages); err != nil {
		return P2P{}, err
	}
	secs, err := comm.AllreduceMax([]int64{int64(time.Since(start))})
	if err != nil {
		return P2P{}, err
	}
	s := float64(secs[0]) / 1e9
	return P2P{MessageBytes: size, Messages: messages, Seconds: s, BytesPerSecond: float64(size*messages) / s}, nil
}

// stream sends messages to dst and receives as many, keeping up to eight
// sends in flight.
func stream(comm collectives.Comm, dst, size, messages int) error {
	const inflight = 8
	bufs := make([][]byte, inflight)
	reqs := make([]collectives.Request, inflight)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	sent, got := 0, 0
	for sent < messages || got < messages {
		progress := false
		for i, r := range reqs {
			done := r == nil
			if r != nil {
				var err error
				if done, _, err = r.Test(); err != nil {
					return err
				}
			}
			if done && sent < messages {
				var err error
				if reqs[i], err = comm.Isend(bufs[i], dst, tagBench); err != nil {
					return err
				}
				sent, progress = sent+1, true
			}
		}
		ok, st, err := comm.Iprobe()
		if err != nil {
			return err
		}
		if ok {
			b := make([]byte, st.Len)
			if err := comm.Recv(b, st.Source, st.Tag); err != nil {
				return err
			}
			got, progress = got+1, true
		}
		if !progress {
			runtime.Gosched()
		}
	}
	return drain(reqs)
}

func drain(reqs []collectives.Request) error {
	for _, r := range reqs {
		for r != nil {
			done, _, err := r.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
			runtime.Gosched()
		}
	}
	return nil
}
