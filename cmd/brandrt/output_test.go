package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputsDoNotFollowSymlinks: another user plants symbolic links,
// in a sticky directory all may write to, at the names serve, simulate
// and stage write there, each pointing at a file of ours (mode 0600).
// The files serve and simulate write replace the links; stage refuses
// to write its lock through one. Our file is never written.
func TestOutputsDoNotFollowSymlinks(t *testing.T) {
	dir := servePack(t, 200, 1, filepath.Join(t.TempDir(), "chunks"))
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(precious, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(name string) string {
		link := filepath.Join(shared, name)
		if err := os.Symlink(precious, link); err != nil {
			t.Fatal(err)
		}
		_ = os.Lchown(link, 65534, 65534) // nobody's, where we may (root)
		return link
	}
	replaced := func(link, holds string) {
		t.Helper()
		fi, err := os.Lstat(link)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a regular file in the link's place", link, fi.Mode(), err)
			return
		}
		if b, _ := os.ReadFile(link); !strings.Contains(string(b), holds) {
			t.Errorf("%s holds %.200q, want %q", link, b, holds)
		}
	}
	stats, order, sim := plant("stats.json"), plant("order.txt"), plant("sim.txt")
	cpu, mem := plant("cpu.pprof"), plant("mem.pprof")
	if _, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--stats-json", stats,
		"--order-out", order, "--force", "--cpuprofile", shared, "--memprofile", shared); status != 0 {
		t.Fatalf("serve: %s", errs)
	}
	replaced(stats, `"files_delivered":200`)
	replaced(order, "# brandrt delivered order")
	replaced(cpu, "")
	replaced(mem, "")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--mem-fraction", "0.25", "--order-out", sim); status == 0 ||
		!strings.Contains(errs, sim+" exists; pass --force") {
		t.Errorf("simulate --order-out onto a link, without --force: status %d, %s", status, errs)
	}
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--mem-fraction", "0.25", "--order-out", sim, "--force"); status != 0 {
		t.Fatalf("simulate: %s", errs)
	}
	replaced(sim, "# brandrt delivered order")
	// stage's lock is named for the copy: a first stage shows the name
	if _, errs, status := runCLI(t, "stage", "--chunks", dir, "--to", shared); status != 0 {
		t.Fatalf("stage: %s", errs)
	}
	copies, _ := filepath.Glob(filepath.Join(shared, "chunks-*")) // the lock, gone once the stage ended, was .NAME.lock
	if len(copies) != 1 {
		t.Fatalf("stage's copies: %v", copies)
	}
	lock := plant("." + filepath.Base(copies[0]) + ".lock")
	if _, errs, status := runCLI(t, "stage", "--chunks", dir, "--to", shared); status == 0 ||
		!strings.Contains(errs, lock+": is a symbolic link; brandrt does not write through one") {
		t.Errorf("stage with a link at its lock: status %d, %s", status, errs)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "precious\n" {
		t.Errorf("the file the links point at now holds %q (%v)", b, err)
	}
}

// A sink is something at an output path that brandrt writes into and
// never replaces: a character device, a FIFO, a socket, a link to one, or
// a link to a descriptor of the process, as /dev/stdout is.
type sink struct {
	path string
	mode fs.FileMode // the type Lstat must still find at path
	// got returns what was written into it, once the command is done;
	// nil where the test cannot tell (a copy of /dev/null).
	got func() []byte
}

// sinkKinds are the kinds of sink makeSink makes; those marked root need
// mknod.
var sinkKinds = []struct {
	name string
	root bool
}{{"chardev", true}, {"fifo", false}, {"link-to-chardev", true}, {"link-to-fifo", false}, {"fd-link", false}, {"socket", false}}

