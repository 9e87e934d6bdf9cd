// Package p2pbench measures the point-to-point bandwidth between ranks
// the way a rank's loop moves files between them (brandrt bench serve).
// A job serving data does not use it.
package p2pbench

import (
	"fmt"
	"runtime"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// Result is the point-to-point bandwidth of the communicator, measured the
// way the loop moves files: every rank streams messages of one size to
// the next rank while receiving from the previous one, with Isend, Iprobe
// and Recv, eight sends in flight.
type Result struct {
	MessageBytes int
	Messages     int
	// SpreadBytes is the memory each side's messages are spread over:
	// with a few messages' worth they stay in the CPU's cache; with many
	// megabytes they come from and go to memory, as served files do.
	SpreadBytes int64
	// Seconds is the slowest rank's time; BytesPerSecond what one rank
	// received per second.
	Seconds        float64
	BytesPerSecond float64
}

// tagBench is the tag of Measure's messages, used before serving
// starts (rt's loop uses other tags, and only once serving).
const tagBench = 3

// p2pInflight is the number of sends each rank keeps in flight.
const p2pInflight = 8

// Measure streams messages of size bytes from each rank to the next,
// sent from and received into buffers spread over about spread bytes on
// each side (at least eight messages' worth); every rank must call it. It
// needs at least two ranks.
func Measure(comm collectives.Comm, size, messages int, spread int64) (Result, error) {
	n, me := comm.Size(), comm.Rank()
	if n < 2 {
		return Result{}, fmt.Errorf("p2pbench: point-to-point bandwidth needs two ranks or more, not %d", n)
	}
	nb := max(1, int(spread/int64(max(size, 1)))/p2pInflight) * p2pInflight
	if err := comm.Barrier(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := stream(comm, (me+1)%n, size, messages, nb); err != nil {
		return Result{}, err
	}
	secs, err := comm.AllreduceMax([]int64{int64(time.Since(start))})
	if err != nil {
		return Result{}, err
	}
	s := float64(secs[0]) / 1e9
	return Result{MessageBytes: size, Messages: messages, SpreadBytes: int64(nb * size), Seconds: s,
		BytesPerSecond: float64(size*messages) / s}, nil
}

// stream sends messages to dst and receives as many, over nb buffers on
// each side (a multiple of p2pInflight). Send slot i uses buffers i,
// i+p2pInflight, …, so that a buffer is reused only after its send
// completed.
func stream(comm collectives.Comm, dst, size, messages, nb int) error {
	out, in := buffers(nb, size), buffers(nb, size)
	reqs := make([]collectives.Request, p2pInflight)
	uses := make([]int, p2pInflight)
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
				b := out[(i+p2pInflight*uses[i])%nb]
				var err error
				if reqs[i], err = comm.Isend(b, dst, tagBench); err != nil {
					return err
				}
				uses[i]++
				sent, progress = sent+1, true
			}
		}
		ok, st, err := comm.Iprobe()
		if err != nil {
			return err
		}
		if ok {
			if st.Len != size {
				return fmt.Errorf("rt: rank %d sent a %d-byte message during the bandwidth test", st.Source, st.Len)
			}
			if err := comm.Recv(in[got%nb], st.Source, st.Tag); err != nil {
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

// buffers returns n buffers of size bytes, their pages touched.
func buffers(n, size int) [][]byte {
	bs := make([][]byte, n)
	for i := range bs {
		bs[i] = make([]byte, size)
		for j := 0; j < size; j += 4096 {
			bs[i][j] = 1
		}
	}
	return bs
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
