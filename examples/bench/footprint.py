#!/usr/bin/env python3
"""What one brandrt rank takes against --mem, as the kernel counts it: for
each packed dataset and each --mem, the footprint that `brandrt serve
--footprint` says, then the rank serving --epochs in a memory cgroup of
exactly that footprint (page cache dropped first; --consume readers, or a
training command given after --), and the cgroup's peak. Prints a table,
writes OUT/footprint.jsonl and draws OUT/footprint.png.

  examples/bench/footprint.py --chunks /data/c61,/data/c100k --mem 10%,25%,50%,100% --out /tmp/fp
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "1"]
NEEDS = re.compile(r"the rank needs [^(]*\((\d+) bytes\) of memory: (.*?); its memory cgroup")


def parse_footprint(text):
    """(bytes, terms) from serve's start-up line, or None."""
    m = NEEDS.search(text)
    return (int(m.group(1)), m.group(2)) if m else None


def mib(n):
    return n / (1 << 20)


def measure(brandrt, chunks, mem, epochs, consume, name):
    """One point: the footprint, then serve in a cgroup of it."""
    base = [brandrt, "serve", "--chunks", chunks, "--mem", mem, "--consume", str(consume)]
    out = subprocess.run(MPIRUN + base + ["--footprint"], capture_output=True, text=True, timeout=300)
    fp = parse_footprint(out.stdout + out.stderr)
    if out.returncode != 0 or fp is None:
        raise SystemExit("footprint: serve --footprint --chunks %s --mem %s failed:\n%s" % (chunks, mem, out.stdout + out.stderr))
    group = cgroups.Group(name, fp[0])
    try:
        cgroups.drop_caches()
        t0 = time.time()
        run = subprocess.run(MPIRUN + base + ["--epochs", str(epochs)], capture_output=True, text=True, timeout=1800,
                             preexec_fn=group.join)
        text = run.stdout + run.stderr
        m = group.memory()
        budget = re.search(r"--mem ([\d.]+ [KMGT]?i?B)", fp[1])
        return {"chunks": chunks, "mem": mem, "footprint_bytes": fp[0], "terms": fp[1],
                "budget": budget.group(1) if budget else mem, "peak_bytes": m["peak_bytes"], "oom_kills": m["oom_kills"],
                "exit": run.returncode, "once": text.count("every file delivered exactly once"), "epochs": epochs,
                "seconds": round(time.time() - t0, 1)}
    finally:
        group.remove()


def budget_mib(rec):
    """--mem in MiB, from the terms ("--mem 100 MiB")."""
    m = re.search(r"--mem ([\d.]+) ([KMGT]?i?B)", rec["terms"])
    if not m:
        return None
    scale = {"B": 1 / (1 << 20), "KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1 << 20}[m.group(2)]
    return float(m.group(1)) * scale


def draw(recs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, chunks in enumerate(dict.fromkeys(r["chunks"] for r in recs)):
        rs = sorted((r for r in recs if r["chunks"] == chunks), key=lambda r: budget_mib(r) or 0)
        x = [budget_mib(r) for r in rs]
        color = "C%d" % i
        label = os.path.basename(chunks.rstrip("/"))
        ax.plot(x, [mib(r["footprint_bytes"]) for r in rs], "--", color=color, label="%s: footprint said" % label)
        ax.plot(x, [mib(r["peak_bytes"]) for r in rs], "o-", color=color, label="%s: kernel's peak" % label)
    lo = min(budget_mib(r) or 0 for r in recs)
    hi = max(budget_mib(r) or 0 for r in recs)
    ax.plot([lo, hi], [lo, hi], ":", color="grey", label="--mem itself")
    ax.set_xlabel("--mem (MiB)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title("One rank's memory against --mem, in a cgroup of its footprint")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(recs):
    lines = ["%-28s %6s %10s %11s %11s %6s  %s" % ("dataset", "--mem", "", "footprint", "peak", "peak%", "runs")]
    for r in recs:
        lines.append("%-28s %6s %10s %7.0f MiB %7.0f MiB %5.0f%%  exit %d, %d of %d epochs exactly once, %d OOM kills" % (
            os.path.basename(r["chunks"].rstrip("/")), r["mem"], r["budget"], mib(r["footprint_bytes"]), mib(r["peak_bytes"]),
            100 * r["peak_bytes"] / r["footprint_bytes"], r["exit"], r["once"], r["epochs"], r["oom_kills"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", required=True, help="packed datasets, comma-separated")
    ap.add_argument("--mem", default="10%,25%,50%,75%,100%", help="--mem values, comma-separated")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--consume", type=int, default=4, help="in-process readers")
    ap.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if cgroups.available():
        raise SystemExit("footprint: " + cgroups.available())
    os.makedirs(a.out, exist_ok=True)
    recs = []
    with open(os.path.join(a.out, "footprint.jsonl"), "w") as f:
        for chunks in a.chunks.split(","):
            for mem in a.mem.split(","):
                r = measure(a.brandrt, chunks, mem, a.epochs, a.consume, "brandrt-footprint-%d" % os.getpid())
                print("footprint: %s --mem %s: said %.0f MiB, peak %.0f MiB" % (chunks, mem, mib(r["footprint_bytes"]), mib(r["peak_bytes"])), flush=True)
                recs.append(r)
                f.write(json.dumps(r) + "\n")
    print("command:  " + " ".join([os.path.relpath(sys.argv[0], REPO)] + (argv if argv is not None else sys.argv[1:])))
    print(table(recs))
    draw(recs, os.path.join(a.out, "footprint.png"))


if __name__ == "__main__":
    main()
