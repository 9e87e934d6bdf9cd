package chunk

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// StorageError is a file of the dataset that could not be reached: its
// open, stat or read failed (it is missing, not readable by this user,
// the device or network file system answered EIO or ESTALE, a mount is
// gone). It is the storage's fault, not the data's, and it may pass: a
// network file system's server failing over, a mount coming back. Bytes
// that were read and are wrong are damage (Damage, ErrCorrupt) instead.
type StorageError struct {
	// Of says whose file it is ("shard 1 chunk 7"), File is its path, Op
	// what failed ("open", "read", "stat"), and Err the system's error,
	// without the path.
	Of, File, Op string
	Err          error
}

func (e *StorageError) Error() string {
	of := ""
	if e.Of != "" {
		of = e.Of + ": "
	}
	return fmt.Sprintf("chunk: %sstorage unreachable: %s %s: %v%s", of, e.Op, e.File, e.Err, errnoSuffix(e.Err))
}

// Unwrap returns the system's error.
func (e *StorageError) Unwrap() error { return e.Err }

// Errno names the system's error number (ENOENT, EIO, ESTALE, …), or ""
// when the error carries none.
func (e *StorageError) Errno() string {
	var no syscall.Errno
	if errors.As(e.Err, &no) {
		if name := unix.ErrnoName(no); name != "" {
			return name
		}
		return fmt.Sprintf("errno %d", int(no))
	}
	return ""
}

// errnoSuffix is " (ENOENT)" for an error carrying an errno, or "".
func errnoSuffix(err error) string {
	if name := (&StorageError{Err: err}).Errno(); name != "" {
		return " (" + name + ")"
	}
	return ""
}

// Unreachable reports whether err says that storage could not be
// reached (a StorageError), as opposed to damaged data or a bug.
func Unreachable(err error) bool {
	var se *StorageError
	return errors.As(err, &se)
}

// storageError wraps the error of op on chunk c's file, dropping its
// *PathError (StorageError names the path).
func (s *Shard) storageError(c int, op string, err error) *StorageError {
	return &StorageError{Of: fmt.Sprintf("shard %d chunk %d", s.idx.rank, c), File: s.path(c), Op: op, Err: UnwrapPath(err)}
}
