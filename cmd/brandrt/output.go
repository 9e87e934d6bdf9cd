package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Output paths. A path the user gives brandrt to write at (--stats-json,
// --order-out, inspect --out, DIR/cpu.pprof and DIR/mem.pprof of the
// profiles) is, as lookOut sees it:
//   - "-": standard output;
//   - a character device, FIFO or socket, a symbolic link to one, or a
//     link to a descriptor of this process (/dev/stdout, /dev/fd/1,
//     /proc/self/fd/1): written into as it is. Nothing is replaced, so
//     --force is not needed, and it never turns one into a file;
//   - nothing, a regular file, or a symbolic link to one or to nothing:
//     a new regular file takes its place (where the flag says so, one
//     that exists only with --force);
//   - anything else (a directory, a block device, a link to either):
//     refused, naming the path and what it is.
//
// A new file is made under a temporary name of its own (O_EXCL) in the
// same directory and renamed into place, which replaces a link instead
// of writing through it: another user may have planted one in a shared
// directory (/tmp, sticky and writable by all) pointing at a file of
// ours. For the same reason, what another user put in such a directory
// is never written into: a link there is replaced, a device, FIFO or
// socket refused.

// outputNote is what the help says of every output path.
const outputNote = "- is standard output; a character device, FIFO or socket, or a link to one (/dev/stdout, /dev/null), is written into; a regular file is replaced; anything else is refused"

// forceNote is the help of --force for the output path of flag.
func forceNote(flag string) string {
	return "replace the " + flag + " file if it exists (a regular file or a link; a device, FIFO or socket is written into without it, never replaced)"
}

// place is what an output path names, and so how it is written.
type place struct {
	name   string
	stdout bool // "-"
	into   bool // written into: a device, FIFO, socket or descriptor
	fd     int  // with into, ≥ 0: the descriptor of this process it names
	exists bool // a regular file or a link is there, to be replaced
}

// lookOut says what is at output path name; an error refuses it.
func lookOut(name string) (place, error) {
	p := place{name: name, fd: -1}
	if name == "-" {
		p.stdout = true
		return p, nil
	}
	lfi, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	p.exists = true
	link := lfi.Mode()&fs.ModeSymlink != 0
	if lfi.Mode().IsRegular() {
		return p, nil
	}
	if planted(name, lfi) { // a link there is replaced; anything else refused
		if link {
			return p, nil
		}
		return p, fmt.Errorf("%s is %s of uid %d in a directory all may write to: brandrt does not write into it", name, kind(lfi.Mode()), owner(lfi))
	}
	if fd, ok := ownDescriptor(name); ok {
		return place{name: name, into: true, fd: fd}, nil
	}
	fi, err := os.Stat(name)
	if err != nil && link { // a link to nothing: replaced
		return p, nil
	}
	if err != nil {
		return p, err
	}
	return p.through(lfi, fi)
}

// through says how p is written, given what it is (lfi) and what it
// leads to (fi).
func (p place) through(lfi, fi fs.FileInfo) (place, error) {
	switch fi.Mode().Type() {
	case 0: // a link to a regular file: replaced
		return p, nil
	case fs.ModeDevice | fs.ModeCharDevice, fs.ModeNamedPipe, fs.ModeSocket:
		p.into, p.exists = true, false
		return p, nil
	}
	what := kind(fi.Mode())
	if lfi.Mode()&fs.ModeSymlink != 0 {
		what = "a symbolic link to " + what
	}
	return p, fmt.Errorf("%s is %s: brandrt writes into a character device, FIFO or socket, or replaces a regular file, nothing else", p.name, what)
}

// kind names a file's type, for messages.
func kind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symbolic link"
	case fs.ModeDevice:
		return "a block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	case fs.ModeNamedPipe:
		return "a FIFO"
	case fs.ModeSocket:
		return "a socket"
	}
	return "a file of type " + m.Type().String()
}

// planted reports whether fi, found at name, was put there by another
// user in a directory all may write to (sticky, as /tmp): neither this
// process's user nor the directory's owner owns it.
func planted(name string, fi fs.FileInfo) bool {
	d, err := os.Stat(filepath.Dir(name))
	if err != nil || d.Mode()&fs.ModeSticky == 0 || d.Mode().Perm()&0o002 == 0 {
		return false
	}
	return owner(fi) != os.Geteuid() && owner(fi) != owner(d)
}

// owner returns the user id that owns fi.
func owner(fi fs.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }

// ownDescriptor returns the descriptor of this process that name names,
// itself or through symbolic links: /dev/stdout → /proc/self/fd/1 names
// 1 (which may be a regular file, a socket, or closed).
func ownDescriptor(name string) (int, bool) {
	for range 40 { // the kernel's limit of links followed
		if fd, ok := descriptorPath(name); ok {
			return fd, true
		}
		target, err := os.Readlink(name)
		if err != nil {
			return -1, false
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(name), target)
		}
		name = target
	}
	return -1, false
}

