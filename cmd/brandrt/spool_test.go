package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/internal/testkit"
)

// spooled opens a spool at name for --order-out, with --force set or
// not and standard output going to out, and writes "epoch 1\n" to it.
func spooled(t *testing.T, force bool, out *bytes.Buffer, name string) *spool {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Bool("force", force, "")
	s, err := openSpool(cli.NewContext(&cli.App{Writer: out}, fs, nil), "--order-out", name)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("epoch 1\n"))
	return s
}

// A spool writes to disk as it goes, under no name until commit puts it
// in place; a write that fails, or a name that changed meanwhile, leaves
// what is there and nothing beside it; spooled for standard output, it
// comes out at commit.
func TestSpool(t *testing.T) {
	t.Run("as it goes", func(t *testing.T) {
		dir := t.TempDir()
		name := filepath.Join(dir, "order.txt")
		s := spooled(t, false, nil, name)
		fi, err := s.f.Stat()
		named := map[bool]int{false: 1}[s.nameless] // where the file system has no O_TMPFILE, a file beside the name
		if err != nil || fi.Size() != 8 || len(testkit.Entries(t, dir)) != named {
			t.Fatalf("before commit: %v, %d bytes written, %v in the directory; want 8 bytes under no name (nameless: %v)", err, fi.Size(), testkit.Entries(t, dir), s.nameless)
		}
		s.Write([]byte("epoch 2\n"))
		if err := s.commit(); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(name); string(got) != "epoch 1\nepoch 2\n" || len(testkit.Entries(t, dir)) != 1 {
			t.Fatalf("after commit: %q, %v in the directory", got, testkit.Entries(t, dir))
		}
	})
	t.Run("write failed", func(t *testing.T) {
		dir := t.TempDir()
		name := filepath.Join(dir, "order.txt")
		os.WriteFile(name, []byte("old"), 0o644)
		s := spooled(t, true, nil, name)
		s.f.Close() // the next write fails
		if _, err := s.Write([]byte("epoch 2\n")); err == nil {
			t.Fatal("a write to a closed file succeeded")
		}
		err := s.commit()
		if got, _ := os.ReadFile(name); err == nil || !strings.Contains(err.Error(), "--order-out") || string(got) != "old" || len(testkit.Entries(t, dir)) != 1 {
			t.Fatalf("commit after a failed write: %v; %q, %v in the directory", err, got, testkit.Entries(t, dir))
		}
	})
	t.Run("came without --force", func(t *testing.T) {
		dir := t.TempDir()
		name := filepath.Join(dir, "order.txt")
		s := spooled(t, false, nil, name)
		os.WriteFile(name, []byte("theirs"), 0o644)
		err := s.commit()
		if got, _ := os.ReadFile(name); err == nil || !strings.Contains(err.Error(), "--force") || string(got) != "theirs" || len(testkit.Entries(t, dir)) != 1 {
			t.Fatalf("commit over a file made meanwhile: %v; %q, %v in the directory", err, got, testkit.Entries(t, dir))
		}
	})
	t.Run("FIFO became a file", func(t *testing.T) {
		dir := t.TempDir()
		name := filepath.Join(dir, "order.fifo")
		if err := syscall.Mkfifo(name, 0o600); err != nil {
			t.Fatal(err)
		}
		s := spooled(t, true, nil, name)
		os.Remove(name)
		os.WriteFile(name, []byte("theirs"), 0o644)
		err := s.commit()
		if got, _ := os.ReadFile(name); err == nil || !strings.Contains(err.Error(), "changed while the job ran") || string(got) != "theirs" || len(testkit.Entries(t, dir)) != 1 {
			t.Fatalf("commit into a FIFO that became a file: %v; %q, %v in the directory", err, got, testkit.Entries(t, dir))
		}
	})
	t.Run("standard output", func(t *testing.T) {
		var out bytes.Buffer
		s := spooled(t, false, &out, "-")
		out.WriteString("report\n")
		if err := s.commit(); err != nil || out.String() != "report\nepoch 1\n" {
			t.Fatalf("commit to standard output: %v; %q", err, out.String())
		}
	})
}
