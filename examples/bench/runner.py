"""One system's run of the loader benchmark, inside its cgroup:

    runner.py SPEC.json

Builds the system (systems.py), reads spec['epochs'] epochs through it,
and prints one JSON object per line on stdout: {"event": "start"} once the
system is built, {"event": "epoch", …} after each epoch, {"event": "end"}
or {"event": "error"}. The counters of an epoch are differences, taken
right before the epoch's first request and right after its last file:
read_bytes from the cgroup's block-device accounting, net_bytes from the
NAS link (the veth's received bytes), cpu_s from the cgroup's cpuacct (every
process of the run: DataLoader workers, the main process, mpirun and the
brandrt rank), and cpu_by the same split by process (CPUSplit: main,
workers, rank, other). Every file delivered is counted against the dataset's
catalog: each must arrive exactly once per epoch, with its label.

On an emulated cluster (spec['world'] > 1, loaders.py --nodes) a runner
runs on every node, in the node's cgroup, and the runners form a gloo
process group as a DDP job's processes do (so that every peer finds its
rank and world where its documentation says). Every epoch starts and ends
with a barrier: it lasts as long as its slowest node. The runner of rank 0
reads the cluster's counters between the barriers (the NAS link, the
nodes' links, the nodes' cgroups), gathers what every node delivered,
checks it against the catalog and prints the epoch.
"""

import array
import collections
import json
import os
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
import prepare  # noqa: E402
import systems  # noqa: E402


def emit(**kw):
    print(json.dumps(kw), flush=True)


def link_bytes(dev, direction):
    with open("/sys/class/net/%s/statistics/%s_bytes" % (dev, direction)) as f:
        return int(f.read())


class Counters:
    """The run's cgroup counters (cgroups.Group.counters), and the NAS
    link's received bytes; on a cluster, every node's cgroups (the node's
    and its NAS client's) and the bytes its link carried into the node."""

    def __init__(self, spec):
        self.groups = [cgroups.Group.existing(g, spec.get("device")) for g in spec.get("groups", [spec["group"]])]
        self.net = spec.get("net_dev")
        self.nodes = spec.get("node_devs", [])

    def read(self):
        out = {"read_bytes": 0, "cpu_ns": 0, "net_bytes": 0, "into_nodes": 0}
        out["busy_ticks"], out["all_ticks"] = machine_ticks()
        for g in self.groups:
            for k, v in g.counters().items():
                out[k] += v
        if self.net:
            out["net_bytes"] = link_bytes(self.net, "rx")
        for dev in self.nodes:  # the host's side of a node's veth sends into the node
            out["into_nodes"] += link_bytes(dev, "tx")
        return out


HZ = os.sysconf("SC_CLK_TCK")


def machine_ticks():
    """(busy, all) clock ticks of every core of the machine (/proc/stat):
    whatever ran, the kernel's network and FUSE work and the emulated
    NAS's server included; idle and I/O wait are not busy."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return sum(t[:8]) - t[3] - t[4], sum(t[:8])


def machine_busy(c0, c1):
    """The share of the machine's cores busy between two Counters reads."""
    return (c1["busy_ticks"] - c0["busy_ticks"]) / max(1, c1["all_ticks"] - c0["all_ticks"])

# What each process of a run is, for the split of its CPU seconds.
KINDS = ("main", "workers", "rank", "other")


