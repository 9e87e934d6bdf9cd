package testkit

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is an emulated cluster of a test (examples/cluster/cluster.sh):
// nodes that are hosts of their own to MPI, Slurm and brandrt, on this
// machine.
type Cluster struct {
	// Name is the cluster's; its nodes' hostnames are Name-n1, Name-n2, …
	Name string
	// State is the cluster's directory: Mpirun, its Slurm's files, and
	// (seen from a node) the node's NAS mount and scratch disk.
	State string
	// Nodes is how many.
	Nodes int
	// Subnet is the cluster's /24 without its last number ("10.216.7").
	Subnet string
	script string
}

// ClusterScript is examples/cluster/cluster.sh, found from this file.
func ClusterScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "cluster", "cluster.sh")
}

// StartCluster brings up an emulated cluster of n nodes for the test,
// with cluster.sh's options (--slurm, --nas DIR, …), under a name of its
// own; the test's cleanup takes it down and fails the test if anything
// of it is left: a namespace, a cgroup, a mount, a process, the state.
// The test is skipped where the kernel or the user cannot make network
// namespaces.
func StartCluster(t *testing.T, n int, options ...string) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testkit: an emulated cluster needs root (namespaces, cgroups, mounts): skipping")
	}
	probe := "brprobe" + randomHex(3)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("testkit: this kernel or user cannot make network namespaces (ip netns add: %v: %s): skipping", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	c := &Cluster{Name: "t" + randomHex(3), Nodes: n, script: ClusterScript()}
	c.State = "/run/brandrt-cluster-" + c.Name
	t.Cleanup(func() { c.down(t) })
	out, err := Run(2*time.Minute, nil, "bash", append([]string{c.script, "up", strconv.Itoa(n), "--name", c.Name}, options...)...)
	if err != nil {
		t.Fatalf("testkit: cluster.sh up %d: %v\n%s", n, err, out)
	}
	subnet, err := os.ReadFile(filepath.Join(c.State, "subnet"))
	if err != nil {
		t.Fatal(err)
	}
	c.Subnet = strings.TrimSpace(string(subnet))
	return c
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// Host returns node i's hostname (from 1).
func (c *Cluster) Host(i int) string { return fmt.Sprintf("%s-n%d", c.Name, i) }

// Addr returns node i's address.
func (c *Cluster) Addr(i int) string { return fmt.Sprintf("%s.%d", c.Subnet, i) }

// Mpirun is the cluster's mpirun: one slot per node, TCP between them.
func (c *Cluster) Mpirun() string { return filepath.Join(c.State, "mpirun") }

// Command returns a command that runs argv on node i, in its namespaces
// and cgroup.
func (c *Cluster) Command(i int, argv ...string) *exec.Cmd {
	return exec.Command("bash", append([]string{c.script, "exec", "--name", c.Name, strconv.Itoa(i), "--"}, argv...)...)
}

// LinkBytes returns the bytes node i's link carried so far, both ways
// (its veth's counters, on the host's side).
func (c *Cluster) LinkBytes(t *testing.T, i int) int64 {
	t.Helper()
	var sum int64
	for _, dir := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile(fmt.Sprintf("/sys/class/net/%s-h%d/statistics/%s", c.Name, i, dir))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		sum += n
	}
	return sum
}

// Slurm returns the cluster's Slurm (cluster.sh up --slurm), for Sbatch:
// its daemons are the cluster's, stopped with it.
func (c *Cluster) Slurm(t *testing.T) *Slurm {
	t.Helper()
	dir := filepath.Join(c.State, "slurm")
	return &Slurm{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Timeout: 5 * time.Minute, bin: findSlurm(t)}
}

// down takes the cluster down and checks that nothing of it is left.
func (c *Cluster) down(t *testing.T) {
	out, err := Run(time.Minute, nil, "bash", c.script, "down", "--name", c.Name)
	if err != nil {
		t.Errorf("testkit: cluster.sh down: %v\n%s", err, out)
	}
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("testkit: cluster %s left behind: %s", c.Name, strings.Join(left, "; "))
	}
}

// leftovers lists what of the cluster still exists.
func (c *Cluster) leftovers() []string {
	var left []string
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), c.Name+"-") {
		left = append(left, "network namespaces: "+strings.TrimSpace(string(out)))
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(out), " "+c.Name+"-") {
		left = append(left, "links")
	}
	for _, h := range []string{"memory", "cpuacct"} {
		if m, _ := filepath.Glob("/sys/fs/cgroup/" + h + "/" + c.Name + "-*"); len(m) > 0 {
			left = append(left, fmt.Sprintf("cgroups %v", m))
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), "brandrt-cluster-"+c.Name) {
		left = append(left, "mounts")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "brandrt-cluster-"+c.Name) {
			left = append(left, "process "+strings.ReplaceAll(strings.TrimSpace(string(b)), "\x00", " "))
		}
	}
	for _, d := range []string{c.State, "/var/tmp/brandrt-cluster-" + c.Name} {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}