// makeSink makes a sink of kind at path, with what reads it.
func makeSink(t *testing.T, kind, path string) *sink {
	t.Helper()
	target := path
	if strings.HasPrefix(kind, "link-to-") {
		target = path + ".target"
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	s := &sink{path: path, mode: fs.ModeSymlink}
	switch kind {
	case "chardev", "link-to-chardev": // a copy of /dev/null
		if err := syscall.Mknod(target, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	case "fifo", "link-to-fifo":
		if err := syscall.Mkfifo(target, 0o644); err != nil {
			t.Fatal(err)
		}
		s.got = readFIFO(t, target)
	case "fd-link":
		s.got = readFdLink(t, path)
	case "socket":
		s.got = readSocket(t, path)
		s.mode = fs.ModeSocket
	}
	if kind == "chardev" {
		s.mode = fs.ModeDevice | fs.ModeCharDevice
	} else if kind == "fifo" {
		s.mode = fs.ModeNamedPipe
	}
	return s
}

// readFIFO reads the FIFO at path in the background; the result waits for
// its writer to close it. A FIFO nobody opened is opened and closed at the
// end of the test, which frees the reader.
func readFIFO(t *testing.T, path string) func() []byte {
	ch := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(path)
		ch <- b
	}()
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	return func() []byte { return await(t, path, ch) }
}

// readFdLink makes path a link to /proc/self/fd/N, the write end of a
// pipe the test reads; the result closes that end and waits for the
// command's copies of it to be closed.
func readFdLink(t *testing.T, path string) func() []byte {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), path); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		ch <- b
	}()
	t.Cleanup(func() { w.Close() })
	return func() []byte { w.Close(); return await(t, path, ch) }
}

// readSocket listens on a Unix socket at path and reads what its first
// client writes.
func readSocket(t *testing.T, path string) func() []byte {
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	ch := make(chan []byte, 1)
	go func() {
		var b []byte
		if c, err := l.Accept(); err == nil {
			b, _ = io.ReadAll(c)
			c.Close()
		}
		ch <- b
	}()
	t.Cleanup(func() { l.Close() })
	return func() []byte { return await(t, path, ch) }
}

// await returns what a reader of path read, or fails after 30 s.
func await(t *testing.T, path string, ch chan []byte) []byte {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(30 * time.Second):
		t.Errorf("%s: nothing was written into it (its reader still waits after 30 s)", path)
		return nil
	}
}

// check fails unless s is still what it was and holds want.
func (s *sink) check(t *testing.T, what string, want []byte) {
	t.Helper()
	fi, err := os.Lstat(s.path)
	if err != nil || fi.Mode().Type() != s.mode {
		t.Errorf("%s: %s is now %v (%v), want %v: replaced instead of written into", what, s.path, fi.Mode().Type(), err, s.mode)
		return
	}
	if s.got == nil {
		return
	}
	if b := s.got(); !bytes.Contains(b, want) || len(b) == 0 {
		t.Errorf("%s: %s got %d bytes %.80q, want them to hold %.80q", what, s.path, len(b), b, want)
	}
}

// TestOutputsWriteIntoDevices: every output flag of serve, simulate and
// inspect, given a character device, a FIFO, a socket, a link to one or a
// link to a descriptor of the process (as /dev/stdout is), writes into
// it and leaves it as it was, with --force or without.
func TestOutputsWriteIntoDevices(t *testing.T) {
	dir := servePack(t, 200, 1, filepath.Join(t.TempDir(), "chunks"))
	file0, errs, status := runCLI(t, "inspect", "--chunks", dir, "--file", "0", "--out", "-")
	if status != 0 || len(file0) == 0 {
		t.Fatalf("inspect --out -: status %d, %d bytes: %s", status, len(file0), errs)
	}
	gzip := []byte("\x1f\x8b") // the start of a profile
	for _, kind := range sinkKinds {
		t.Run(kind.name, func(t *testing.T) {
			if kind.root && os.Geteuid() != 0 {
				t.Skip("mknod needs root")
			}
			tmp := t.TempDir()
			mk := func(name string) *sink {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				return makeSink(t, kind.name, filepath.Join(tmp, name))
			}
			stats, order, cpu, mem := mk("stats.json"), mk("order.txt"), mk("scpu/cpu.pprof"), mk("smem/mem.pprof")
			if _, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--stats-json", stats.path,
				"--order-out", order.path, "--force", "--cpuprofile", filepath.Join(tmp, "scpu"), "--memprofile", filepath.Join(tmp, "smem")); status != 0 {
				t.Errorf("serve: status %d: %s", status, errs)
			}
			stats.check(t, "serve --stats-json", []byte(`"files_delivered":200`))
			order.check(t, "serve --order-out --force", []byte("# brandrt delivered order"))
			cpu.check(t, "serve --cpuprofile", gzip)
			mem.check(t, "serve --memprofile", gzip)
			order, cpu, mem = mk("sim-order.txt"), mk("mcpu/cpu.pprof"), mk("mmem/mem.pprof")
			if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--order-out", order.path,
				"--cpuprofile", filepath.Join(tmp, "mcpu"), "--memprofile", filepath.Join(tmp, "mmem")); status != 0 {
				t.Errorf("simulate: status %d: %s", status, errs)
			}
			order.check(t, "simulate --order-out", []byte("# brandrt delivered order"))
			cpu.check(t, "simulate --cpuprofile", gzip)
			mem.check(t, "simulate --memprofile", gzip)
			for _, force := range []bool{false, true} {
				out := mk(fmt.Sprintf("file0-%v", force))
				args := []string{"inspect", "--chunks", dir, "--file", "0", "--out", out.path}
				if force {
					args = append(args, "--force")
				}
				if _, errs, status := runCLI(t, args...); status != 0 {
					t.Errorf("%v: status %d: %s", args, status, errs)
				}
				out.check(t, fmt.Sprintf("inspect --out (--force %v)", force), []byte(file0))
			}
		})
	}
}