def _proc(pid):
    """(CPU seconds, parent pid, command line) of process pid, or None
    once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            f = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/cmdline" % pid, "rb") as c:
            cmd = c.read().split(b"\0")
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / HZ, int(f[1]), cmd


def kind(pid, parent, cmd):
    """The part of a run process pid plays: this main process; its
    DataLoader workers (its children that run Python); a brandrt rank;
    anything else (mpirun and its daemons, peers' helpers)."""
    if pid == os.getpid():
        return "main"
    if cgroups.is_rank(cmd):
        return "rank"
    if parent == os.getpid() and cmd and b"python" in os.path.basename(cmd[0]):
        return "workers"
    return "other"


class CPUSplit:
    """The CPU seconds of a run's processes by kind (KINDS), between
    two readings: each live process of the cgroup counts in its kind; what
    the cgroup spent that no live process shows (processes that ended)
    counts as other."""

    def __init__(self, group):
        self.group = group

    def read(self):
        """(the cgroup's CPU ns, {pid: (kind, CPU s)})."""
        total = self.group.counters()["cpu_ns"] if self.group else 0
        procs = {}
        for pid in (self.group.pids() if self.group else [os.getpid()]):
            p = _proc(pid)
            if p:
                procs[pid] = (kind(pid, p[1], p[2]), p[0])
        return total, procs

    @staticmethod
    def between(a, b):
        """{kind: CPU seconds} from reading a to reading b."""
        out = dict.fromkeys(KINDS, 0.0)
        for pid, (k, s) in b[1].items():
            out[k] += s - a[1].get(pid, (k, 0.0))[1]
        out["other"] += max(0.0, (b[0] - a[0]) / 1e9 - sum(out.values()))
        return out


class NodeSplit:
    """A cluster node's CPU seconds by kind: its processes' (CPUSplit
    over the node's cgroup) and its NAS client's (sshfs, in a cgroup of
    its own)."""

    KINDS = KINDS + ("nas client",)

    def __init__(self, node, fs):
        self.split, self.fs = CPUSplit(node), fs

    def read(self):
        try:
            fs = self.fs.counters()["cpu_ns"]
        except OSError:  # a node without a NAS client of its own
            fs = 0
        return self.split.read(), fs

    @staticmethod
    def between(a, b):
        return dict(CPUSplit.between(a[0], b[0]), **{"nas client": (b[1] - a[1]) / 1e9})

    @staticmethod
    def node_seconds(a, b):
        """The CPU seconds of the node's cgroup (its NAS client's not
        included) between two readings."""
        return (b[0][0] - a[0][0]) / 1e9


class Prints:
    """A multiset of delivered files' fingerprints (prepare.fingerprint:
    size, two CRCs, label), or of their sizes alone, in four arrays: 24
    bytes a file. A Counter of tuples took ~300 bytes a file, 120 MiB of
    the runner's for 400,000 files, in the cgroup beside the system
    measured."""

    def __init__(self, prints=()):
        self.cols = (array.array("Q"), array.array("I"), array.array("I"), array.array("q"))
        for p in prints:
            self.add(p)

    def add(self, p):
        """p: a fingerprint, or a size."""
        n, a, b, label = (p, 0, 0, 0) if isinstance(p, int) else p
        self.cols[0].append(n)
        self.cols[1].append(a)
        self.cols[2].append(b)
        self.cols[3].append(label)

    def extend(self, other):
        for mine, theirs in zip(self.cols, other.cols):
            mine.extend(theirs)

    def __len__(self):
        return len(self.cols[0])

    def sorted(self):
        """The fingerprints as one sorted numpy array."""
        import numpy as np

        out = np.empty(len(self), dtype=[("n", "<u8"), ("a", "<u4"), ("b", "<u4"), ("l", "<i8")])
        for name, col in zip(("n", "a", "b", "l"), self.cols):
            out[name] = np.frombuffer(col, dtype=out.dtype[name]) if len(col) else []
        out.sort()
        return out

    def counter(self, sizes_only):
        if sizes_only:
            return collections.Counter(self.cols[0])
        return collections.Counter(zip(*self.cols))


def verdict(seen, want, sizes_only):
    """'ok', or what differs between the delivered (Prints) and the
    expected files (Prints.sorted)."""
    import numpy as np

    if len(seen) == len(want) and np.array_equal(seen.sorted(), want):
        return "ok"
    seen = seen.counter(sizes_only)
    want = collections.Counter(int(r["n"]) if sizes_only else tuple(int(x) for x in r) for r in want)
    missing = sum((want - seen).values())
    extra = sum((seen - want).values())
    dup = sum(n - 1 for n in seen.values() if n > 1)
    what = "sizes" if sizes_only else "files"
    return "%s differ: %d missing, %d unexpected (%d repeats)" % (what, missing, extra, dup)


def expected(cat, sizes_only):
    """The files an epoch must deliver (Prints.sorted). The catalog is
    then emptied: what the system made of it, it keeps; the rest (every
    file's path, size, label and fingerprint, 0.6 KiB a file as Python
    objects) would sit in the cgroup beside the system measured."""
    want = Prints(s for _, s, _ in cat["files"]) if sizes_only else Prints(tuple(p) for p in cat["prints"])
    cat.clear()  # JSON's objects hold no cycles: they go at once
    return want.sorted()


def run(spec):
    with open(spec["catalog"]) as f:
        cat = json.load(f)
    start = time.monotonic()
    if "master" in spec:  # on a cluster, of one node too
        return run_node(spec, cat, start)
    # Epoch 1 counts from before the system is made: whatever a system
    # reads or spends while it starts (brandrt's rank reads ahead as soon
    # as it serves) belongs to its cold epoch.
    counters = Counters(spec)
    split = CPUSplit(cgroups.Group.existing(spec["group"]) if spec.get("group") else None)
    made = counters.read(), time.monotonic(), split.read()
    system = systems.make(spec, cat)
    emit(event="start", startup_s=time.monotonic() - start)
    sizes_only = system.check == "sizes"
    want = expected(cat, sizes_only)
    progress = [time.monotonic()]
    threading.Thread(target=watchdog, args=(progress, spec.get("stall_s", 300)), daemon=True).start()
    try:
        for e in range(spec["epochs"]):
            c0, t0, s0 = made if e == 0 else (counters.read(), time.monotonic(), split.read())
            got = read_epoch(system, e, progress, sizes_only, spec.get("step_s", 0))
            t1, c1, s1 = time.monotonic(), counters.read(), split.read()
            emit(event="epoch", epoch=e + 1, files=got["files"], bytes=got["bytes"], seconds=t1 - t0,
                 first_batch_s=got["first_batch_s"], read_bytes=c1["read_bytes"] - c0["read_bytes"],
                 net_bytes=c1["net_bytes"] - c0["net_bytes"], cpu_s=(c1["cpu_ns"] - c0["cpu_ns"]) / 1e9,
                 cpu_by=CPUSplit.between(s0, s1), machine_busy=machine_busy(c0, c1),
                 check=verdict(got["seen"], want, sizes_only))
    finally:
        system.close()
    emit(event="end", own=system.own())


def read_epoch(system, e, progress, sizes_only, step=0):
    """Reads epoch e through the system: {files, bytes, first_batch_s (from
    the call), seen (Prints of the files' fingerprints, or sizes)};
    progress[0] is set at every batch, for the watchdog. step: the
    training's seconds per batch, slept after each, holding it (a GPU's
    step)."""
    fp = prepare.fingerprint
    seen, files, nbytes, first, t0 = Prints(), 0, 0, None, time.monotonic()
    for datas, labels in system.epoch(e):
        progress[0] = time.monotonic()
        if first is None:
            first = progress[0] - t0
        labels = labels.tolist() if hasattr(labels, "tolist") else labels
        for d, l in zip(datas, labels):
            files += 1
            nbytes += len(d)
            d[::4096]  # a byte of every page: every system's files are read where they are
            seen.add(len(d) if sizes_only else fp(d, l))
        if step:
            time.sleep(step)
    return {"files": files, "bytes": nbytes, "first_batch_s": first, "seen": seen}


def join_cluster(spec):
    """The gloo process group of the runners (one per node), and the
    variables a DDP job's processes see, which the peers read."""
    import torch.distributed as dist

    os.environ.update(RANK=str(spec["rank"]), WORLD_SIZE=str(spec["world"]), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR=spec["master"], MASTER_PORT=str(spec["port"]), NODE_RANK=str(spec["rank"]))
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (spec["master"], spec["port"]), world_size=spec["world"],
                            rank=spec["rank"], timeout=__import__("datetime").timedelta(seconds=spec.get("stall_s", 300)))
    return dist


