package testkit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MpirunArgs are the mpirun options every test and example uses on our
// machines: running as root, more ranks than cores, and no binding (a
// bound rank gets a single core, and Go then runs on one thread).
var MpirunArgs = []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}

// Run runs a command in its own process group with a deadline and returns
// its combined output. On timeout the whole group (mpirun and its ranks)
// gets SIGTERM, then SIGKILL five seconds later, so nothing outlives the
// call; the error then says it timed out.
func Run(timeout time.Duration, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers, if any
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s timed out after %v: %w", name, timeout, err)
	}
	return out, err
}

// Watch runs a command as Run does, and calls on with each line of its
// combined output as the line comes, and with the command's process
// group, whose leader it is (see Descendants). on runs on one goroutine; what it does while the
// command runs (renaming a directory, stopping a process) is how a test
// acts on the command at a given point.
func Watch(timeout time.Duration, env []string, on func(line string, pgid int), name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	w.Close()
	var out bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		out.Write(sc.Bytes())
		out.WriteByte('\n')
		on(sc.Text(), cmd.Process.Pid)
	}
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers, if any
	if ctx.Err() != nil {
		return out.Bytes(), fmt.Errorf("%s timed out after %v: %w", name, timeout, err)
	}
	return out.Bytes(), err
}

// Descendants returns the processes below process root (children,
// theirs, …) whose command line contains every one of words, in pid
// order. mpirun puts its ranks in process groups of their own: this finds
// them.
func Descendants(root int, words ...string) []int {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, …
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	var pids []int
	for pid := range parent {
		below := false
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				below = true
				break
			}
		}
		if !below {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		line, all := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}
