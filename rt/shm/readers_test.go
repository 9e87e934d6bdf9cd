package shm

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/rt"
)

// TestMoreReadersThanCounted: with three clients reading at once and a
// footprint that counts two readers, the rank says so once, naming how
// many read and what each more may hold; with three counted, it says
// nothing.
func TestMoreReadersThanCounted(t *testing.T) {
	for _, counted := range []int{2, 3} {
		t.Run(strings.Repeat("r", counted), func(t *testing.T) {
			reqs := make(chan rt.ClientEvent, 64)
			go fakeLoop(reqs)
			log := new(testkit.Log)
			s, err := Listen(t.TempDir(), 0, Options{Slots: 8, Data: 1 << 20, Events: reqs, Readers: counted, ReaderBytes: 3 << 20, Log: log})
			if err != nil {
				close(reqs)
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); close(reqs) })
			// each client holds its first reply until all three have one,
			// so that they read at once
			var started sync.WaitGroup
			started.Add(3)
			errs := make(chan error, 3)
			for i := range 3 {
				go func() {
					errs <- readOnce(s.Dir(), int32(i), &started)
				}()
			}
			for range 3 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			want := "brandrt: rank 0: 3 clients read files at once, more than the 2 readers its footprint counts (--readers): each more may hold up to 3.0 MiB of files answered in place beyond its footprint; serve with --readers 3 or more\n"
			got := log.String()
			switch n := strings.Count(got, "clients read files at once"); {
			case counted == 2 && (n != 1 || !strings.Contains(got, want)):
				t.Errorf("three readers, two counted: want once\n%s\ngot\n%s", want, got)
			case counted == 3 && n != 0:
				t.Errorf("three readers, three counted: want nothing said, got\n%s", got)
			}
		})
	}
}

// readOnce attaches, asks for position sn and reads the reply, then
// waits for the others of started before it lets go.
func readOnce(dir string, sn int32, started *sync.WaitGroup) error {
	c, err := Attach(dir)
	if err != nil {
		started.Done()
		return err
	}
	defer c.Close()
	if err := c.Request(1, sn); err != nil {
		started.Done()
		return err
	}
	rec, err := c.Next(5 * time.Second)
	started.Done()
	started.Wait()
	if err == nil {
		c.Release(rec)
	}
	return err
}
