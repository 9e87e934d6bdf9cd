package rt

import (
	"strings"
	"testing"
)

// Verdict names what an epoch's statistics prove, and Report ends with it.
func TestVerdict(t *testing.T) {
	whole := EpochStats{DatasetFiles: 10, FilesExpected: 10, FilesDelivered: 10}
	resumed := whole
	resumed.FilesBefore, resumed.FilesDelivered, resumed.FilesExpected = 4, 6, 6
	partial := EpochStats{DatasetFiles: 10, FilesExpected: 6, FilesDelivered: 6, FilesLeft: 2}
	skipped := whole
	skipped.FilesDelivered, skipped.FilesSkipped = 9, 1
	verified := whole
	verified.Verified = true
	early := EpochStats{DatasetFiles: 10, FilesExpected: 10, FilesDelivered: 3, EndedEarly: true}
	twice := whole
	twice.DuplicateDeliveries = 1
	for _, c := range []struct {
		s    EpochStats
		want string
	}{
		{whole, "check    every file delivered exactly once (the clients check the bytes)"},
		{resumed, "check    resumed: every position from the restart on answered, no file twice (4 delivered before the restart)"},
		{partial, "check    every position of the clients' traces answered, no file twice (they cover 6 of 10 files; 2 loaded and never asked for)"},
		{skipped, "check    every file delivered exactly once but the 1 left out as damaged"},
		{verified, "check    every file delivered exactly once; bytes and labels match the index"},
		{early, "ended    early, by a client: 3 of 10 files delivered; 0 loaded and never asked for"},
		{twice, "CHECK FAILED: 10 expected, 10 delivered, 1 duplicates, 0 missing, 0 failed, 0 checksum errors, 0 left in memory"},
	} {
		if got := c.s.Verdict(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
		var b strings.Builder
		c.s.Report(&b, 3)
		if !strings.HasSuffix(b.String(), "  "+c.want+"\n") || !strings.HasPrefix(b.String(), "epoch 0/3: ") {
			t.Errorf("report:\n%s", b.String())
		}
	}
}