// descriptorPath parses name as a descriptor of this process:
// /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N or /proc/PID/fd/N
// with this process's PID.
func descriptorPath(name string) (int, bool) {
	dir, base := filepath.Split(filepath.Clean(name))
	fd, err := strconv.Atoi(base)
	if err != nil || fd < 0 {
		return -1, false
	}
	switch filepath.Clean(dir) {
	case "/dev/fd", "/proc/self/fd", "/proc/thread-self/fd", fmt.Sprintf("/proc/%d/fd", os.Getpid()):
		return fd, true
	}
	return -1, false
}

// open opens p, which is written into: a descriptor is duplicated, a
// device or FIFO opened for writing, a socket connected to.
func (p place) open() (io.WriteCloser, error) {
	if p.fd >= 0 {
		fd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(p.fd), syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			return nil, &fs.PathError{Op: fmt.Sprintf("write to descriptor %d through", p.fd), Path: p.name, Err: errno}
		}
		return os.NewFile(fd, p.name), nil
	}
	f, err := os.OpenFile(p.name, os.O_WRONLY|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ENXIO) { // a socket: open cannot, connect does
		return dialUnix(p.name)
	}
	return f, err
}

// dialUnix connects to the Unix socket at name: a stream socket, or
// else a datagram one.
func dialUnix(name string) (io.WriteCloser, error) {
	c, err := net.Dial("unix", name)
	if errors.Is(err, syscall.EPROTOTYPE) {
		c, err = net.Dial("unixgram", name)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "connect", Path: name, Err: errors.Unwrap(err)}
	}
	return c, nil
}

// checkOut looks at the output path of flag, name, before anything is
// written there: what lookOut refuses is refused, and so is a regular
// file (or a link) without --force.
func checkOut(c *cli.Context, flag, name string) (place, error) {
	p, err := lookOut(name)
	if err == nil && p.exists && !c.Bool("force") {
		err = fmt.Errorf("%s exists; pass --force to overwrite it", name)
	}
	return p, flagError(flag, err)
}

// flagError names flag in err, if any.
func flagError(flag string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", flag, err)
}

// writeOut writes data at the output path of flag, name: to standard
// output, into what is written into, or to a new file renamed into place
// once written whole; one that exists is replaced only with --force.
func writeOut(c *cli.Context, flag, name string, data []byte) error {
	p, err := checkOut(c, flag, name)
	switch {
	case err != nil:
		return err
	case p.stdout:
		_, err = c.App.Writer.Write(data)
		return err
	case p.into:
		return flagError(flag, writeInto(p, data))
	}
	return flagError(flag, replaceFile(name, data))
}

// writeInto writes data into p and closes it.
func writeInto(p place, data []byte) error {
	w, err := p.open()
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return errors.Join(err, w.Close())
}

// replaceFile writes data to a new file renamed to name.
func replaceFile(name string, data []byte) error {
	tmp, err := createTemp(name)
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// createOut opens the output path of flag, name, for writing as it goes
// (statistics, profiles): standard output, what is written into, or a
// new file renamed into place at once, replacing a regular file without
// --force. The caller closes it.
func createOut(c *cli.Context, flag, name string) (io.WriteCloser, error) {
	p, err := lookOut(name)
	switch {
	case err != nil:
		return nil, flagError(flag, err)
	case p.stdout:
		return nopCloser{c.App.Writer}, nil
	case p.into:
		w, err := p.open()
		return w, flagError(flag, err)
	}
	f, err := createTemp(name)
	if err != nil {
		return nil, flagError(flag, err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, flagError(flag, err)
	}
	return f, nil
}

// nopCloser is standard output as an output: closing it leaves it open.
type nopCloser struct{ io.Writer }

// Close does nothing.
func (nopCloser) Close() error { return nil }

// createTemp creates a new file, mode 0644, beside name; an error names
// name.
func createTemp(name string) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp-")
	if pe := new(fs.PathError); errors.As(err, &pe) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: pe.Err}
	}
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// startProfiles starts a CPU profile written to cpuDir/cpu.pprof and a
// heap profile written to memDir/mem.pprof when it stops, each when its
// directory is not "" (and made if missing); call the result to stop
// them.
func startProfiles(c *cli.Context, cpuDir, memDir string) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var first error
		for _, s := range stops {
			if err := s(); first == nil {
				first = err
			}
		}
		return first
	}
	if cpuDir != "" {
		w, err := openProfile(c, "--cpuprofile", cpuDir, "cpu.pprof")
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(w); err != nil {
			w.Close()
			return nil, flagError("--cpuprofile", err)
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return w.Close() })
	}
	if memDir != "" {
		w, err := openProfile(c, "--memprofile", memDir, "mem.pprof")
		if err != nil {
			stop()
			return nil, err
		}
		runtime.MemProfileRate = 4096
		stops = append(stops, func() error {
			return errors.Join(pprof.Lookup("heap").WriteTo(w, 0), w.Close())
		})
	}
	return stop, nil
}

// openProfile opens dir/name, where flag's profile goes, as an output
// path; dir is made if missing.
func openProfile(c *cli.Context, flag, dir, name string) (io.WriteCloser, error) {
	if dir == "-" {
		return nil, fmt.Errorf("%s takes a directory (the profile is DIR/%s), not - (standard output)", flag, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, flagError(flag, err)
	}
	return createOut(c, flag, filepath.Join(dir, name))
}
