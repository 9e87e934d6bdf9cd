package rt

import (
	"context"
	"sync"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// consumers read a rank's whole trace in-process, as training clients
// would: consumer i asks for positions i, i+W, i+2W, … keeping depth
// requests in flight, and checks every file it gets.
type consumers struct {
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	total consumerStats
}

// consumerStats is what consumers saw: files whose bytes do not match
// the checksum their owner's index keeps, and the time spent waiting.
type consumerStats struct {
	checksumErrors int64
	stall          time.Duration
}

func (s *consumerStats) add(t consumerStats) {
	s.checksumErrors += t.checksumErrors
	s.stall += t.stall
}

// startConsumers starts w consumers over positions [from, length); done
// is closed when all have finished.
func startConsumers(ctx context.Context, w, depth int, epoch uint32, from, length int, pause time.Duration, reqs chan<- ClientEvent) *consumers {
	c := &consumers{done: make(chan struct{})}
	for i := range w {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			s := c.consume(ctx, epoch, int32(from+i), int32(w), depth, int32(length), reqs)
			c.mu.Lock()
			c.total.add(s)
			c.mu.Unlock()
		}()
	}
	go func() { c.wg.Wait(); close(c.done) }()
	return c
}

func (c *consumers) consume(ctx context.Context, epoch uint32, first, step int32, depth int, length int32, reqs chan<- ClientEvent) consumerStats {
	var s consumerStats
	reply := make(chan Delivery, depth)
	next, inflight := first, 0
	for {
		for ; inflight < depth && next < length; next += step {
			select {
			case reqs <- Ask{Epoch: epoch, Sn: next, Reply: reply}:
				inflight++
			case <-ctx.Done():
				return s
			}
		}
		if inflight == 0 {
			return s
		}
		t := time.Now()
		select {
		case d := <-reply:
			s.stall += time.Since(t)
			inflight--
			c.check(&s, &d)
		case <-ctx.Done():
			return s
		}
	}
}

// check verifies a delivery's bytes (the loop counts deliveries, and
// files left out as damaged).
func (c *consumers) check(s *consumerStats, d *Delivery) {
	defer d.Release()
	if d.Err == nil && d.Damaged == "" && chunk.Checksum(d.Data) != d.CRC {
		s.checksumErrors++
	}
}
