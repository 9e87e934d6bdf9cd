#!/usr/bin/env python3
"""examples/pytorch/train.py on the emulated NAS: the same training reading
the original JPEGs (--baseline: ImageFolder, a shuffled DataLoader) and
through brandrt (one rank, serve --mem BUDGET, BrandDataset/BrandSampler),
each in a memory cgroup of the same size (budget + allowance), page cache
dropped before each run, the two alternated for --rounds. Prints the
images/s and accuracy of every epoch, and the ratio per epoch.

    make bench-train-nas
    .venv/bin/python examples/bench/train_nas.py --images 20000 --size 64 --rounds 3
    .venv/bin/python examples/bench/train_nas.py --nodes 3      # DDP across 3 emulated nodes

With --nodes N the training runs with DistributedDataParallel (gloo) on the
N nodes of an emulated cluster (examples/cluster, its NAS in front of this
machine's files), one training process per node, each node in a cgroup of
the budget (--mem: of the dataset for all nodes together) plus the
allowance: the baseline with a DistributedSampler over the JPEGs of each
node's NAS mount, brandrt as one rank per node through the cluster's
mpirun with the training co-launched beside it.

Needs root (cgroups, the NAS of nas.sh) and bin/brandrt.
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
import cluster  # noqa: E402
import loaders  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EPOCH = re.compile(r"epoch (\d+) from .*?: (\d+) images in ([\d.]+) s, (\d+) images/s, loss ([\d.]+), accuracy ([\d.]+)%")


def prepare(a):
    """The JPEG set and its chunks in a.work (for one rank per node), made
    once."""
    ranks = max(1, a.nodes)
    jpegs, chunks = os.path.join(a.work, "jpegs"), os.path.join(a.work, "chunks" + ("-r%d" % ranks if ranks > 1 else ""))
    stamp = os.path.join(a.work, "made%s.txt" % ("-r%d" % ranks if ranks > 1 else ""))
    want = "%d images, %d classes, %d px, K=%d\n" % (a.images, a.classes, a.size, a.chunk_files)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return jpegs, chunks
    loaders.log("making %d JPEGs of %d px in %d classes, packed with K=%d …" % (a.images, a.size, a.classes,
                                                                             a.chunk_files))
    subprocess.run(["rm", "-rf", chunks, stamp], check=True)
    if not os.path.exists(jpegs + ".made") or open(jpegs + ".made").read() != want:
        subprocess.run(["rm", "-rf", jpegs], check=True)
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "examples", "pytorch", "make_jpegs.py"), "--out", jpegs,
                        "--classes", str(a.classes), "--images", str(a.images), "--size", str(a.size)], check=True,
                       stdout=subprocess.DEVNULL)
        with open(jpegs + ".made", "w") as f:
            f.write(want)
    subprocess.run([a.brandrt, "pack", "--input", jpegs, "--out", chunks, "--chunk-files", str(a.chunk_files),
                    "--ranks", str(ranks)], check=True, stdout=subprocess.DEVNULL)
    with open(stamp, "w") as f:
        f.write(want)
    return jpegs, chunks


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run(a, cmd, budget, n):
    """cmd in a fresh cgroup of budget + allowance, cold; its epochs."""
    group = cgroups.Group("brandrt-train-%d-%d" % (os.getpid(), n), budget + a.allowance)
    timer = threading.Timer(a.timeout, group.kill)
    timer.daemon = True  # never what keeps this process from exiting
    try:
        cgroups.drop_caches()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=group.join, start_new_session=True)
        timer.start()
        out = p.communicate()[0]
        epochs = [dict(zip(("epoch", "images", "seconds", "images_s", "loss", "accuracy"), map(float, m.groups())))
                  for m in EPOCH.finditer(out)]
        mem = group.memory()
        if p.returncode != 0 or len(epochs) < a.epochs:
            loaders.log("  failed (exit %s, %s): %s" % (p.returncode, "out of memory" if mem["oom_kills"] else "",
                                                       out[-1500:]))
            return None
        for e in epochs:
            loaders.log("  epoch %d: %.0f images/s, accuracy %.1f%%" % (e["epoch"], e["images_s"], e["accuracy"]))
        return epochs
    finally:
        timer.cancel()
        group.remove()  # kills what is left in it


def run_nodes(a, cl, name, jpegs, chunks, budget, n):
    """The training on every node of cl (baseline or brandrt), each node's
    cgroup limited to budget + allowance, cold; rank 0's epochs."""
    groups = [cl.group(i) for i in range(1, cl.n + 1)]
    for g in groups:
        g.kill()
        g._write("memory", "memory.limit_in_bytes", str(budget + a.allowance))
    oom0 = sum(g.memory()["oom_kills"] for g in groups)
    train = ["/usr/bin/python3", "-W", "ignore", os.path.join(REPO, "examples", "pytorch", "train.py"),
             "--epochs", str(a.epochs), "--workers", str(a.workers), "--batch-size", str(a.batch_size)]
    port = 20000 + (os.getpid() + n) % 20000
    procs = []
    timer = threading.Timer(a.timeout, lambda: [g.kill() for g in groups])
    timer.daemon = True
    try:
        cgroups.drop_caches()
        if name == "baseline":
            for i in range(1, cl.n + 1):
                cmd = ["bash", cluster.SCRIPT, "exec", "--name", cluster.NAME, str(i), "--"] + train + [
                    "--baseline", "--data", cl.nas(jpegs), "--world-size", str(cl.n), "--rank", str(i - 1),
                    "--master", "%s:%d" % (cl.host(1), port)]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE if i == 1 else subprocess.DEVNULL,
                                              stderr=subprocess.STDOUT, text=True, start_new_session=True))
        else:
            cmd = [cl.mpirun(), "-np", str(cl.n), a.brandrt, "serve", "--chunks", cl.nas(chunks), "--mem", str(budget),
                   "--"] + train + ["--num-classes", str(a.classes)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        timer.start()
        out = procs[0].communicate()[0]
        for p in procs[1:]:
            p.wait()
        epochs = [dict(zip(("epoch", "images", "seconds", "images_s", "loss", "accuracy"), map(float, m.groups())))
                  for m in EPOCH.finditer(out)]
        oom = sum(g.memory()["oom_kills"] for g in groups) - oom0
        if any(p.returncode != 0 for p in procs) or len(epochs) < a.epochs:
            loaders.log("  failed (exit %s%s): %s" % ([p.returncode for p in procs], ", out of memory" if oom else "",
                                                      out[-1500:]))
            return None
        for e in epochs:
            loaders.log("  epoch %d: %.0f images/s, accuracy %.1f%%" % (e["epoch"], e["images_s"], e["accuracy"]))
        return epochs
    finally:
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
        for g in groups:
            g.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/var/tmp/brandrt-bench/train", help="where the JPEGs and chunks are kept")
    p.add_argument("--images", type=int, default=30000,
                   help="JPEGs to make (default 30000: at 224 px, 1.1 GiB, more than the cgroup holds)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--size", type=int, default=224, help="their width and height in pixels (default 224)")
    p.add_argument("--chunk-files", type=int, default=64, help="brandrt's K (default 64)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="baseline and brandrt alternated this many times")
    p.add_argument("--mem", type=loaders.parse_mem, default=("%", 25.0), help="budget (default 25%%)")
    p.add_argument("--allowance", type=loaders.parse_size, default=loaders.parse_size("768MiB"))
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers of each training (default 2)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--nas-delay", default="100us")
    p.add_argument("--nas-rate", default="3gbit")
    p.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"))
    p.add_argument("--nodes", type=int, default=0,
                   help="train with DDP on this many nodes of an emulated cluster (default 0: one process, this machine)")
    p.add_argument("--nic", default="10gbit", help="with --nodes: each node's link (default 10gbit)")
    a = p.parse_args()
    # SIGTERM ends it like ^C: the finally clauses remove the cgroup (and
    # what runs in it) and stop the NAS.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    why = cgroups.available()
    if why:
        p.error(why)
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)
    jpegs, chunks = prepare(a)
    size = du(jpegs)
    budget = cluster.budget_bytes(a.mem, {"bytes": size}, max(1, a.nodes))
    mnt = loaders.NAS_MOUNT
    train = ["/usr/bin/python3", "-W", "ignore", os.path.join(REPO, "examples", "pytorch", "train.py"),
             "--epochs", str(a.epochs), "--workers", str(a.workers), "--batch-size", str(a.batch_size)]
    cmds = {"baseline": train + ["--baseline", "--data", mnt + jpegs],
            "brandrt": ["bash", os.path.join(REPO, "examples", "pytorch", "demo.sh"), a.brandrt, mnt + chunks, "1",
                        str(a.classes), str(a.epochs), "--mem", str(budget)] +
                       ["--", "--workers", str(a.workers), "--batch-size", str(a.batch_size)]}
    results = {k: [] for k in cmds}
    n = 0
    with (cluster.Cluster(a, a.nodes) if a.nodes else loaders.NAS(a)) as cl:
        for rnd in range(a.rounds):
            for name, cmd in cmds.items():
                n += 1
                loaders.log("round %d: %s" % (rnd + 1, name))
                if a.nodes:
                    results[name].append(run_nodes(a, cl, name, jpegs, chunks, budget, n))
                else:
                    results[name].append(run(a, cmd, budget, n))
    print("command:  %s" % " ".join(sys.argv))
    where = "on the emulated NAS"
    if a.nodes:
        where = "on the emulated NAS of %d emulated nodes (links %s, NAS %s), DDP with one training process per " \
                "node; memory budget per node" % (a.nodes, a.nic, a.nas_rate)
    print("data:     %d JPEGs of %d px (%s), %d classes, %s %s + %s for the processes; %d DataLoader workers, "
          "batch %d; page cache dropped before each run; medians of %d rounds" % (
              a.images, a.size, loaders.report.human_bytes(size), a.classes, where if a.nodes else where + "; memory budget",
              loaders.report.human_bytes(budget), loaders.report.human_bytes(a.allowance), a.workers, a.batch_size,
              a.rounds))
    print("%-6s %18s %18s %10s" % ("epoch", "baseline images/s", "brandrt images/s", "ratio"))
    for e in range(a.epochs):
        row = []
        for name in cmds:
            vals = [r[e]["images_s"] for r in results[name] if r]
            row.append(statistics.median(vals) if vals else None)
        ratios = [b[e]["images_s"] / f[e]["images_s"] for f, b in zip(results["baseline"], results["brandrt"]) if f and b]
        print("%-6d %18s %18s %10s" % (e + 1, "%.0f" % row[0] if row[0] else "failed",
                                       "%.0f" % row[1] if row[1] else "failed",
                                       "%.2f×" % statistics.median(ratios) if ratios else "-"))
    for name in cmds:
        acc = [r[-1]["accuracy"] for r in results[name] if r]
        print("%s: final accuracy %s" % (name, ", ".join("%.1f%%" % x for x in acc) or "failed"))


if __name__ == "__main__":
    main()
