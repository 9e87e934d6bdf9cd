package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MemCgroup is the memory cgroup a process runs in: what the kernel
// counts its memory against (heap, shared memory, page cache) and kills
// it for when a limit is reached. Slurm's cgroup enforcement, a container
// and a systemd slice all put their limits there.
type MemCgroup struct {
	// Version is 1 or 2, the cgroup hierarchy the memory controller is
	// in; 0 when the process is in none (Dir is then empty).
	Version int
	// Dir is the cgroup's directory, Limit the smallest memory limit of
	// it and its parents in bytes (0: none), and LimitDir the directory
	// that sets it.
	Dir      string
	Limit    int64
	LimitDir string
}

// noLimit is where cgroup v1 writes "no limit" from: its largest value
// is a page count times the page size just under 2^63.
const noLimit = int64(1) << 62

// ReadMemCgroup finds the memory cgroup of this process under root (the
// file system's root, "/" but in tests): from proc/self/cgroup and where
// proc/self/mountinfo says the memory controller is mounted, v1 (the
// "memory" controller's line, memory.limit_in_bytes) before v2 (the
// "0::" line, memory.max). A process in no memory cgroup gets a
// MemCgroup of Version 0.
func ReadMemCgroup(root string) (MemCgroup, error) {
	paths, err := cgroupPaths(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return MemCgroup{}, err
	}
	mounts, err := cgroupMounts(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return MemCgroup{}, err
	}
	for _, v := range []int{1, 2} {
		path, ok := paths[v]
		m, mounted := mounts[v]
		if !ok || !mounted {
			continue
		}
		rel, ok := strings.CutPrefix(path, m.root)
		if !ok || rel != "" && rel[0] != '/' { // the cgroup lies outside what is mounted here
			continue
		}
		cg := MemCgroup{Version: v, Dir: filepath.Join(root, m.point, rel)}
		if _, err := os.Stat(filepath.Join(cg.Dir, limitFile(v))); err != nil {
			continue // v2 without the memory controller, say
		}
		return cg, cg.findLimit(filepath.Join(root, m.point))
	}
	return MemCgroup{}, nil
}

func limitFile(version int) string {
	if version == 1 {
		return "memory.limit_in_bytes"
	}
	return "memory.max"
}

// findLimit takes the smallest limit of c.Dir and its parents up to top.
func (c *MemCgroup) findLimit(top string) error {
	for dir := c.Dir; ; dir = filepath.Dir(dir) {
		n, err := readLimit(filepath.Join(dir, limitFile(c.Version)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if n > 0 && (c.Limit == 0 || n < c.Limit) {
			c.Limit, c.LimitDir = n, dir
		}
		if len(dir) <= len(top) || dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// readLimit reads a memory limit file: bytes, or 0 for none ("max", or
// v1's largest values).
func readLimit(name string) (int64, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("launch: %s: %q is not a memory limit", name, s)
	}
	if n >= noLimit {
		return 0, nil
	}
	return n, nil
}

// OOMKills returns how many processes of the cgroup the kernel's OOM
// killer has killed (v1 memory.oom_control, v2 memory.events: their
// oom_kill lines; kernels before 4.13 have none, and give 0).
func (c MemCgroup) OOMKills() (int64, error) {
	name := "memory.oom_control"
	if c.Version == 2 {
		name = "memory.events"
	}
	if c.Version == 0 {
		return 0, nil
	}
	f, err := os.Open(filepath.Join(c.Dir, name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, sc.Err()
}

// cgroupPaths reads /proc/self/cgroup: the path of the v1 memory
// controller's cgroup (key 1) and of the v2 one (key 2).
func cgroupPaths(name string) (map[int]string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("launch: the process's cgroups: %w", err)
	}
	paths := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		switch {
		case !ok:
		case id == "0" && ctrls == "":
			paths[2] = path
		case hasMemory(ctrls):
			paths[1] = path
		}
	}
	return paths, nil
}

// hasMemory says whether a comma-separated list of controllers (or mount
// options) names the memory controller.
func hasMemory(list string) bool { return slices.Contains(strings.Split(list, ","), "memory") }

// mount is where a cgroup hierarchy is mounted, and which of its
// cgroups is the mount's root.
type mount struct{ point, root string }

// cgroupMounts reads /proc/self/mountinfo: the mount of the v1 memory
// controller (key 1) and of the v2 hierarchy (key 2), the first of each.
func cgroupMounts(name string) (map[int]mount, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("launch: the process's mounts: %w", err)
	}
	mounts := map[int]mount{}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root point options [optional…] - type source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{point: unescape(f[4]), root: unescape(f[3])}
		if m.root == "/" {
			m.root = ""
		}
		v := 0
		switch {
		case g[0] == "cgroup2":
			v = 2
		case g[0] == "cgroup" && hasMemory(g[2]):
			v = 1
		}
		if _, seen := mounts[v]; v != 0 && !seen {
			mounts[v] = m
		}
	}
	return mounts, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// LimitFile is the file that sets c.Limit.
func (c MemCgroup) LimitFile() string { return filepath.Join(c.LimitDir, limitFile(c.Version)) }
