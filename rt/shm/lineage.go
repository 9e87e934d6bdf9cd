package shm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/brandrt/brandrt/rt"
)

// Once training processes of a rank declared themselves (a BrandSampler's
// session), the rank reads only for them and for the processes they
// started, their DataLoader workers. A stray client of the same user
// asking for positions would otherwise take them from the trainer, which
// then never gets them. The kernel names a client's process
// (SO_PEERCRED); /proc names its ancestors. A client whose process /proc
// does not show (another PID namespace) is not checked.

// maxLineage bounds the walk up the process tree.
const maxLineage = 64

// lineage returns pid and its ancestors, nearest first; nil when /proc
// does not show pid. A walk cut short (a parent exited meanwhile) keeps
// what it found. The error is for a rank out of descriptors or memory,
// which cannot read /proc: the client cannot be checked, and is refused.
func lineage(pid int) ([]int, error) {
	var line []int
	for pid > 0 && len(line) < maxLineage {
		ppid, err := parentOf(pid)
		if short(err) {
			return nil, fmt.Errorf("read the process of the client: %w", err)
		}
		if err != nil {
			break
		}
		line = append(line, pid)
		pid = ppid
	}
	return line, nil
}

// parentOf reads pid's parent from /proc/<pid>/stat: "pid (comm) state
// ppid …", where comm may hold spaces and parentheses.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: no parent", pid)
	}
	return strconv.Atoi(string(f[1]))
}

// reader returns the process c reads for, the nearest of its process
// and its ancestors (its lineage, which begins with it) that declared
// itself a training process, else its own; and whether c's reads are
// refused (stray): training processes declared themselves, and c's
// process is none of them nor started by one.
func (c *client) reader() (pid int, stray bool) {
	s := c.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range c.lineage {
		if s.sessions[p] > 0 {
			return p, false
		}
	}
	return int(c.pid), len(s.sessions) > 0 && c.lineage != nil
}

// refuse answers a stray client's read with an error, and names the
// client in the log once.
func (c *client) refuse(sn int32) {
	err := fmt.Errorf("shm: rank %d reads only for its training processes (those with a BrandSampler) and the processes they started; process %d is neither",
		c.srv.rank, c.pid)
	if !c.refused {
		c.refused = true
		c.srv.logf("brandrt: client %d (pid %d): refusing its reads: it is neither a training process of rank %d (one with a BrandSampler) nor started by one\n",
			c.id, c.pid, c.srv.rank)
	}
	c.pending.Add(1)
	c.replies <- rt.Delivery{Sn: sn, Err: err}
}