// TestOutputsRefuseWhatIsNotAFile: a directory, a link to one or a block
// device at an output path is refused, naming the path and what it is,
// and left as it was; so are a FIFO another user left in a sticky
// directory, and - for a directory of profiles.
func TestOutputsRefuseWhatIsNotAFile(t *testing.T) {
	dir := servePack(t, 200, 1, filepath.Join(t.TempDir(), "chunks"))
	tmp := t.TempDir()
	t.Chdir(tmp) // where a directory named - would be made
	targets := map[string]string{"a directory": filepath.Join(tmp, "dir"), "a symbolic link to a directory": filepath.Join(tmp, "link")}
	if err := os.Mkdir(targets["a directory"], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(targets["a directory"], targets["a symbolic link to a directory"]); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // major 240: local use, nothing behind it here
		targets["a block device"] = filepath.Join(tmp, "blk")
		if err := syscall.Mknod(targets["a block device"], syscall.S_IFBLK|0o600, 240<<8|77); err != nil {
			t.Fatal(err)
		}
	}
	// a profile's directory holding the thing where cpu.pprof goes
	profiles := filepath.Join(tmp, "profiles")
	if err := os.MkdirAll(filepath.Join(profiles, "cpu.pprof"), 0o755); err != nil {
		t.Fatal(err)
	}
	serve := []string{"serve", "--chunks", dir, "--mem", "25%", "--consume", "1"}
	for what, path := range targets {
		before, _ := os.Lstat(path)
		for _, args := range [][]string{
			append(slices.Clip(serve), "--stats-json", path),
			append(slices.Clip(serve), "--order-out", path, "--force"),
			{"simulate", "--chunks", dir, "--order-out", path},
			{"simulate", "--chunks", dir, "--order-out", path, "--force"},
			{"inspect", "--chunks", dir, "--file", "0", "--out", path},
			{"inspect", "--chunks", dir, "--file", "0", "--out", path, "--force"},
		} {
			if _, errs, status := runCLI(t, args...); status == 0 || !strings.Contains(errs, path+" is "+what) {
				t.Errorf("%v: status %d, %q; want it refused: %s is %s", args, status, errs, path, what)
			}
		}
		if after, err := os.Lstat(path); err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s was %v, is now %v (%v)", path, before.Mode(), after.Mode(), err)
		}
	}
	cpu := filepath.Join(profiles, "cpu.pprof")
	for _, args := range [][]string{append(slices.Clip(serve), "--cpuprofile", profiles), {"simulate", "--chunks", dir, "--cpuprofile", profiles}} {
		if _, errs, status := runCLI(t, args...); status == 0 || !strings.Contains(errs, cpu+" is a directory") {
			t.Errorf("%v: status %d, %q; want it refused: %s is a directory", args, status, errs, cpu)
		}
	}
	if os.Geteuid() == 0 { // a FIFO another user left in a sticky directory
		shared := filepath.Join(tmp, "shared")
		fifo := filepath.Join(shared, "out")
		err := os.Mkdir(shared, 0o777)
		if err == nil {
			err = os.Chmod(shared, 0o777|fs.ModeSticky)
		}
		if err == nil {
			err = syscall.Mkfifo(fifo, 0o666)
		}
		if err == nil {
			err = os.Chown(fifo, 65534, 65534)
		}
		if err != nil {
			t.Fatal(err)
		}
		readFIFO(t, fifo) // should the command open it
		if _, errs, status := runCLI(t, "inspect", "--chunks", dir, "--file", "0", "--out", fifo); status == 0 ||
			!strings.Contains(errs, fifo+" is a FIFO of uid 65534 in a directory all may write to") {
			t.Errorf("inspect --out onto another user's FIFO in a sticky directory: status %d, %q", status, errs)
		}
	}
	for _, args := range [][]string{append(slices.Clip(serve), "--memprofile", "-"), {"simulate", "--chunks", dir, "--cpuprofile", "-"}} {
		if _, errs, status := runCLI(t, args...); status == 0 || !strings.Contains(errs, "takes a directory") {
			t.Errorf("%v: status %d, %q; want - refused: the flag takes a directory", args, status, errs)
		}
	}
}

