package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeRoot writes files (path → contents) under a new directory and
// returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	mountsV1 = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	mountsV2 = "30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
)

func TestReadMemCgroup(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  MemCgroup // Dir and LimitDir relative to the root
	}{
		{"v1, the job's limit below the step's", map[string]string{
			"proc/self/cgroup":                                              "9:name=systemd:/\n4:memory:/slurm/job_7/step_0\n0::/\n",
			"proc/self/mountinfo":                                           mountsV1,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                    "9223372036854771712\n",
			"sys/fs/cgroup/memory/slurm/memory.limit_in_bytes":              "9223372036854771712\n",
			"sys/fs/cgroup/memory/slurm/job_7/memory.limit_in_bytes":        "1073741824\n",
			"sys/fs/cgroup/memory/slurm/job_7/step_0/memory.limit_in_bytes": "2147483648\n",
		}, MemCgroup{Version: 1, Dir: "sys/fs/cgroup/memory/slurm/job_7/step_0", Limit: 1 << 30, LimitDir: "sys/fs/cgroup/memory/slurm/job_7"}},
		{"v1, no limit; the unified hierarchy has no memory controller", map[string]string{
			"proc/self/cgroup":                             "4:memory:/a\n0::/\n",
			"proc/self/mountinfo":                          mountsV1,
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/unified/cgroup.procs":           "",
		}, MemCgroup{Version: 1, Dir: "sys/fs/cgroup/memory/a"}},
		{"v1 in a container: the mount's root is the process's cgroup", map[string]string{
			"proc/self/cgroup":                           "4:cpu,memory:/docker/abc\n",
			"proc/self/mountinfo":                        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,cpu,memory\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "524288000\n",
		}, MemCgroup{Version: 1, Dir: "sys/fs/cgroup/memory", Limit: 500 << 20, LimitDir: "sys/fs/cgroup/memory"}},
		{"v2, the parent's limit", map[string]string{
			"proc/self/cgroup":                             "0::/user.slice/job/rank\n",
			"proc/self/mountinfo":                          mountsV2,
			"sys/fs/cgroup/user.slice/memory.max":          "max\n",
			"sys/fs/cgroup/user.slice/job/memory.max":      "3221225472\n",
			"sys/fs/cgroup/user.slice/job/rank/memory.max": "max\n",
		}, MemCgroup{Version: 2, Dir: "sys/fs/cgroup/user.slice/job/rank", Limit: 3 << 30, LimitDir: "sys/fs/cgroup/user.slice/job"}},
		{"v2 mounted with a space in its path", map[string]string{
			"proc/self/cgroup":    "0::/j\n",
			"proc/self/mountinfo": "30 23 0:27 / /my\\040cg rw - cgroup2 cgroup2 rw\n",
			"my cg/j/memory.max":  "1048576\n",
		}, MemCgroup{Version: 2, Dir: "my cg/j", Limit: 1 << 20, LimitDir: "my cg/j"}},
		{"no memory cgroup", map[string]string{
			"proc/self/cgroup":    "1:cpu:/\n",
			"proc/self/mountinfo": mountsV1,
		}, MemCgroup{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, c.files)
			got, err := ReadMemCgroup(root)
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			if want.Dir != "" {
				want.Dir = filepath.Join(root, want.Dir)
			}
			if want.LimitDir != "" {
				want.LimitDir = filepath.Join(root, want.LimitDir)
			}
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestReadMemCgroupErrors(t *testing.T) {
	if _, err := ReadMemCgroup(t.TempDir()); err == nil {
		t.Error("no /proc: want an error")
	}
	root := fakeRoot(t, map[string]string{
		"proc/self/cgroup":           "0::/j\n",
		"proc/self/mountinfo":        mountsV2,
		"sys/fs/cgroup/j/memory.max": "lots\n",
	})
	if _, err := ReadMemCgroup(root); err == nil {
		t.Error("a limit that is no number: want an error")
	}
}

func TestOOMKills(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"v1/memory.oom_control":  "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"v2/memory.events":       "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
		"old/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
	})
	for _, c := range []struct {
		cg   MemCgroup
		want int64
	}{
		{MemCgroup{Version: 1, Dir: filepath.Join(root, "v1")}, 3},
		{MemCgroup{Version: 2, Dir: filepath.Join(root, "v2")}, 2},
		{MemCgroup{Version: 1, Dir: filepath.Join(root, "old")}, 0},
		{MemCgroup{}, 0},
	} {
		if got, err := c.cg.OOMKills(); err != nil || got != c.want {
			t.Errorf("%+v: %d, %v; want %d", c.cg, got, err, c.want)
		}
	}
}

// TestReadMemCgroupHere reads this machine's, which must not fail.
func TestReadMemCgroupHere(t *testing.T) {
	cg, err := ReadMemCgroup("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", cg)
}
