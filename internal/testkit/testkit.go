// Package testkit holds what the tests of several packages share and the
// product does not use.
package testkit

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// Entries returns the names of the entries of dir, hidden ones too.
func Entries(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Log is a log that several goroutines (the ranks of one process, a
// server's clients) write at once.
type Log struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