def run_node(spec, cat, start):
    """One node's runner on a cluster (see the module's doc)."""
    dist = join_cluster(spec)
    me = spec["rank"]
    counters = Counters(spec) if me == 0 else None
    split = NodeSplit(cgroups.Group.existing(spec["group"]), cgroups.Group.existing(spec["group"] + "-fs"))
    # Epoch 1 counts from before the systems are made (see run): rank 0
    # says "go", on which the driver starts brandrt's ranks.
    dist.barrier()
    made = counters.read() if counters else None, time.monotonic(), split.read()
    if me == 0:
        emit(event="go")
    system = systems.make(spec, cat)
    dist.barrier()
    if me == 0:
        emit(event="start", startup_s=time.monotonic() - start)
    sizes_only = system.check == "sizes"
    want = expected(cat, sizes_only)
    progress = [time.monotonic()]
    threading.Thread(target=watchdog, args=(progress, spec.get("stall_s", 300)), daemon=True).start()
    try:
        c1 = None
        for e in range(spec["epochs"]):
            dist.barrier()
            c0, t0, s0 = made if e == 0 else (counters.read() if counters else None, time.monotonic(), split.read())
            if c1 is not None:
                # the byte counters' windows touch: what moved between two
                # epochs (a system that starts the next one early, as
                # brandrt's ranks push its first files) counts in the next
                c0 = dict(c0, net_bytes=c1["net_bytes"], into_nodes=c1["into_nodes"])
            got = read_epoch(system, e, progress, sizes_only, spec.get("step_s", 0))
            seen = got.pop("seen")
            s1 = split.read()
            mine = dict(got, seconds=time.monotonic() - t0, cpu_s=NodeSplit.node_seconds(s0, s1),
                        cpu_by=NodeSplit.between(s0, s1))
            dist.barrier()
            t1 = time.monotonic()
            c1 = counters.read() if counters else None
            every = [None] * spec["world"] if me == 0 else None
            dist.gather_object((mine, seen), every, dst=0)
            if me == 0:
                total = Prints()
                for _, s in every:
                    total.extend(s)
                emit(event="epoch", epoch=e + 1, files=sum(m["files"] for m, _ in every),
                     bytes=sum(m["bytes"] for m, _ in every), seconds=t1 - t0,
                     first_batch_s=max(m["first_batch_s"] or 0 for m, _ in every), read_bytes=0,
                     net_bytes=c1["net_bytes"] - c0["net_bytes"],
                     between_nodes_bytes=max(0, (c1["into_nodes"] - c0["into_nodes"]) - (c1["net_bytes"] - c0["net_bytes"])),
                     cpu_s=(c1["cpu_ns"] - c0["cpu_ns"]) / 1e9, machine_busy=machine_busy(c0, c1),
                     cpu_by={k: sum(m["cpu_by"][k] for m, _ in every) for k in NodeSplit.KINDS},
                     nodes=[m for m, _ in every],
                     check=verdict(total, want, sizes_only))
    finally:
        system.close()
    own_end = [None] * spec["world"] if me == 0 else None
    dist.gather_object(system.own(), own_end, dst=0)
    if me == 0:
        emit(event="end", own={"nodes": own_end})


def watchdog(progress, limit):
    """Ends the run, as an error, when no batch came for limit seconds (a
    loader that stalls: Mosaic with a cache too small for its downloads
    waits for room forever)."""
    while True:
        time.sleep(1)
        idle = time.monotonic() - progress[0]
        if idle > limit:
            emit(event="error", error="stalled: no file for %.0f s" % idle)
            os._exit(1)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        run(spec)
    except BaseException as e:  # the driver records the failure and moves on
        emit(event="error", error="%s: %s" % (type(e).__name__, e), trace=traceback.format_exc()[-3000:])
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # DataLoader workers and peers' threads are not waited for: the driver
    # kills what is left in the cgroup.
    os._exit(0)


if __name__ == "__main__":
    main()
