// Package chunktest helps test code that reads and writes through
// chunk.FS: a file system wrapper that injects errors and corruption
// (New, Rule), and FlipByte, which damages a file on disk. Only tests
// import it; the generator of datasets is package chunk/synth.
package chunktest

import (
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/brandrt/brandrt/chunk"
)

// Op names a file system operation a Rule can match.
type Op string

// Operations.
const (
	OpOpen    Op = "open"
	OpCreate  Op = "create"
	OpRead    Op = "read"
	OpWrite   Op = "write"
	OpSync    Op = "sync"
	OpRename  Op = "rename"
	OpReadDir Op = "readdir"
	OpStat    Op = "stat"
)

// Rule makes matching operations fail or return damaged bytes.
type Rule struct {
	Op Op
	// Path matches when the operation's path contains it.
	Path string
	// Err is returned by matching operations (for writes: once After
	// bytes were written to the file).
	Err error
	// After lets a write rule accept this many bytes of each matching
	// file first: a disk that fills up.
	After int64
	// Flip, for reads with a nil Err, inverts the byte at this offset of
	// the file in what each matching read returns.
	Flip int64
	// Times, when positive, makes the rule apply to its first Times
	// matching operations only: a fault that does not repeat.
	Times int
}

// ErrorFS wraps an FS and applies rules to its operations.
type ErrorFS struct {
	chunk.FS
	mu    sync.Mutex
	rules []Rule
	used  map[int]int // per rule, the operations it applied to
}

// New wraps fsys.
func New(fsys chunk.FS, rules ...Rule) *ErrorFS { return &ErrorFS{FS: fsys, rules: rules} }

// Add adds a rule.
func (e *ErrorFS) Add(r Rule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rules = append(e.rules, r)
}

func (e *ErrorFS) match(op Op, path string) *Rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.rules {
		r := &e.rules[i]
		if r.Op != op || !strings.Contains(path, r.Path) || r.Times > 0 && e.used[i] >= r.Times {
			continue
		}
		if e.used == nil {
			e.used = make(map[int]int)
		}
		e.used[i]++
		return r
	}
	return nil
}

func pathErr(op Op, path string, err error) error {
	return &fs.PathError{Op: string(op), Path: path, Err: err}
}

// Open applies open rules, then wraps the file for read rules.
func (e *ErrorFS) Open(name string, uncached bool) (chunk.File, error) {
	if r := e.match(OpOpen, name); r != nil {
		return nil, pathErr(OpOpen, name, r.Err)
	}
	f, err := e.FS.Open(name, uncached)
	if err != nil {
		return nil, err
	}
	return &file{File: f, fs: e, name: name}, nil
}

// Create applies create rules, then wraps the file for write rules.
func (e *ErrorFS) Create(name string) (chunk.File, error) {
	if r := e.match(OpCreate, name); r != nil {
		return nil, pathErr(OpCreate, name, r.Err)
	}
	f, err := e.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &file{File: f, fs: e, name: name}, nil
}

// Rename applies rename rules (matching the source).
func (e *ErrorFS) Rename(from, to string) error {
	if r := e.match(OpRename, from); r != nil {
		return &os.LinkError{Op: string(OpRename), Old: from, New: to, Err: r.Err}
	}
	return e.FS.Rename(from, to)
}

// ReadDir applies readdir rules.
func (e *ErrorFS) ReadDir(dir string) ([]fs.DirEntry, error) {
	if r := e.match(OpReadDir, dir); r != nil {
		return nil, pathErr(OpReadDir, dir, r.Err)
	}
	return e.FS.ReadDir(dir)
}

// Lstat applies stat rules.
func (e *ErrorFS) Lstat(name string) (fs.FileInfo, error) {
	if r := e.match(OpStat, name); r != nil {
		return nil, pathErr(OpStat, name, r.Err)
	}
	return e.FS.Lstat(name)
}

type file struct {
	chunk.File
	fs      *ErrorFS
	name    string
	written int64
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	r := f.fs.match(OpRead, f.name)
	if r != nil && r.Err != nil {
		return 0, pathErr(OpRead, f.name, r.Err)
	}
	n, err := f.File.ReadAt(p, off)
	if r != nil && r.Flip >= off && r.Flip < off+int64(n) {
		p[r.Flip-off] ^= 0xff
	}
	return n, err
}

// Scatters says whether the wrapped file reads into several buffers at
// once (chunk.Scatterer).
func (f *file) Scatters() bool {
	sc, ok := f.File.(chunk.Scatterer)
	return ok && sc.Scatters()
}

// ReadAtv applies read rules as ReadAt does: an error, or the flipped
// byte in whichever buffer holds it.
func (f *file) ReadAtv(bufs [][]byte, off int64) (int, error) {
	r := f.fs.match(OpRead, f.name)
	if r != nil && r.Err != nil {
		return 0, pathErr(OpRead, f.name, r.Err)
	}
	n, err := f.File.(chunk.Scatterer).ReadAtv(bufs, off)
	at := off
	for _, b := range bufs {
		if r != nil && r.Flip >= at && r.Flip < at+int64(len(b)) && r.Flip < off+int64(n) {
			b[r.Flip-at] ^= 0xff
		}
		at += int64(len(b))
	}
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	r := f.fs.match(OpWrite, f.name)
	if r == nil {
		return f.File.Write(p)
	}
	room := max(r.After-f.written, 0)
	if int64(len(p)) <= room {
		n, err := f.File.Write(p)
		f.written += int64(n)
		return n, err
	}
	n, _ := f.File.Write(p[:room])
	f.written += int64(n)
	return n, pathErr(OpWrite, f.name, r.Err)
}

// WriteAt fails under a write rule when it would write past the rule's
// After bytes.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if r := f.fs.match(OpWrite, f.name); r != nil && off+int64(len(p)) > r.After {
		return 0, pathErr(OpWrite, f.name, r.Err)
	}
	return f.File.WriteAt(p, off)
}

func (f *file) Sync() error {
	if r := f.fs.match(OpSync, f.name); r != nil {
		return pathErr(OpSync, f.name, r.Err)
	}
	return f.File.Sync()
}