// TestOutputsDashIsStdout: - is standard output for every output flag
// that takes a file; no file named - is made.
func TestOutputsDashIsStdout(t *testing.T) {
	dir := servePack(t, 200, 1, filepath.Join(t.TempDir(), "chunks"))
	t.Chdir(t.TempDir())
	out, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--stats-json", "-", "--order-out", "-")
	if status != 0 || !strings.Contains(out, `"files_delivered":200`) || !strings.Contains(out, "# brandrt delivered order") {
		t.Errorf("serve --stats-json - --order-out -: status %d, stdout %.300q, stderr %q", status, out, errs)
	}
	out, errs, status = runCLI(t, "simulate", "--chunks", dir, "--order-out", "-")
	if status != 0 || !strings.Contains(out, "# brandrt delivered order") {
		t.Errorf("simulate --order-out -: status %d, stdout %.300q, stderr %q", status, out, errs)
	}
	if _, err := os.Lstat("-"); err == nil {
		t.Error("a file named - was made")
	}
}

// TestServeOrderOutAsItGoes: serve writes --order-out as each epoch ends,
// beside the name, and renames it into place at the end: 3 epochs give
// simulate's bytes and leave nothing else in the directory. Spooled for
// standard output, it comes after the job's report. A write that fails
// (/dev/full) fails the job, naming --order-out.
func TestServeOrderOutAsItGoes(t *testing.T) {
	dir := servePack(t, 300, 1, filepath.Join(t.TempDir(), "chunks"))
	outDir := t.TempDir()
	order, sim := filepath.Join(outDir, "order.txt"), filepath.Join(t.TempDir(), "sim.txt")
	if _, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--epochs", "3", "--order-out", order); status != 0 {
		t.Fatalf("serve: status %d: %s", status, errs)
	}
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--mem-fraction", "0.25", "--epochs", "3", "--order-out", sim); status != 0 {
		t.Fatalf("simulate: status %d: %s", status, errs)
	}
	got, _ := os.ReadFile(order)
	want, _ := os.ReadFile(sim)
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Errorf("serve --order-out wrote %d bytes, simulate %d; equal: %v", len(got), len(want), bytes.Equal(got, want))
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
		t.Errorf("the directory holds %d entries, want the order file alone: %v", len(ents), ents)
	}
	out, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--epochs", "3", "--order-out", "-")
	at := strings.Index(out, "# brandrt delivered order")
	if status != 0 || at < 0 || out[at:] != string(want) || !strings.Contains(out[:at], "epoch 3/3") {
		t.Errorf("serve --order-out -: status %d, the order at %d of %d bytes of stdout (%d bytes, want %d after the report); stderr %q",
			status, at, len(out), len(out)-max(at, 0), len(want), errs)
	}
	_, errs, status = runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--order-out", "/dev/full")
	if status == 0 || !strings.Contains(errs, "--order-out") || !strings.Contains(errs, "no space left on device") {
		t.Errorf("serve --order-out /dev/full: status %d, stderr %q", status, errs)
	}
	// --footprint counts gathering the order (with --batch 0, which
	// gathers none to measure), and writes none
	fp := filepath.Join(outDir, "footprint-order.txt")
	out, errs, status = runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--batch", "0", "--footprint", "--order-out", fp)
	if _, err := os.Stat(fp); status != 0 || !strings.Contains(out+errs, "for gathering each epoch's order to rank 0 (--order-out") || err == nil {
		t.Errorf("serve --footprint --order-out: status %d, want the term for gathering the order and no file (%v): %s%s", status, err, out, errs)
	}
}
