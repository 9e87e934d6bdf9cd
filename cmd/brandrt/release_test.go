package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testOnly are the packages only tests may link: harnesses, fault
// injection, script runners and the testing package itself.
var testOnly = []string{
	"testing",
	"github.com/brandrt/brandrt/proto/prototest",
	"github.com/brandrt/brandrt/chunk/chunktest",
	"github.com/brandrt/brandrt/internal/script",
	"github.com/brandrt/brandrt/internal/script/scripttest",
	"github.com/brandrt/brandrt/internal/testkit",
}

// TestReleaseLinksNoTestCode: the brandrt binary, built as `make build`
// builds it, depends on no test-only package, and holds none of the
// tests' hooks (the environment variables of rt/job/hooks_on.go), which
// the tests' own build (binary, with the testhooks tag) does hold.
func TestReleaseLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range testOnly {
		if slices.Contains(deps, p) {
			t.Errorf("the binary links %s, a package only tests may use", p)
		}
	}
	release := filepath.Join(t.TempDir(), "brandrt")
	if out, err := exec.Command("go", "build", "-o", release, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name, path string
		hooks      bool
	}{{"the release build", release, false}, {"the tests' build", binary(t), true}} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, hook := range []string{"BRANDRT_TEST_HOG", "BRANDRT_TEST_PANIC"} {
			if has := bytes.Contains(b, []byte(hook)); has != c.hooks {
				t.Errorf("%s: holds $%s: %v, want %v", c.name, hook, has, c.hooks)
			}
		}
	}
}
