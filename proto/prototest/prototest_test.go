package prototest

import (
	"path/filepath"
	"testing"
)

func TestData(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test scripts: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			env := &Env{}
			RunFile(t, path, env.Handle)
		})
	}
}

func TestWindowData(t *testing.T) {
	files, err := filepath.Glob("testdata/window/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no window scripts: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			env := &WindowEnv{}
			RunFile(t, path, env.Handle)
		})
	}
}
