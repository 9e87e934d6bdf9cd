package shm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// nobody is the user the tests make "another user" of.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
}

// TestUnsafeAttachDirRefused: a base or attach directory that another
// user owns, that group or others may write to, or that is a symbolic
// link makes the rank refuse to start, and a client refuse to attach,
// with a message that names it and says what to do.
func TestUnsafeAttachDirRefused(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name  string
		spoil func(base, dir string) error
		want  string
	}{
		{"base of nobody", func(base, _ string) error { return os.Chown(base, nobody, nobody) }, "is owned by uid 65534"},
		{"dir of nobody", func(_, dir string) error { return os.Chown(dir, nobody, nobody) }, "is owned by uid 65534"},
		{"base 0777", func(base, _ string) error { return os.Chmod(base, 0o777) }, "is writable by group or others (mode drwxrwxrwx"},
		{"dir 0770", func(_, dir string) error { return os.Chmod(dir, 0o770) }, "is writable by group or others (mode drwxrwx---"},
		{"dir a symlink", func(_, dir string) error {
			other := dir + "-elsewhere"
			if err := os.Mkdir(other, 0o700); err != nil {
				return err
			}
			if err := os.Remove(dir); err != nil {
				return err
			}
			return os.Symlink(other, dir)
		}, "is a symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "brandrt-x")
			dir := filepath.Join(base, "local-0")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.spoil(base, dir); err != nil {
				t.Fatal(err)
			}
			s, err := Listen(dir, 0, Options{Slots: 4, Data: 64 << 10})
			if err == nil {
				s.Close()
				t.Fatal("the rank started in an unsafe attach directory")
			}
			checkUnsafe(t, "the rank", err, tc.want)
			_, err = Attach(dir)
			checkUnsafe(t, "a client", err, tc.want)
		})
	}
}

func checkUnsafe(t *testing.T, who string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "remove it (rm -r ") ||
		!strings.Contains(err.Error(), "set $BRANDRT_ATTACH") {
		t.Errorf("%s: got %v, want an error with %q, saying what to do", who, err, want)
	} else {
		t.Logf("%s: %v", who, err)
	}
}

// TestAttachDirsMade: the rank makes the base and the attach directory
// for its user alone.
func TestAttachDirsMade(t *testing.T) {
	base := filepath.Join(t.TempDir(), "brandrt-x")
	dir := filepath.Join(base, "local-1")
	s, err := Listen(dir, 0, Options{Slots: 4, Data: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []string{base, dir} {
		if fi, err := os.Lstat(d); err != nil || fi.Mode() != os.ModeDir|0o700 {
			t.Errorf("%s: %v %v, want drwx------", d, fi.Mode(), err)
		}
	}
}

// TestCheckPeer: a peer of another uid is refused with its pid and uid.
func TestCheckPeer(t *testing.T) {
	if err := checkPeer(&syscall.Ucred{Pid: 42, Uid: uint32(os.Geteuid())}, "a client"); err != nil {
		t.Errorf("our own uid: %v", err)
	}
	err := checkPeer(&syscall.Ucred{Pid: 42, Uid: uint32(os.Geteuid()) + 1}, "a client")
	if want := fmt.Sprintf("a client of pid 42 runs as uid %d", os.Geteuid()+1); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("another uid: %v, want %q", err, want)
	}
}

// asNobody runs this test binary's TestHelperAsNobody as user nobody,
// in mode with dir. It may read and write what root's are (CAP_DAC_OVERRIDE
// stays): only its uid differs. /proc/self/exe, since the binary's own
// directory may be closed to nobody before the capability is back.
func asNobody(ctx context.Context, mode, dir string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/proc/self/exe", "-test.run=^TestHelperAsNobody$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BRANDRT_SHM_HELPER="+mode, "BRANDRT_SHM_HELPER_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
		AmbientCaps: []uintptr{1}} // CAP_DAC_OVERRIDE
	return cmd
}

// skipIfNoSetuid skips a test whose process of another user could not
// be started (a container without CAP_SETUID or ambient capabilities).
func skipIfNoSetuid(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		t.Skipf("cannot start a process as uid %d here: %v", nobody, err)
	}
}

// TestForeignClientRefused: a process of another user that connects is
// refused before any welcome, and the rank logs one line naming it.
func TestForeignClientRefused(t *testing.T) {
	needRoot(t)
	log := &testkit.Log{}
	s, err := Listen(t.TempDir(), 0, Options{Slots: 4, Data: 64 << 10, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := asNobody(ctx, "client", s.Dir()).CombinedOutput()
	skipIfNoSetuid(t, err)
	if err != nil || !strings.Contains(string(out), "no welcome:") {
		t.Fatalf("a client of uid %d: %v\n%s", nobody, err, out)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "a client of pid ") || !strings.Contains(lines[0], "runs as uid 65534") {
		t.Fatalf("the rank logged %q, want one line naming the client's pid and uid", log.String())
	}
	t.Log(lines[0])
}

// TestForeignRankRefused: a client does not attach to a socket that a
// process of another user listens on.
func TestForeignRankRefused(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := asNobody(ctx, "rank", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		skipIfNoSetuid(t, err)
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The socket's file appears at bind, before listen: wait for the
	// helper's word that it listens, or a dial may be refused.
	listening := false
	for sc := bufio.NewScanner(out); !listening && sc.Scan(); {
		listening = sc.Text() == helperListening
	}
	if !listening {
		t.Fatal("the other user's listener did not start")
	}
	c, err := Attach(dir)
	if err == nil {
		c.Close()
		t.Fatal("attached to a rank of another user")
	}
	if !strings.Contains(err.Error(), "the rank of pid ") || !strings.Contains(err.Error(), "runs as uid 65534") {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
}

// helperListening is the line the "rank" helper prints once it listens.
const helperListening = "listening"

// TestHelperAsNobody is the other user's process of the tests above:
// "client" sends a hello and reports whether a welcome came; "rank"
// listens as a rank would, and answers nothing.
func TestHelperAsNobody(t *testing.T) {
	dir := os.Getenv("BRANDRT_SHM_HELPER_DIR")
	sock := filepath.Join(dir, SocketName)
	switch os.Getenv("BRANDRT_SHM_HELPER") {
	case "client":
		conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(helloMessage(uint32(os.Getpid())))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := conn.Read(b)
		if err == nil && n > 0 {
			fmt.Printf("welcomed: %q\n", b[:n])
			return
		}
		fmt.Printf("no welcome: %d bytes, %v\n", n, err)
	case "rank":
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fmt.Println(helperListening)
		time.Sleep(10 * time.Second) // the test kills it before
	default:
		t.Skip("run by the tests of another user's processes")
	}
}
