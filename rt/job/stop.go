package job

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/brandrt/brandrt/collectives"
)

// stopper stops a rank that must end before its epochs are done: on
// SIGINT or SIGTERM (from the user, mpirun, a batch system, or the
// lifeline when mpirun died), or when its training fails.
type stopper struct {
	log    io.Writer
	comm   collectives.Comm
	cancel context.CancelCauseFunc
	served <-chan struct{} // closed once the rank is done serving
	// grace is how long a stopped rank may take to stop by itself.
	grace time.Duration
	once  sync.Once
	// unlink removes the attach point; train is the training started
	// beside the rank. Either may be nil; mu guards both.
	mu     sync.Mutex
	unlink func()
	train  *training
}

// interruptGrace is how long a stopped rank may take to stop by itself,
// once its training (if any) has stopped.
const interruptGrace = 3 * time.Second

// setUnlink and setTraining tell the stopper of the attach point and the
// training once they exist.
func (s *stopper) setUnlink(f func()) { s.mu.Lock(); s.unlink = f; s.mu.Unlock() }
func (s *stopper) setTraining(t *training) {
	s.mu.Lock()
	s.train = t
	s.mu.Unlock()
}

func (s *stopper) parts() (func(), *training) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unlink, s.train
}

// stop stops the rank for cause: the attach point goes at once (the rank
// may be killed, the job ending, before its deferred clean-ups run), the
// loop sees its context cancelled and returns, and finishJob ends the
// job. A rank blocked in a collective never sees the context; should it
// still run grace later, the job ends from here with code, the training
// killed first.
func (s *stopper) stop(cause error, code int) {
	s.once.Do(func() {
		unlink, _ := s.parts()
		if unlink != nil {
			unlink()
		}
		s.cancel(cause)
		go func() {
			select {
			case <-s.served:
			case <-time.After(s.grace):
				fmt.Fprintf(s.log, "brandrt: rank %d: %v; still busy %v later, ending the job\n", s.comm.Rank(), cause, s.grace)
				if _, t := s.parts(); t != nil {
					t.signal(syscall.SIGKILL)
				}
				abortJob(s.comm, code)
			}
		}()
	})
}

// onSignal waits for SIGINT or SIGTERM, passes it on to the training
// processes and stops the rank. It returns once the rank is done serving.
func (s *stopper) onSignal() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		s.stop(interrupted{sig}, 1) // first: the cause is the signal, and the attach point goes
		// Said at once: a rank blocked in a collective with a peer that
		// stopped first cannot say "stopped" before that peer ends the job.
		// Said after stop: with mpirun gone, nobody reads its pipe, and the
		// attach point goes first whatever the write does.
		fmt.Fprintf(s.log, "brandrt: rank %d: received %s; stopping\n", s.comm.Rank(), signalName(sig))
		if _, t := s.parts(); t != nil {
			t.forward(sig)
		}
	case <-s.served:
	}
}

// interrupted is the cause of a rank stopped by a signal.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string {
	return fmt.Sprintf("interrupted by %s; stopped", signalName(e.sig))
}

// interruptLinger is how long a rank stopped by a signal waits before it
// ends the job: a batch system signals every rank at once, and each
// says it was interrupted before the first to finish ends the others.
const interruptLinger = time.Second

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
