package rt

import (
	"strings"
	"testing"
)

// TestReaders: a process whose share overlaps one declared before it by a
// process still attached is refused every position, naming that one;
// disjoint shares and a process's own second declaration are not; the
// refusal ends when the first goes away. A process asking a position
// another asked is refused it.
func TestReaders(t *testing.T) {
	var rs readers
	rs.begin(12)
	refused := func(pid int, sn int32) string {
		if err := rs.refusal(0, Ask{Epoch: 1, Sn: sn, Pid: pid}, 1); err != nil {
			return err.Error()
		}
		rs.took(Ask{Sn: sn, Pid: pid})
		return ""
	}
	rs.session(Session{Share: Share{0, 2}, Delta: 1, Pid: 10})
	rs.session(Session{Share: Share{1, 2}, Delta: 1, Pid: 11})
	rs.session(Session{Share: Share{0, 2}, Delta: 1, Pid: 10}) // a second sampler of its own
	for _, c := range []struct {
		pid  int
		sn   int32
		want string
	}{
		{10, 0, ""}, {11, 1, ""}, {10, 2, ""},
		{12, 3, ""}, // no session, nobody asked 3
		{12, 0, "position 0 of epoch 1 was asked for already, by process 10: another training process (pid 10) already reads"},
		{0, 0, ""}, // the rank's own, or unknown: the machine judges it
	} {
		if got := refused(c.pid, c.sn); c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("pid %d position %d: %q, want %q", c.pid, c.sn, got, c.want)
		}
	}
	rs.session(Session{Share: Share{2, 4}, Delta: 1, Pid: 13}) // positions 2, 6, 10: in pid 10's share
	want := "another training process (pid 10) already reads share 0 of 2 of this rank's trace; process 13, which declared share 2 of 4"
	if got := refused(13, 6); !strings.Contains(got, want) {
		t.Errorf("an overlapping share: %q, want %q", got, want)
	}
	rs.session(Session{Share: Share{0, 2}, Delta: -1, Pid: 10})
	if got := refused(13, 6); !strings.Contains(got, want) {
		t.Errorf("pid 10 still has a session: %q", got)
	}
	rs.session(Session{Share: Share{0, 2}, Delta: -1, Pid: 10})
	if got := refused(13, 6); got != "" {
		t.Errorf("pid 10 went away: %q", got)
	}
	for _, c := range []struct {
		a, b Share
		want bool
	}{
		{Share{0, 2}, Share{1, 2}, false}, {Share{0, 2}, Share{2, 4}, true}, {Share{1, 2}, Share{2, 4}, false},
		{Share{1, 3}, Share{0, 2}, true}, {Share{0, 1}, Share{5, 7}, true}, {Share{0, 0}, Share{1, 2}, true},
	} {
		if got := overlap(c.a, c.b); got != c.want {
			t.Errorf("overlap(%v, %v) = %v", c.a, c.b, got)
		}
	}
}
