package chunk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// FS is the file system the chunk store reads and writes through: the
// operating system's (OS), or in tests a fault-injecting wrapper of it
// (package chunktest).
type FS interface {
	// Open opens name for reading. With uncached, reads should not stay
	// in the page cache: O_DIRECT where the file system allows, else
	// each read is followed by posix_fadvise(DONTNEED).
	Open(name string, uncached bool) (File, error)
	// Create creates or truncates name for writing.
	Create(name string) (File, error)
	MkdirAll(dir string) error
	Rename(from, to string) error
	RemoveAll(path string) error
	ReadDir(dir string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	// SyncDir makes the entries of dir (renames, creations) durable.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.Writer
	// WriteAt writes over bytes already written (a chunk's header, last).
	io.WriterAt
	// Sync makes the written data durable.
	Sync() error
	// DropCache asks the OS to drop the file's cached pages.
	DropCache() error
	// Align is what reads need: their offset, length and buffer address
	// must be multiples of it (4096 for O_DIRECT, else 1).
	Align() int
	Close() error
}

// OS is the operating system's file system.
var OS FS = osFS{}

// OSNoDirect is the operating system's file system without O_DIRECT:
// uncached reads go through the page cache and drop what they brought in,
// as OS does on file systems that refuse O_DIRECT.
var OSNoDirect FS = osFS{noDirect: true}

// osFS is the operating system's file system; with noDirect it never asks
// for O_DIRECT.
type osFS struct{ noDirect bool }

// directAlign is the alignment O_DIRECT reads use: the page size, which is
// a multiple of every logical block size in practice.
const directAlign = 4096

func (o osFS) Open(name string, uncached bool) (File, error) {
	if uncached && !o.noDirect {
		fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
		if err == nil {
			return &osFile{f: os.NewFile(uintptr(fd), name), align: directAlign}, nil
		}
		if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EOPNOTSUPP) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		// The file system refuses O_DIRECT: read through the cache and
		// drop what each read brought in.
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, align: 1, dropAfterRead: uncached}, nil
}

func (osFS) Create(name string) (File, error) {
	f, err := CreateFile(name, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, align: 1}, nil
}

// CreateFile opens name with flag|O_CREATE (mode 0644 when it makes the
// file), and refuses a symbolic link there instead of following it:
// another user may have planted one, in a directory all may write to, at
// a name brandrt writes.
func CreateFile(name string, flag int) (*os.File, error) {
	f, err := os.OpenFile(name, flag|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &fs.PathError{Op: "create", Path: name, Err: errors.New("is a symbolic link; brandrt does not write through one (remove it)")}
	}
	return f, err
}

func (osFS) MkdirAll(dir string) error                 { return os.MkdirAll(dir, 0o755) }
func (osFS) Rename(from, to string) error              { return os.Rename(from, to) }
func (osFS) RemoveAll(path string) error               { return os.RemoveAll(path) }
func (osFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }
func (osFS) Stat(name string) (fs.FileInfo, error)     { return os.Stat(name) }
func (osFS) Lstat(name string) (fs.FileInfo, error)    { return os.Lstat(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type osFile struct {
	f             *os.File
	align         int
	dropAfterRead bool
}

func (o *osFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	if o.dropAfterRead && n > 0 {
		// DONTNEED drops only whole pages inside the range: cover the
		// partial pages at both ends too.
		lo := alignDown(off, directAlign)
		_ = fadvise(o.f, lo, alignUp(off+int64(n), directAlign)-lo, fadvDontNeed)
	}
	return n, err
}

func (o *osFile) Write(p []byte) (int, error) { return o.f.Write(p) }
func (o *osFile) WriteAt(p []byte, off int64) (int, error) {
	return o.f.WriteAt(p, off)
}
func (o *osFile) Sync() error      { return o.f.Sync() }
func (o *osFile) Align() int       { return o.align }
func (o *osFile) Close() error     { return o.f.Close() }
func (o *osFile) DropCache() error { return fadvise(o.f, 0, 0, fadvDontNeed) }

const fadvDontNeed = 4 // POSIX_FADV_DONTNEED on Linux

// fadvise is posix_fadvise(2); length 0 means to the end of the file.
func fadvise(f *os.File, off, length int64, advice int) error {
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), uintptr(off), uintptr(length), uintptr(advice), 0, 0)
	if errno != 0 {
		return fmt.Errorf("fadvise %s: %w", f.Name(), errno)
	}
	return nil
}

// join joins slash-separated path elements with the OS separator.
func join(elem ...string) string { return filepath.Join(elem...) }
