package main

import (
	"errors"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

// spool is an output written as it goes and put in place at the end
// (serve's --order-out): a new file beside a regular file's name,
// renamed into place by commit; or, for standard output and what is
// written into, an unlinked temporary file that commit copies there, so
// that it comes whole after the job's report, as one written at the end
// would. It holds nothing in memory, whatever it grows to.
type spool struct {
	c          *cli.Context
	flag, name string
	f          *os.File
	to         place // where name led when the spool opened
	into       bool  // copied there at the end, not renamed there
	err        error // the first write's that failed
}

// openSpool starts the output of flag at name; checkOut says what is
// refused.
func openSpool(c *cli.Context, flag, name string) (*spool, error) {
	p, err := checkOut(c, flag, name)
	if err != nil {
		return nil, err
	}
	s := &spool{c: c, flag: flag, name: name, to: p, into: p.stdout || p.into}
	if s.into {
		if s.f, err = os.CreateTemp("", "brandrt-spool-"); err == nil {
			err = os.Remove(s.f.Name()) // unlinked: nothing stays if the process dies
		}
	} else {
		s.f, err = createTemp(name)
	}
	if err != nil {
		if s.f != nil {
			s.f.Close()
		}
		return nil, flagError(flag, err)
	}
	return s, nil
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

// commit puts what was written in place, or, when a write failed,
// leaves what was there and says why.
func (s *spool) commit() error {
	if s.into {
		defer s.f.Close()
		if s.err != nil {
			return flagError(s.flag, s.err)
		}
		return flagError(s.flag, s.copyOut())
	}
	err := errors.Join(s.err, s.f.Close())
	if err == nil {
		err = os.Rename(s.f.Name(), s.name)
	}
	if err != nil {
		os.Remove(s.f.Name())
	}
	return flagError(s.flag, err)
}

// copyOut copies the spooled bytes to standard output or into what name
// was when the spool opened.
func (s *spool) copyOut() error {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if s.to.stdout {
		_, err := io.Copy(s.c.App.Writer, s.f)
		return err
	}
	w, err := s.to.open()
	if err != nil {
		return err
	}
	_, err = io.Copy(w, s.f)
	return errors.Join(err, w.Close())
}
