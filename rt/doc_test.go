package rt

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDocNarrative asks go doc for the package's documentation: the
// narrative a newcomer reads first, with each of its sections.
func TestDocNarrative(t *testing.T) {
	out, err := exec.Command("go", "doc", ".").Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	for _, h := range []string{"# Files", "# A request's way", "# Goroutines and what each owns",
		"# Buffers: who holds them, who gives them back", "# Epochs", "# Failures"} {
		if !strings.Contains(string(out), "\n"+h+"\n") {
			t.Errorf("go doc ./rt has no section %q", h)
		}
	}
}
