package rt

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPeerTimeout: a peer quiet for --peer-timeout ends the job then, to
// the check (every 250 ms), also when --peer-timeout is shorter than
// --peer-warn, and the message says how long the peer was quiet, which
// is the flag's value. The rank warns every --peer-warn before that. A
// fake clock moves in steps of 50 ms; rank 0 of 2 waits for rank 1.
func TestPeerTimeout(t *testing.T) {
	for _, c := range []struct {
		warn, timeout time.Duration
		warnings      int
	}{
		{30 * time.Second, 20 * time.Second, 0}, // the issue's: it ended after 30 s, "for 30s … (--peer-timeout 20s)"
		{30 * time.Second, time.Second, 0},
		{5 * time.Second, 5 * time.Second, 0},
		{2 * time.Second, 7 * time.Second, 3},
	} {
		t.Run(fmt.Sprintf("warn %v timeout %v", c.warn, c.timeout), func(t *testing.T) {
			var log strings.Builder
			cfg := defaultJob()
			cfg.PeerWarn, cfg.PeerTimeout, cfg.Log = c.warn, c.timeout, &log
			clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			w := newPeerWatch(&Node{cfg: cfg.Config, site: cfg.Site, me: 0, size: 2})
			w.now = func() time.Time { return clock }
			start := clock
			var err error
			for err == nil && clock.Sub(start) <= 2*c.warn+c.timeout {
				err = w.check(func(r int) bool { return r == 1 }, "in epoch 1")
				clock = clock.Add(50 * time.Millisecond)
			}
			ended := clock.Add(-50 * time.Millisecond).Sub(start)
			if err == nil || ended < c.timeout || ended >= c.timeout+peerCheckEvery {
				t.Fatalf("ended after %v with %v, want %v to %v", ended, err, c.timeout, c.timeout+peerCheckEvery)
			}
			want := fmt.Sprintf("sent nothing for %v while this rank waited in epoch 1 (--peer-timeout %v)", c.timeout, c.timeout)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v\nwant %q", err, want)
			}
			if n := strings.Count(log.String(), "sent nothing since"); n != c.warnings {
				t.Errorf("%d warnings, want %d:\n%s", n, c.warnings, log.String())
			}
		})
	}
}
