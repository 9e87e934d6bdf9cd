package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brandrt/brandrt/internal/testkit"
)

// skipShort skips a test of an emulated cluster in the -short pass (make
// test's second, under the race detector: the binary these tests run is
// not built with it).
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("an emulated cluster: not in -short")
	}
}

// clusterServe starts serve on every node of c through the cluster's
// mpirun (one rank per node, MPI over TCP), with args, and returns it
// and its output.
func clusterServe(t *testing.T, c *testkit.Cluster, args ...string) (*exec.Cmd, *testkit.Log) {
	t.Helper()
	return clusterServeOn(t, c, c.Nodes, args...)
}

// clusterServeOn is clusterServe on the first nodes nodes of c.
func clusterServeOn(t *testing.T, c *testkit.Cluster, nodes int, args ...string) (*exec.Cmd, *testkit.Log) {
	t.Helper()
	cmd := exec.Command(c.Mpirun(), append([]string{"-np", fmt.Sprint(nodes), binary(t), "serve"}, args...)...)
	out := new(testkit.Log)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _, _ = cmd.Process.Wait() })
	return cmd, out
}

// TestClusterCoLaunch: on two emulated nodes (hosts of their own to MPI:
// own hostname, address, /dev/shm), `mpirun --host` starts one rank per
// node, without --allow-shared-node, and each starts the training
// beside it. Both epochs deliver every file exactly once; every
// training process has MASTER_ADDR naming node 1, which resolves to its
// address on node 2; the files between the ranks crossed the nodes'
// links (as many bytes at least as the ranks say they sent); and the
// job ends with the training's status, 0, or 3 when node 2's fails with
// 3, naming that node.
func TestClusterCoLaunch(t *testing.T) {
	skipShort(t)
	needTorch(t)
	c := testkit.StartCluster(t, 2)
	const files = 480
	input, dir := packPaths(t, files, 5, 16, 2)
	outs := t.TempDir()
	js := filepath.Join(outs, "stats.json")
	loader, _ := filepath.Abs("../../python/tests/loader.py")
	script := fmt.Sprintf(`env > %s/env-$RANK; hostname > %s/host-$RANK; exec %s -W ignore %s --input %s --out %s/got-$RANK.json --workers 2 --epochs 2`,
		outs, outs, python, loader, input, outs)
	before := c.LinkBytes(t, 1) + c.LinkBytes(t, 2)
	cmd, out := clusterServe(t, c, "--chunks", dir, "--mem", "30%", "--stats-json", js, "--", "sh", "-c", script)
	if err := exitWithin(t, cmd, 90*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	crossed := c.LinkBytes(t, 1) + c.LinkBytes(t, 2) - before
	var all []delivery
	for r := range 2 {
		env := readEnv(t, filepath.Join(outs, fmt.Sprintf("env-%d", r)))
		host, _ := os.ReadFile(filepath.Join(outs, fmt.Sprintf("host-%d", r)))
		if strings.TrimSpace(string(host)) != c.Host(r+1) || env["MASTER_ADDR"] != c.Host(1) || env["RANK"] != fmt.Sprint(r) ||
			env["LOCAL_RANK"] != "0" || env["WORLD_SIZE"] != "2" {
			t.Errorf("training process %d ran on %q with MASTER_ADDR=%s RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s; want %s, %s, %d, 0, 2",
				r, strings.TrimSpace(string(host)), env["MASTER_ADDR"], env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], c.Host(r+1), c.Host(1), r)
		}
		all = append(all, deliveries(t, filepath.Join(outs, fmt.Sprintf("got-%d.json", r)), fmt.Sprintf("process %d", r))...)
	}
	for e := range 2 {
		onceEach(t, all, e, files)
	}
	if got, err := c.Command(2, "getent", "hosts", c.Host(1)).Output(); err != nil || !strings.HasPrefix(string(got), c.Addr(1)+" ") {
		t.Errorf("on node 2, %s resolves to %q (%v), want %s", c.Host(1), got, err, c.Addr(1))
	}
	var sent int64
	for _, st := range readStats(t, js) {
		sent += st.NetworkBytes
	}
	t.Logf("the ranks sent %d bytes to each other; the nodes' links carried %d", sent, crossed)
	if sent == 0 || crossed < sent {
		t.Errorf("the ranks sent %d bytes to each other, but the nodes' links carried %d: not over the network", sent, crossed)
	}

	fail := `if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 60`
	cmd, out = clusterServe(t, c, "--chunks", dir, "--mem", "30%", "--", "sh", "-c", fail)
	err := exitWithin(t, cmd, 30*time.Second)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(out.String(), "ended with status 3 on node "+c.Host(2)) {
		t.Fatalf("a training failing with 3 on node 2: %v\n%s", err, out)
	}
}

