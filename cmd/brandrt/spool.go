package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// spool is an output written as it goes and put in place at the end
// (--order-out of serve and simulate); nothing of it stays in the
// process's memory.
//   - For a regular file, a link to one, or nothing at the name, it is a
//     file without a name (O_TMPFILE) in the name's directory, which
//     commit names and renames into place: a process that is killed
//     leaves nothing behind. Where the file system has no such files, a
//     new file beside the name (left there if the process is killed).
//   - For standard output and what is written into, it is an unlinked
//     file in $TMPDIR (in memory, where that is a tmpfs), which commit
//     copies there, so that it comes whole after the job's report.
type spool struct {
	c          *cli.Context
	flag, name string
	f          *os.File
	into       bool  // copied to what name is at the end, not renamed there
	nameless   bool  // f is O_TMPFILE's: commit links it to a name first
	err        error // the first write's that failed
}

// openSpool starts the output of flag at name; checkOut says what is
// refused.
func openSpool(c *cli.Context, flag, name string) (*spool, error) {
	p, err := checkOut(c, flag, name)
	if err != nil {
		return nil, err
	}
	s := &spool{c: c, flag: flag, name: name, into: p.stdout || p.into}
	switch {
	case s.into:
		if s.f, err = os.CreateTemp("", "brandrt-spool-"); err == nil {
			err = os.Remove(s.f.Name())
		}
	default:
		if s.f = namelessFile(name); s.f != nil {
			s.nameless = true
		} else {
			s.f, err = createTemp(name)
		}
	}
	if err != nil {
		if s.f != nil {
			s.f.Close()
		}
		return nil, flagError(flag, err)
	}
	return s, nil
}

// namelessFile opens a file without a name, mode 0644, in name's
// directory, or returns nil where the file system makes none.
func namelessFile(name string) *os.File {
	fd, err := unix.Open(filepath.Dir(name), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), name)
	if f.Chmod(0o644) != nil { // as createTemp's, whatever the umask
		f.Close()
		return nil
	}
	return f
}

// Write writes b; after a failed write it writes nothing more, and
// commit says why.
func (s *spool) Write(b []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.f.Write(b)
	s.err = err
	return n, err
}

// commit puts what was written in place. A write that failed, or a name
// that no longer is what it was when the spool opened (a file that came
// without --force, a FIFO that became a file), leaves what is there as
// it is, and says why.
func (s *spool) commit() error {
	defer s.f.Close()
	p, err := checkOut(s.c, s.flag, s.name)
	if err != nil {
		s.drop()
		return err
	}
	if now := p.stdout || p.into; now != s.into || s.err != nil {
		s.drop()
		if s.err != nil {
			return flagError(s.flag, s.err)
		}
		return flagError(s.flag, fmt.Errorf("%s changed while the job ran (it is %s now); the order was not written", s.name, map[bool]string{true: "a device, FIFO or socket", false: "a regular file, or nothing"}[now]))
	}
	if s.into {
		return flagError(s.flag, s.copyOut(p))
	}
	return flagError(s.flag, s.rename())
}

// abandon lets the spool go, writing nothing (a run that failed).
func (s *spool) abandon() {
	s.drop()
	s.f.Close()
}

// drop lets the spooled bytes go: a file beside the name is removed.
func (s *spool) drop() {
	if !s.into && !s.nameless {
		os.Remove(s.f.Name())
	}
}

// rename gives a nameless spool a name beside name, and renames the
// spool into place.
func (s *spool) rename() error {
	tmp := s.f.Name()
	if s.nameless {
		var err error
		if tmp, err = s.link(); err != nil {
			return err
		}
	}
	err := s.f.Close()
	if err == nil {
		err = os.Rename(tmp, s.name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// link names the nameless spool beside name, and returns that name.
func (s *spool) link() (string, error) {
	proc := "/proc/self/fd/" + strconv.Itoa(int(s.f.Fd()))
	for i := 0; ; i++ {
		tmp := filepath.Join(filepath.Dir(s.name), fmt.Sprintf(".%s.tmp-%d-%d", filepath.Base(s.name), os.Getpid(), i))
		err := unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, tmp, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return tmp, nil
		}
		if !errors.Is(err, unix.EEXIST) || i == 99 {
			return "", &os.LinkError{Op: "link", Old: proc, New: tmp, Err: err}
		}
	}
}

// copyOut copies the spooled bytes to standard output or into p.
func (s *spool) copyOut(p place) error {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if p.stdout {
		_, err := io.Copy(s.c.App.Writer, s.f)
		return err
	}
	w, err := p.open()
	if err != nil {
		return err
	}
	_, err = io.Copy(w, s.f)
	return errors.Join(err, w.Close())
}
