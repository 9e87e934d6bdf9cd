package rt

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// consumers read a rank's whole trace in-process, as training clients
// would: consumer i asks for positions i, i+W, i+2W, … keeping depth
// requests in flight, and checks every file it gets.
type consumers struct {
	done   chan struct{}
	wg     sync.WaitGroup
	counts []atomic.Int32 // deliveries per file id, on this rank
	mu     sync.Mutex
	total  consumerStats
}

// consumerStats is what consumers saw.
type consumerStats struct {
	files, bytes, checksumErrors, failed int64
	crcSum, labelSum                     int64
	stall                                time.Duration
}

func (s *consumerStats) add(t consumerStats) {
	s.files += t.files
	s.bytes += t.bytes
	s.checksumErrors += t.checksumErrors
	s.failed += t.failed
	s.crcSum += t.crcSum
	s.labelSum += t.labelSum
	s.stall += t.stall
}

// startConsumers starts w consumers over positions [0, length); done is
// closed when all have finished.
func startConsumers(ctx context.Context, w, depth, length, files int, pause time.Duration, reqs chan<- Request) *consumers {
	c := &consumers{done: make(chan struct{}), counts: make([]atomic.Int32, files)}
	for i := range w {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			s := c.consume(ctx, int32(i), int32(w), depth, int32(length), reqs)
			c.mu.Lock()
			c.total.add(s)
			c.mu.Unlock()
		}()
	}
	go func() { c.wg.Wait(); close(c.done) }()
	return c
}

func (c *consumers) consume(ctx context.Context, first, step int32, depth int, length int32, reqs chan<- Request) consumerStats {
	var s consumerStats
	reply := make(chan Delivery, depth)
	next, inflight := first, 0
	for {
		for ; inflight < depth && next < length; next += step {
			select {
			case reqs <- Request{Sn: next, Reply: reply}:
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

// check counts a delivery and verifies its bytes.
func (c *consumers) check(s *consumerStats, d *Delivery) {
	defer d.Release()
	if d.Err != nil {
		s.failed++
		return
	}
	crc := chunk.Checksum(d.Data)
	if crc != d.CRC {
		s.checksumErrors++
	}
	s.files++
	s.bytes += int64(len(d.Data))
	s.crcSum += int64(crc)
	s.labelSum += int64(d.Label)
	c.counts[d.File].Add(1)
}
