package prototest

import (
	"path/filepath"
	"testing"

	"github.com/brandrt/brandrt/internal/script"
	"github.com/brandrt/brandrt/internal/script/scripttest"
)

func TestData(t *testing.T) {
	runScripts(t, "testdata/*.txt", func() func(*script.Cmd) string { return (&Env{}).Handle })
}

func TestWindowData(t *testing.T) {
	runScripts(t, "testdata/window/*.txt", func() func(*script.Cmd) string { return (&WindowEnv{}).Handle })
}

// runScripts runs every script matching glob, each through a new
// environment's handler.
func runScripts(t *testing.T, glob string, env func() func(*script.Cmd) string) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no test scripts %s: %v", glob, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) { scripttest.RunFile(t, path, env()) })
	}
}