// TestClusterRankKilled: the rank of node 2 is killed mid-epoch; the job
// ends within 10 s, naming that node.
func TestClusterRankKilled(t *testing.T) {
	skipShort(t)
	c := testkit.StartCluster(t, 2)
	dir := servePack(t, 2000, 2, filepath.Join(t.TempDir(), "chunks"))
	js := filepath.Join(t.TempDir(), "stats.json")
	cmd, out := clusterServe(t, c, "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "100000", "--stats-json", js)
	waitFor(t, js, 30*time.Second)
	if killed := killRanksOn(t, c, 2); killed != 1 {
		t.Fatalf("killed %d ranks on node 2, want 1", killed)
	}
	start := time.Now()
	err := exitWithin(t, cmd, 10*time.Second)
	t.Logf("the job ended %v after the kill: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(out.String(), c.Host(2)) {
		t.Fatalf("the job: %v, and it does not name node %s:\n%s", err, c.Host(2), out)
	}
}

// TestClusterNodeLost: a training of 3 emulated nodes (co-launched
// train.py, DDP across the nodes, checkpoints every 4 steps on shared
// storage) loses node 3's rank at ~40 % of epoch 2; the job ends naming
// the node, and the same command on the 2 nodes left takes
// up from the last checkpoint, the ranks of nodes 1 and 2 serving node 3's
// shards too: across both runs every file of epoch 2 is trained on once,
// and epoch 3 whole.
func TestClusterNodeLost(t *testing.T) {
	skipShort(t)
	needTorch(t)
	c := testkit.StartCluster(t, 3)
	const files, batch = 480, 8
	tmp := t.TempDir()
	jpegs := makeJPEGs(t, tmp, files)
	dir := filepath.Join(tmp, "chunks")
	if _, errs, status := runCLI(t, "pack", "--input", jpegs, "--out", dir, "--chunk-files", "8"); status != 0 {
		t.Fatal(errs)
	}
	ckpt := filepath.Join(tmp, "ckpt")
	train, _ := filepath.Abs("../../examples/pytorch/train.py")
	// a killed training process leaves its multiprocessing directory
	// (pymp-*) in TMPDIR: the test's, removed when it ends
	pymp := t.TempDir()
	command := func(run string, more ...string) []string {
		return append([]string{"env", "TMPDIR=" + pymp, python, "-W", "ignore", train, "--num-classes", "4", "--epochs", "3", "--batch-size", fmt.Sprint(batch),
			"--workers", "2", "--checkpoint", ckpt, "--checkpoint-every", "4", "--log-files", filepath.Join(tmp, run+"-{rank}.log")}, more...)
	}
	serve := []string{"--chunks", dir, "--mem", "25%", "--epochs", "3"}

	cmd, out := clusterServe(t, c, append(append(serve, "--"), command("run1")...)...)
	killAt := files/3/batch + files/3*4/10/batch
	awaitStep(t, filepath.Join(tmp, "run1-0.log"), 2, killAt, out)
	if killed := killRanksOn(t, c, 3); killed != 1 {
		t.Fatalf("killed %d ranks on node 3, want 1", killed)
	}
	if err := exitWithin(t, cmd, 30*time.Second); err == nil || !strings.Contains(out.String(), c.Host(3)) {
		t.Fatalf("node 3's rank killed: %v, and the job does not name %s:\n%s", err, c.Host(3), out)
	}

	cmd, out = clusterServeOn(t, c, 2, append(append(serve, "--"), command("run2")...)...)
	if err := exitWithin(t, cmd, 2*time.Minute); err != nil {
		t.Fatalf("the job resumed on 2 nodes: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "was saved on 3 ranks") {
		t.Errorf("the resumed job does not say it took up a 3-rank job's state:\n%s", out)
	}
	_, step := resumedAt(t, out.String(), 0, 2)
	logs := func(run string, nodes int) []string {
		var l []string
		for r := range nodes {
			l = append(l, filepath.Join(tmp, fmt.Sprintf("%s-%d.log", run, r)))
		}
		return l
	}
	checkTakenUp(t, logs("run1", 3), logs("run2", 2), step, files)
}

// killRanksOn kills (SIGKILL) the brandrt ranks running on node i of c
// and returns how many it killed.
func killRanksOn(t *testing.T, c *testkit.Cluster, i int) int {
	t.Helper()
	pids, _ := exec.Command("ip", "netns", "pids", c.Host(i)).Output()
	killed := 0
	for _, p := range strings.Fields(string(pids)) {
		if b, _ := os.ReadFile("/proc/" + p + "/cmdline"); strings.HasPrefix(string(b), binary(t)+"\x00serve\x00") {
			var pid int
			fmt.Sscan(p, &pid)
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	return killed
}

// TestClusterSlurm: on two emulated nodes running Slurm, with the packed
// dataset on the cluster's NAS, `sbatch -N 2 examples/slurm/train.sbatch`
// stages each rank's shard to its node's scratch disk and trains one
// model over both nodes; the job's exit code is the training's: 0, and 4
// when the training fails with 4.
func TestClusterSlurm(t *testing.T) {
	skipShort(t)
	needTorch(t)
	nas := t.TempDir()
	if out, err := exec.Command(python, "../../examples/pytorch/make_jpegs.py", "--out", filepath.Join(nas, "jpegs"), "--classes", "4",
		"--images", "320", "--size", "32").CombinedOutput(); err != nil {
		t.Fatalf("make_jpegs: %v\n%s", err, out)
	}
	if _, errs, status := runCLI(t, "pack", "--input", filepath.Join(nas, "jpegs"), "--out", filepath.Join(nas, "chunks"), "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	c := testkit.StartCluster(t, 2, "--slurm", "--nas", nas)
	s := c.Slurm(t)
	train, _ := filepath.Abs("../../examples/pytorch/train.py")
	env := []string{"CHUNKS=" + filepath.Join(c.State, "nas", "chunks"), "STAGE=" + filepath.Join(c.State, "scratch"), "BRANDRT=" + binary(t),
		"MEM=25%", "TRAIN=" + python + " -W ignore " + train + " --num-classes 4 --epochs 1 --batch-size 16"}
	out, code := s.SbatchWith(t, "../../examples/slurm/train.sbatch", []string{"-N", "2", "--cpus-per-task", "1"}, env...)
	if code != 0 || !strings.Contains(out, "epoch 1 from brandrt, 2 training processes") || !strings.Contains(out, "check    every file delivered exactly once") {
		t.Fatalf("sbatch -N 2: exit code %d\n%s", code, out)
	}
	for i := 1; i <= 2; i++ {
		if copies, _ := filepath.Glob(fmt.Sprintf("/var/tmp/brandrt-cluster-%s/n%d/chunks-*.rank-%d", c.Name, i, i-1)); len(copies) != 1 {
			t.Errorf("node %d's scratch holds %v, want rank %d's copy", i, copies, i-1)
		}
	}
	fails := writeScript(t, "fails.sh", "exit 4\n")
	env[len(env)-1] = "TRAIN=sh " + fails
	if out, code := s.SbatchWith(t, "../../examples/slurm/train.sbatch", []string{"-N", "2", "--cpus-per-task", "1"}, env...); code != 4 {
		t.Errorf("a training that fails with 4: exit code %d\n%s", code, out)
	}
}

// TestClusterRequeue: on three emulated nodes running Slurm, node 3
// drained, `sbatch --requeue -N 2-3 examples/slurm/train.sbatch` (CKPT
// set: checkpoints every 4 steps) trains on 2 nodes. Node 3 comes back,
// and at ~40 % of epoch 2 the job is requeued (scontrol requeue, what
// Slurm does to a --requeue job whose node failed) and given 3 nodes
// (Slurm keeps a requeued job's node and task counts: scontrol update):
// the same script with the same environment runs again, now on 3 nodes,
// and takes up from the last checkpoint, the 3 ranks serving the 2-rank
// job's state. Across
// both runs every file of epoch 2 is trained on once, and epoch 3 whole.
func TestClusterRequeue(t *testing.T) {
	skipShort(t)
	needTorch(t)
	const files, batch = 480, 8
	nas, tmp := t.TempDir(), t.TempDir()
	if out, err := exec.Command(python, "../../examples/pytorch/make_jpegs.py", "--out", filepath.Join(nas, "jpegs"), "--classes", "4",
		"--images", fmt.Sprint(files), "--size", "32").CombinedOutput(); err != nil {
		t.Fatalf("make_jpegs: %v\n%s", err, out)
	}
	if _, errs, status := runCLI(t, "pack", "--input", filepath.Join(nas, "jpegs"), "--out", filepath.Join(nas, "chunks"), "--chunk-files", "8", "--shards", "6"); status != 0 {
		t.Fatal(errs)
	}
	c := testkit.StartCluster(t, 3, "--slurm", "--nas", nas)
	s := c.Slurm(t)
	slurm := func(name string, args ...string) string {
		out, err := s.Command(name, args...)
		if err != nil {
			t.Error(err)
		}
		return out
	}
	slurm("scontrol", "update", "nodename="+c.Host(3), "state=drain", "reason=brandrt-test")
	train, _ := filepath.Abs("../../examples/pytorch/train.py")
	log := filepath.Join(tmp, "train-{rank}.log")
	env := []string{"CHUNKS=" + filepath.Join(c.State, "nas", "chunks"), "BRANDRT=" + binary(t), "MEM=25%", "CKPT=" + filepath.Join(tmp, "ckpt"), "CKPT_EVERY=4",
		fmt.Sprintf("TRAIN=env TMPDIR=%s %s -W ignore %s --num-classes 4 --epochs 3 --batch-size %d --workers 2 --log-files %s", t.TempDir(), python, train, batch, log)}
	requeued := make(chan struct{})
	go func() { // run 1, on 2 nodes: node 3 back meanwhile, the job requeued at 40 % of epoch 2
		defer close(requeued)
		rank0 := strings.ReplaceAll(log, "{rank}", "0")
		reach := func(epoch, step int) bool {
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if b, _ := os.ReadFile(rank0); strings.Contains(string(b), fmt.Sprintf("\n%d %d ", epoch, step)) {
					return true
				}
				if time.Now().After(deadline) {
					t.Errorf("rank 0 never reached step %d of epoch %d", step, epoch)
					return false
				}
			}
		}
		if !reach(1, 1) {
			return
		}
		slurm("scontrol", "update", "nodename="+c.Host(3), "state=resume")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if st := slurm("sinfo", "--noheader", "--nodes", c.Host(3), "--format", "%T"); strings.TrimSpace(st) == "idle" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node 3 is not idle a minute after it was resumed")
				return
			}
		}
		if !reach(2, files/2/batch+files/2*4/10/batch) {
			return
		}
		job := strings.TrimSpace(slurm("squeue", "--noheader", "--format", "%i"))
		slurm("scontrol", "requeue", job)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if st := slurm("squeue", "--noheader", "--format", "%T %r", "--job", job); strings.HasPrefix(st, "PENDING") {
				// Slurm holds a requeued job back for a while (Reason=BeginTime)
				// and keeps the node and task counts it ran with (NumNodes=2
				// NumTasks=2, though submitted with -N 2-3): raised to 3, as an
				// administrator would to give it the node that came back
				slurm("scontrol", "update", "jobid="+job, "NumNodes=3", "NumTasks=3", "StartTime=now")
				return
			}
		}
	}()
	out, code := s.SbatchWith(t, "../../examples/slurm/train.sbatch", []string{"--requeue", "-N", "2-3", "--cpus-per-task", "1"}, env...)
	<-requeued
	if code != 0 || !strings.Contains(out, "on 3 node(s)") || !strings.Contains(out, "was saved on 2 ranks") {
		t.Fatalf("the requeued job: exit code %d; want 0, on 3 nodes, taking up the 2-rank job's state:\n%s", code, out)
	}
	_, step := resumedAt(t, out, 0, 2)
	runs := func(r int) []string { return trainRuns(t, strings.ReplaceAll(log, "{rank}", fmt.Sprint(r))) }
	var run1, run2 []string
	for r := range 3 {
		rs := runs(r)
		if r < 2 && len(rs) != 2 || r == 2 && len(rs) != 1 {
			t.Fatalf("rank %d's log holds %d runs", r, len(rs))
		}
		if r < 2 {
			run1 = append(run1, rs[0])
		}
		run2 = append(run2, rs[len(rs)-1])
	}
	checkTakenUp(t, run1, run2, step, files)
}

// TestClusterNodesShareNoPageCache: the nodes read the NAS through mounts
// of their own, so a file one node has in its page cache still crosses
// the NAS's link when another node reads it; read again on the same node,
// it does not.
func TestClusterNodesShareNoPageCache(t *testing.T) {
	skipShort(t)
	nas := t.TempDir()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(nas, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := testkit.StartCluster(t, 2, "--nas", nas)
	sent := func() int64 { // the NAS's link, from its side
		b, err := os.ReadFile(fmt.Sprintf("/sys/class/net/%s-hnas/statistics/rx_bytes", c.Name))
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		fmt.Sscan(string(b), &n)
		return n
	}
	read := func(node int) int64 {
		before := sent()
		if out, err := c.Command(node, "cat", filepath.Join(c.State, "nas", "f")).Output(); err != nil || len(out) != len(data) {
			t.Fatalf("node %d read %d bytes: %v", node, len(out), err)
		}
		return sent() - before
	}
	first, again, other := read(1), read(1), read(2)
	t.Logf("over the NAS's link: node 1 read 8 MiB, %d bytes; again, %d; node 2, %d", first, again, other)
	if first < int64(len(data)) || again > int64(len(data))/8 || other < int64(len(data)) {
		t.Errorf("an 8 MiB file: node 1 read it with %d bytes over the NAS's link, then with %d, node 2 with %d; "+
			"want the file's size, almost nothing, the file's size", first, again, other)
	}
}

// TestReadmeCluster runs the README's block "Trying several nodes on one
// machine" line by line as written (a fresh Debian machine's python3
// first on PATH), but for what a test must own: the cluster's name (the
// test's, in place of bc), its NAS (a packed dataset of 10 classes of
// JPEGs, in place of /data), bin/brandrt (the test's build), sbatch
// waiting for its job (--wait, the job's output in the test's directory),
// the shell on node 2 (interactive: left out) and `down`, which the
// test's cleanup runs. The co-launched training and the batch job each
// train an epoch on 3 nodes, every file delivered once.
func TestReadmeCluster(t *testing.T) {
	skipShort(t)
	needTorch(t)
	var lines []string
	for _, l := range strings.Split(readmeBlock(t, "sh", "examples/cluster/cluster.sh up "), "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	nas, tmp := t.TempDir(), t.TempDir()
	if out, err := exec.Command(python, "../../examples/pytorch/make_jpegs.py", "--out", filepath.Join(nas, "jpegs"), "--classes", "10",
		"--images", "300", "--size", "32").CombinedOutput(); err != nil {
		t.Fatalf("make_jpegs: %v\n%s", err, out)
	}
	if _, errs, status := runCLI(t, "pack", "--input", filepath.Join(nas, "jpegs"), "--out", filepath.Join(nas, "chunks"), "--chunk-files", "16", "--ranks", "3"); status != 0 {
		t.Fatal(errs)
	}
	up := strings.Fields(strings.ReplaceAll(lines[0], "/data", nas))
	nodes, err := strconv.Atoi(up[2])
	if err != nil {
		t.Fatalf("README's %q: %v", lines[0], err)
	}
	c := testkit.StartCluster(t, nodes, up[3:]...)
	var script []string
	for _, l := range lines[1:] {
		if strings.Contains(l, "cluster.sh exec") || strings.Contains(l, "cluster.sh down") {
			continue
		}
		l = strings.ReplaceAll(l, "brandrt-cluster-bc", "brandrt-cluster-"+c.Name)
		l = strings.ReplaceAll(l, "$PWD/bin/brandrt", "bin/brandrt")
		l = strings.ReplaceAll(l, "bin/brandrt", binary(t))
		l = strings.ReplaceAll(l, " sbatch ", fmt.Sprintf(" sbatch --wait --output %s/job-%%j.out ", tmp))
		script = append(script, l)
	}
	root, _ := filepath.Abs("../..")
	out, err := testkit.Run(5*time.Minute, []string{"PATH=/usr/bin:/bin:" + os.Getenv("PATH")},
		"bash", "-euo", "pipefail", "-c", fmt.Sprintf("cd %q\n%s", root, strings.Join(script, "\n")))
	if err != nil {
		t.Fatalf("the README's block, run as\n%s\n: %v\n%s", strings.Join(script, "\n"), err, out)
	}
	jobs, _ := filepath.Glob(filepath.Join(tmp, "job-*.out"))
	if len(jobs) != 1 {
		t.Fatalf("the batch job's output: %v", jobs)
	}
	job, _ := os.ReadFile(jobs[0])
	for what, said := range map[string]string{"the co-launched training": string(out), "the batch job": string(job)} {
		if !strings.Contains(said, "epoch 1 from brandrt, 3 training processes") || !strings.Contains(said, "check    every file delivered exactly once") {
			t.Errorf("%s did not train an epoch on 3 nodes, every file once:\n%s", what, said)
		}
	}
}
