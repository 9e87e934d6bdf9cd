package chunk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
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

// Scatterer is a File that can read into several buffers in one request
// (preadv), at any address and length: ReadAtv reads len of them all from
// off on, as ReadAt reads one (fewer bytes only with an error, io.EOF at
// the file's end). Scatters says whether this file can: an osFile can
// when it reads through the page cache, or with O_DIRECT on a file
// system that needs no alignment for it (FUSE, NFS); a local disk's
// O_DIRECT needs aligned buffers, and cannot.
type Scatterer interface {
	ReadAtv(bufs [][]byte, off int64) (int, error)
	Scatters() bool
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
			return &osFile{f: os.NewFile(uintptr(fd), name), align: directAlign, scatter: unalignedDirect(fd)}, nil
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
	return &osFile{f: f, align: 1, dropAfterRead: uncached, scatter: true}, nil
}

// File systems whose O_DIRECT reads take any offset, length and buffer
// address (statfs(2) f_type): the kernel hands FUSE's and NFS's direct
// reads to their servers, with no block device to align to. (Checked on
// sshfs: preadv of unaligned buffers at an odd offset.)
const (
	fuseMagic = 0x65735546
	nfsMagic  = 0x6969
)

// unalignedDirect reports whether fd, open with O_DIRECT, reads into
// buffers of any alignment.
func unalignedDirect(fd int) bool {
	var st syscall.Statfs_t
	if syscall.Fstatfs(fd, &st) != nil {
		return false
	}
	return st.Type == fuseMagic || st.Type == nfsMagic
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
	scatter       bool // see Scatterer
}

func (o *osFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	o.dropRead(off, n)
	return n, err
}

// dropRead drops from the page cache the n bytes just read from off, if
// reads should not stay there.
func (o *osFile) dropRead(off int64, n int) {
	if o.dropAfterRead && n > 0 {
		// DONTNEED drops only whole pages inside the range: cover the
		// partial pages at both ends too.
		lo := alignDown(off, directAlign)
		_ = fadvise(o.f, lo, alignUp(off+int64(n), directAlign)-lo, fadvDontNeed)
	}
}

// iovMax is the most buffers one preadv takes (IOV_MAX on Linux).
const iovMax = 1024

func (o *osFile) Scatters() bool { return o.scatter }

func (o *osFile) ReadAtv(bufs [][]byte, off int64) (int, error) {
	if !o.scatter {
		return 0, fmt.Errorf("read %s: %w: its file system needs aligned buffers", o.f.Name(), errors.ErrUnsupported)
	}
	bufs = slices.Clone(bufs) // the caller's stay as they are
	total := 0
	defer func() { o.dropRead(off, total) }()
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		n, err := unix.Preadv(int(o.f.Fd()), bufs[:min(len(bufs), iovMax)], off+int64(total))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return total, &fs.PathError{Op: "read", Path: o.f.Name(), Err: err}
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
		for n > 0 { // past what this call read: a short read goes on where it ended
			k := min(n, len(bufs[0]))
			bufs[0], n = bufs[0][k:], n-k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
	return total, nil
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
