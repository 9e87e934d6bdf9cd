"""The loader benchmark on an emulated cluster (loaders.py --nodes N): every
system runs on all N nodes of examples/cluster/cluster.sh at once, each
node's processes in that node's cgroups, reading through that node's own
mount of the one emulated NAS.

Each node gets the same memory: its budget (its share of --mem, or
--node-mem) plus --allowance, the limit of its memory cgroup, page cache
and shared memory counted. On every node a runner (runner.py) reads its
share of each epoch through the system's DataLoader; the runners form a
gloo process group, and an epoch ends when its slowest node ends. brandrt
runs as one rank per node, started through the cluster's mpirun (MPI over
the nodes' links), each node's runner reading from its node's rank.

What the run measured comes from the kernel: the bytes the NAS sent over
its one link, the bytes that went into the nodes over theirs less those
(between the nodes), the CPU of the nodes' cgroups (their NAS clients
included), the peak of each node's memory cgroup, and the peak of its
child group that holds what mpirun started there (orted and the rank).
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import cgroups
import prepare
import report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "examples", "cluster", "cluster.sh")
NAME = "bb"  # the benchmark's cluster: hosts bb-n1, …


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


class Cluster:
    """An emulated cluster of n nodes with the whole file system as its NAS
    (so the benchmark's formats are read through it), up for a with block."""

    def __init__(self, a, n):
        self.a, self.n = a, n
        self.state = "/run/brandrt-cluster-" + NAME

    def __enter__(self):
        subprocess.run(["bash", SCRIPT, "up", str(self.n), "--name", NAME, "--nas", "/", "--nas-rate", self.a.nas_rate,
                        "--nas-delay", self.a.nas_delay, "--nic", self.a.nic], check=True, stdout=sys.stderr)
        return self

    def __exit__(self, *exc):
        subprocess.run(["bash", SCRIPT, "down", "--name", NAME], check=False)

    def host(self, i):
        return "%s-n%d" % (NAME, i)

    def nas(self, path):
        """Where path of this machine is, seen through a node's NAS mount."""
        return self.state + "/nas" + path

    def group(self, i):
        return cgroups.Group.existing(self.host(i))

    def mpirun(self):
        return os.path.join(self.state, "mpirun")


def available():
    """'' where an emulated cluster can be made here, else why not."""
    if os.geteuid() != 0:
        return "an emulated cluster needs root"
    probe = "bbprobe%d" % os.getpid()
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return "this kernel cannot make network namespaces (%s)" % p.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return ""


def budget_bytes(mem, cat, nodes):
    """A node's budget: its share of a percentage of the dataset (the
    nodes' memory together holds it), or a size per node."""
    kind, v = mem
    return int(cat["bytes"] * v / 100 / nodes) if kind == "%" else int(v)


def run(a, cl, cat, mem, label, system, k, n, serve_flags):
    """One system's run on every node of cl, with memory mem (labelled
    label); returns its record."""
    nodes = cl.n
    budget = budget_bytes(mem, cat, nodes)
    limit = budget + a.allowance
    work = os.path.abspath(a.work)
    rec = {"system": system, "storage": "nas", "nodes": nodes, "mem": label, "budget_bytes": budget,
           "limit_bytes": limit, "chunk_files": k, "files": len(cat["files"]), "dataset_bytes": cat["bytes"],
           "workers": a.workers, "batch_size": a.batch_size, "step_s": a.step, "epochs": []}
    groups = [cl.group(i) for i in range(1, nodes + 1)]
    oom0 = []
    for g in groups:
        g.kill()
        g._write("memory", "memory.limit_in_bytes", str(limit))
        g._write("memory", "memory.max_usage_in_bytes", "0")
        g.child("mpi")._write("memory", "memory.max_usage_in_bytes", "0")
        oom0.append(g.memory()["oom_kills"])
    port = 20000 + random.randrange(20000)
    spec = {"system": system, "root": cl.nas(work), "input": cl.nas(cat["input"]), "catalog": os.path.join(work, "files.json"),
            "budget": budget, "workers": a.workers, "batch_size": a.batch_size, "step_s": a.step, "epochs": a.epochs, "threads": a.threads,
            "pipe_size": a.pipe_size, "stall_s": a.stall, "peers_inline": a.peers_inline, "chunk_files": k, "brandrt": os.path.abspath(a.brandrt),
            "repo": REPO, "world": nodes, "master": cl.host(1), "port": port,
            "peers": [[cl.host(i), port + 1] for i in range(1, nodes + 1)],
            "net_dev": NAME + "-hnas", "node_devs": ["%s-h%d" % (NAME, i) for i in range(1, nodes + 1)],
            "groups": [h for i in range(1, nodes + 1) for h in (cl.host(i), cl.host(i) + "-fs")],
            "owner": os.getpid()}
    tmp = tempfile.mkdtemp(prefix="brandrt-bench-%d-%d-" % (os.getpid(), n), dir="/tmp")
    procs, serve, killed = [], None, threading.Event()
    timer = threading.Timer(a.timeout, lambda: (killed.set(), [g.kill() for g in groups]))
    timer.daemon = True
    try:
        cgroups.drop_caches()
        cmd = None
        if system.startswith("brandrt"):
            chunks = cl.nas(os.path.join(work, chunks_name(k, nodes)))
            cmd = [cl.mpirun(), "-np", str(nodes), spec["brandrt"], "serve", "--chunks", chunks, "--mem", str(budget),
                   "--readers", str(max(1, a.workers)), "--epochs", str(a.epochs), "--seed", "1", "--stats-json", os.path.join(tmp, "stats.json")] + serve_flags
            serve_log = open(os.path.join(tmp, "serve.log"), "w+")
        for i in range(1, nodes + 1):
            node_tmp = os.path.join(tmp, "n%d" % i)
            os.mkdir(node_tmp)
            path = os.path.join(node_tmp, "spec.json")
            with open(path, "w") as f:
                json.dump(dict(spec, rank=i - 1, group=cl.host(i)), f)
            out = subprocess.PIPE if i == 1 else open(os.path.join(node_tmp, "out"), "w")
            procs.append(subprocess.Popen(["bash", SCRIPT, "exec", "--name", NAME, str(i), "--", sys.executable, "-W", "ignore",
                                           os.path.join(HERE, "runner.py"), path], stdout=out,
                                          stderr=open(os.path.join(node_tmp, "err"), "w"), text=True,
                                          env=dict(os.environ, TMPDIR=node_tmp), start_new_session=True))
        timer.start()
        held, held_mpi = [0] * nodes, [0] * nodes
        sampler = threading.Thread(target=sample_held, args=(groups, procs[0], held, held_mpi), daemon=True)
        sampler.start()
        for line in procs[0].stdout:
            # the runners started their cold epoch's clock: brandrt's
            # ranks start now, not before (they read as soon as they serve)
            if cmd and serve is None and '"event": "go"' in line:
                serve = subprocess.Popen(cmd, stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True)
                # serve refusing to start ends the run at once, not when
                # the runners give up waiting for their ranks
                threading.Thread(target=lambda: serve.wait() and [g.kill() for g in groups], daemon=True).start()
            take(rec, line, system, k)
        for p in procs:
            p.wait()
        for i, p in enumerate(procs[1:], 2):  # what the other nodes said of an error
            with open(os.path.join(tmp, "n%d" % i, "out")) as f:
                for line in f:
                    if '"error"' in line and "error" not in rec:
                        take(rec, line, system, k)
        timer.cancel()
        if serve is not None:
            try:
                serve.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, 9)
                serve.wait()
            serve_log.seek(0)
            rec.setdefault("own", {})["serve_exit"] = serve.returncode
            rec["own"]["serve_log"] = serve_log.read()[-3000:]
            try:
                with open(os.path.join(tmp, "stats.json")) as f:
                    rec["own"]["stats"] = [json.loads(line) for line in f if line.strip()]
            except OSError:
                pass
            # serve's own failure is the cause of whatever the runners saw;
            # killed by a signal after a runner failed, it is not
            if serve.returncode > 0 or (serve.returncode < 0 and "error" not in rec):
                rec["error"] = "brandrt serve exit status %d: %s" % (serve.returncode, _first_error(rec["own"]["serve_log"]))
        for g in groups:
            g.kill()
        sampler.join(timeout=5)
        mems = [g.memory() for g in groups]
        # what mpirun started on each node (orted and its rank), apart
        mpi = [g.child("mpi").memory()["peak_bytes"] for g in groups]
        rec["memory"] = {"peak_bytes": max(m["peak_bytes"] for m in mems), "per_node_peak_bytes": [m["peak_bytes"] for m in mems],
                         "per_node_mpi_peak_bytes": mpi, "per_node_mpi_held_peak_bytes": held_mpi,
                         "oom_kills": sum(m["oom_kills"] for m in mems) - sum(oom0), "held_peak_bytes": max(held),
                         "limit_bytes": limit}
        finish(rec, a, procs, killed, tmp)
        return rec
    finally:
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
        if serve is not None and serve.poll() is None:
            os.killpg(serve.pid, 9)
        for g in groups:
            g.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def _first_error(log):
    """serve's first line that says what went wrong, else the end of its
    output."""
    for line in log.splitlines():
        if line.startswith("brandrt: ") and ("rt:" in line or "error" in line):
            return line[:500]
    return log[-300:]


