#!/usr/bin/env python3
"""examples/pytorch/train.py on the emulated NAS: the same training reading
the original JPEGs (--baseline: ImageFolder, a shuffled DataLoader) and
through brandrt (one rank, serve --mem BUDGET, BrandDataset/BrandSampler),
each in a memory cgroup of the same size (budget + allowance), page cache
dropped before each run, the two alternated for --rounds. Prints the
images/s and accuracy of every epoch, and the ratio per epoch.

    make bench-train-nas
    .venv/bin/python examples/bench/train_nas.py --images 20000 --size 64 --rounds 3

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
import loaders  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EPOCH = re.compile(r"epoch (\d+) from .*?: (\d+) images in ([\d.]+) s, (\d+) images/s, loss ([\d.]+), accuracy ([\d.]+)%")


def prepare(a):
    """The JPEG set and its chunks in a.work, made once."""
    jpegs, chunks = os.path.join(a.work, "jpegs"), os.path.join(a.work, "chunks")
    stamp = os.path.join(a.work, "made.txt")
    want = "%d images, %d classes, %d px, K=%d\n" % (a.images, a.classes, a.size, a.chunk_files)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return jpegs, chunks
    loaders.log("making %d JPEGs of %d px in %d classes, packed with K=%d …" % (a.images, a.size, a.classes,
                                                                             a.chunk_files))
    subprocess.run(["rm", "-rf", jpegs, chunks, stamp], check=True)
    subprocess.run(["/usr/bin/python3", os.path.join(REPO, "examples", "pytorch", "make_jpegs.py"), "--out", jpegs,
                    "--classes", str(a.classes), "--images", str(a.images), "--size", str(a.size)], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([a.brandrt, "pack", "--input", jpegs, "--out", chunks, "--chunk-files", str(a.chunk_files),
                    "--ranks", "1"], check=True, stdout=subprocess.DEVNULL)
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
    budget = loaders.budget_bytes(a.mem, {"bytes": size})
    mnt = loaders.NAS_MOUNT
    train = ["/usr/bin/python3", "-W", "ignore", os.path.join(REPO, "examples", "pytorch", "train.py"),
             "--epochs", str(a.epochs), "--workers", str(a.workers), "--batch-size", str(a.batch_size)]
    cmds = {"baseline": train + ["--baseline", "--data", mnt + jpegs],
            "brandrt": ["bash", os.path.join(REPO, "examples", "pytorch", "demo.sh"), a.brandrt, mnt + chunks, "1",
                        str(a.classes), str(a.epochs), "--mem", str(budget)] +
                       ["--", "--workers", str(a.workers), "--batch-size", str(a.batch_size)]}
    results = {k: [] for k in cmds}
    n = 0
    with loaders.NAS(a):
        for rnd in range(a.rounds):
            for name, cmd in cmds.items():
                n += 1
                loaders.log("round %d: %s" % (rnd + 1, name))
                results[name].append(run(a, cmd, budget, n))
    print("command:  %s" % " ".join(sys.argv))
    print("data:     %d JPEGs of %d px (%s), %d classes, on the emulated NAS; memory budget %s + %s for the "
          "processes; %d DataLoader workers, batch %d; page cache dropped before each run; medians of %d rounds" % (
              a.images, a.size, loaders.report.human_bytes(size), a.classes, loaders.report.human_bytes(budget),
              loaders.report.human_bytes(a.allowance), a.workers, a.batch_size, a.rounds))
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
