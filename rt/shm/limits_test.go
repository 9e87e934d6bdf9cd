package shm

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
	"github.com/brandrt/brandrt/rt"
)

// The rank of TestAttachOutOfDescriptors: TestHelperFewFiles in a
// process of its own, whose descriptors are limited as a container's
// `ulimit -n 256` limits them.
const (
	envFewFiles     = "BRANDRT_SHM_FEWFILES"      // the attach directory
	envFewFilesStop = "BRANDRT_SHM_FEWFILES_STOP" // a file: the rank stops once it exists
	fewFiles        = 256
	crowd           = 300
)

// TestAttachOutOfDescriptors: a rank whose process may open 256 files
// (RLIMIT_NOFILE, soft and hard) gets 300 clients at once. Those it has
// no descriptor for are refused with the rank's reason, which names the
// limit and how to raise it, instead of waiting for a welcome that never
// comes; the rank keeps accepting, and once the 300 left, one more client
// attaches and reads.
func TestAttachOutOfDescriptors(t *testing.T) {
	dir, stop := t.TempDir(), filepath.Join(t.TempDir(), "stop")
	rank := startFewFiles(t, dir, stop)
	clients, refusals, others := attachCrowd(dir)
	for _, c := range clients {
		c.Close()
	}
	t.Logf("%d clients welcomed, %d refused, %d failed otherwise", len(clients), len(refusals), len(others))
	if len(others) > 0 {
		t.Errorf("%d clients failed without the rank's reason, the first: %v", len(others), others[0])
	}
	if len(refusals) == 0 {
		t.Errorf("no client refused with the rank's reason: %d welcomed, under %d descriptors", len(clients), fewFiles)
	} else {
		t.Logf("a refused client: %v", refusals[0])
	}
	if err := readAfterCrowd(dir); err != nil {
		t.Errorf("a client after the crowd left: %v", err)
	}
	out := rank()
	if n := strings.Count(out, "too many open files"); n == 0 || n > 2 {
		t.Errorf("the rank logged the refusals %d times, want a line or two:\n%s", n, out)
	}
	t.Logf("the rank logged:\n%s", lineWith(out, "brandrt: rank"))
}

// startFewFiles starts the rank in dir; the returned function stops it
// and returns what it wrote.
func startFewFiles(t *testing.T, dir, stop string) func() string {
	t.Helper()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		defer close(done)
		out, err = testkit.Run(2*time.Minute, []string{envFewFiles + "=" + dir, envFewFilesStop + "=" + stop},
			"/proc/self/exe", "-test.run=^TestHelperFewFiles$", "-test.count=1", "-test.v")
	}()
	var once sync.Once
	finish := func() string {
		once.Do(func() { _ = os.WriteFile(stop, nil, 0o600); <-done })
		if err != nil {
			t.Errorf("the rank: %v\n%s", err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { finish() })
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(filepath.Join(dir, SocketName)); err == nil {
			return finish
		}
		select {
		case <-done:
			t.Fatalf("the rank ended before it listened: %v\n%s", err, out)
		default:
		}
		if time.Now().After(end) {
			t.Fatal("the rank did not listen within 30 s")
		}
	}
}

// attachCrowd attaches crowd clients at once and returns those welcomed,
// the errors of those the rank refused for want of descriptors, and the
// other errors.
func attachCrowd(dir string) (clients []*Client, refusals, others []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range crowd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Attach(dir)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				clients = append(clients, c)
			case strings.Contains(err.Error(), "too many open files") && strings.Contains(err.Error(), "ulimit -n"):
				refusals = append(refusals, err)
			default:
				others = append(others, err)
			}
		}()
	}
	wg.Wait()
	return clients, refusals, others
}

// readAfterCrowd attaches one client once the rank had time to see the
// crowd leave (a refusal meanwhile is tried again, for 5 s) and reads 50
// files.
func readAfterCrowd(dir string) error {
	end := time.Now().Add(5 * time.Second)
	for {
		err := readAll(dir, 0, 1, 50, 4)
		if err == nil || !strings.Contains(err.Error(), "too many open files") || time.Now().After(end) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHelperFewFiles is the rank of TestAttachOutOfDescriptors: it limits
// its descriptors to fewFiles, listens in $BRANDRT_SHM_FEWFILES and serves
// files from a fake loop until the file $BRANDRT_SHM_FEWFILES_STOP exists.
func TestHelperFewFiles(t *testing.T) {
	dir := os.Getenv(envFewFiles)
	if dir == "" {
		t.Skip("the rank of TestAttachOutOfDescriptors")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: fewFiles, Max: fewFiles}); err != nil {
		t.Fatal(err)
	}
	reqs := make(chan rt.ClientEvent, 64)
	go fakeLoop(reqs)
	defer close(reqs)
	s, err := Listen(dir, 0, Options{Slots: 4, Data: 256 << 10, Events: reqs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for end := time.Now().Add(100 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(os.Getenv(envFewFilesStop)); err == nil {
			return
		}
	}
	t.Error("not stopped within 100 s")
}

// lineWith returns the first line of out that contains s, or "".
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
