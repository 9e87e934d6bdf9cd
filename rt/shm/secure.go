package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// makeDir creates the attach directory dir and its base (the parent) for
// this process's user alone (mode 0700), and checks both (checkDir).
func makeDir(dir string) error {
	base := filepath.Dir(dir)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return fmt.Errorf("shm: attach directory: %w", err)
	}
	if err := checkDir(base); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("shm: attach directory: %w", err)
	}
	return checkDir(dir)
}

// checkDirs checks an attach directory and its base before a client
// connects; one that does not exist is left to the connection to report.
func checkDirs(dir string) error {
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := checkDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// checkDir returns an error unless dir is a directory, not a symbolic
// link, owned by this process's user and writable by no one else: through
// any other, another user could put a socket of its own in the rank's
// place and feed training its own data.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("shm: attach directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	var problem string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(dir)
		problem = fmt.Sprintf("is a symbolic link (to %s)", to)
	case !fi.IsDir() || !ok:
		problem = fmt.Sprintf("is not a directory (mode %v)", fi.Mode())
	case int(st.Uid) != os.Geteuid():
		problem = fmt.Sprintf("is owned by %s, mode %v, not by %s, this process's", userName(st.Uid), fi.Mode(), userName(uint32(os.Geteuid())))
	case fi.Mode().Perm()&0o022 != 0:
		problem = fmt.Sprintf("is writable by group or others (mode %v, owner %s)", fi.Mode(), userName(st.Uid))
	default:
		return nil
	}
	return fmt.Errorf("shm: attach directory %s %s: another user could serve training processes data of its own through it; remove it (rm -r %s) or set $%s to a directory of your own",
		dir, problem, dir, EnvAttach)
}

// userName returns "uid N (name)", or "uid N" when N has no name.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return fmt.Sprintf("uid %s (%s)", id, u.Username)
	}
	return "uid " + id
}

// peerCred returns the credentials of the process at the other end of
// conn, as the kernel recorded them when it connected (SO_PEERCRED).
func peerCred(conn *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("peer credentials: %w", cerr)
	}
	return cred, nil
}

// checkPeer returns an error unless the peer described by cred (who: "a
// client", "the rank") runs as this process's user.
func checkPeer(cred *syscall.Ucred, who string) error {
	if int(cred.Uid) == os.Geteuid() {
		return nil
	}
	return fmt.Errorf("%s of pid %d runs as %s, not as %s, this process's", who, cred.Pid, userName(cred.Uid),
		userName(uint32(os.Geteuid())))
}
