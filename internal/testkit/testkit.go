// Package testkit holds what the tests of several packages share and the
// product does not use.
package testkit

import (
	"strings"
	"sync"
)

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
