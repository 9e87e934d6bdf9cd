package launch

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLifelineSurvivesADeadPipe: a process on a lifeline whose standard
// output nobody reads any more (its launcher died) gets an error from
// its writes there, not SIGPIPE, and so goes on to clean up. Run without
// the lifeline, the same child dies of SIGPIPE, which shows the test can
// fail.
func TestLifelineSurvivesADeadPipe(t *testing.T) {
	if os.Getenv("BRANDRT_LIFELINE_CHILD") != "" {
		if os.Getenv("BRANDRT_LIFELINE_CHILD") == "tied" {
			if err := (Env{Launcher: "openmpi"}).Lifeline(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
		_, err := fmt.Fprintln(os.Stdout, "training processes attach at …")
		fmt.Fprintf(os.Stderr, "write: %v\n", err)
		os.Exit(0)
	}
	for _, tc := range []struct {
		child string
		ok    bool
	}{{"tied", true}, {"untied", false}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^TestLifelineSurvivesADeadPipe$")
		cmd.Env = append(os.Environ(), "BRANDRT_LIFELINE_CHILD="+tc.child)
		cmd.Stdout = w
		var errs strings.Builder
		cmd.Stderr = &errs
		err = cmd.Run()
		w.Close()
		t.Logf("%s: %v: %s", tc.child, err, errs.String())
		if ok := err == nil && strings.Contains(errs.String(), "broken pipe"); ok != tc.ok {
			t.Errorf("%s: exit %v, stderr %q", tc.child, err, errs.String())
		}
	}
}