def take(rec, line, system, k, storage="nas"):
    """Takes one event a runner printed into the run's record (loaders.py
    takes them so too)."""
    try:
        ev = json.loads(line)
    except ValueError:
        return
    if ev["event"] == "start":
        rec["startup_s"] = ev["startup_s"]
    elif ev["event"] == "epoch":
        del ev["event"]
        rec["epochs"].append(ev)
        log("  %s epoch %d: %s" % (system + (" K=%d" % k if k else ""), ev["epoch"], report.epoch_line(ev, storage)))
    elif ev["event"] == "end":
        rec.setdefault("own", {}).update(ev.get("own", {}))
    elif ev["event"] == "error" and "error" not in rec:
        rec["error"] = ev["error"]
        rec["trace"] = ev.get("trace")


def finish(rec, a, procs, killed, tmp):
    """The run's status, from what it printed, the kernel and its exits."""
    if rec["memory"]["oom_kills"]:
        rec["error"] = "a process killed by the kernel: out of memory (limit %s per node)%s" % (
            report.human_bytes(rec["limit_bytes"]), "; then " + rec["error"] if "error" in rec else "")
    bad = [(i, p.returncode) for i, p in enumerate(procs, 1) if p.returncode != 0]
    if bad and "error" not in rec:
        i, code = bad[0]
        with open(os.path.join(tmp, "n%d" % i, "err")) as f:
            err = f.read()[-500:].strip()
        rec["error"] = ("timed out after %.0f s" % a.timeout) if killed.is_set() else \
            "node %d: exit status %d: %s" % (i, code, err)
    if len(rec["epochs"]) < a.epochs and "error" not in rec:
        rec["error"] = "stopped after %d of %d epochs" % (len(rec["epochs"]), a.epochs)
    bad = [e for e in rec["epochs"] if e["check"] != "ok"]
    if bad and "error" not in rec:
        rec["error"] = "epoch %d: %s" % (bad[0]["epoch"], bad[0]["check"])
    rec["status"] = "failed" if "error" in rec else "ok"
    if rec["status"] == "failed":
        log("  %s failed: %s" % (rec["system"], rec["error"]))


def sample_held(groups, proc, held, held_mpi):
    """Each node's peak of held memory (rss and shmem) while proc runs,
    and that of what mpirun started on it (its mpi group)."""
    mpi = [g.child("mpi") for g in groups]
    while proc.poll() is None:
        for i, g in enumerate(groups):
            try:
                held[i] = max(held[i], g.held())
                held_mpi[i] = max(held_mpi[i], mpi[i].held())
            except OSError:
                return
        time.sleep(0.05)


def chunks_name(k, nodes):
    """The packed dataset's directory for K and a number of ranks."""
    return prepare.chunks_name(k, nodes)
