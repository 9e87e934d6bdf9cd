package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"

	"github.com/urfave/cli/v2"
)

// Files written at paths the user gives never follow a symbolic link
// there: another user may have planted one in a shared directory (/tmp,
// sticky and writable by all) pointing at a file of ours. Each is made
// under a temporary name of its own (O_EXCL) in the same directory and
// renamed into place, which replaces a link instead of writing through
// it.

// writeOut writes data to name (or stdout for "-") under a temporary name
// renamed on success.
func writeOut(c *cli.Context, name string, data []byte) error {
	if name == "-" {
		_, err := c.App.Writer.Write(data)
		return err
	}
	if err := refuseOverwrite(c, name); err != nil {
		return err
	}
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

// createOut creates name for writing as it goes (statistics, profiles),
// replacing what is there: a new file, renamed into place at once.
func createOut(name string) (*os.File, error) {
	f, err := createTemp(name)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

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

// refuseOverwrite fails when name exists and --force was not given.
func refuseOverwrite(c *cli.Context, name string) error {
	if _, err := os.Lstat(name); err == nil && !c.Bool("force") {
		return fmt.Errorf("%s exists; pass --force to overwrite it", name)
	}
	return nil
}

// startProfiles starts a CPU profile written to cpuDir/cpu.pprof and a
// heap profile written to memDir/mem.pprof when it stops, each when its
// directory is not "" (and made if missing); call the result to stop
// them.
func startProfiles(cpuDir, memDir string) (stop func() error, err error) {
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
	open := func(dir, name string) (*os.File, error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		return createOut(filepath.Join(dir, name))
	}
	if cpuDir != "" {
		f, err := open(cpuDir, "cpu.pprof")
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if memDir != "" {
		f, err := open(memDir, "mem.pprof")
		if err != nil {
			stop()
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
		runtime.MemProfileRate = 4096
		stops = append(stops, func() error {
			err := pprof.Lookup("heap").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
	}
	return stop, nil
}
