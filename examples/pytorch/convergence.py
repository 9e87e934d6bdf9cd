"""Does training through brandrt learn as well as a true shuffle? Trains
examples/pytorch/train.py's CNN on Fashion-MNIST (fashion_mnist.py's image
folders) for --epochs, once per seed and system, and reports the test
accuracy after the last epoch: mean and spread per system.

Systems: `baseline` reads the original PNG files through torchvision's
ImageFolder with a shuffled DataLoader (a true shuffle); `window` and
`paper` read them through `brandrt serve` (one rank, --mem of the
dataset, that policy) from the packed dataset. A seed sets both the
model's initialisation (train.py --seed) and the order (the DataLoader's
shuffle, or serve --seed). Runs alternate the systems within each seed.

    /usr/bin/python3 examples/pytorch/fashion_mnist.py --out /var/tmp/fashion-mnist
    /usr/bin/python3 examples/pytorch/convergence.py --data /var/tmp/fashion-mnist --epochs 5 --seeds 1,2,3

Writes one JSON line per run to --out and prints the table.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EPOCH = re.compile(r"^epoch (\d+) from .*: (\d+) images in ([\d.]+) s, .*accuracy ([\d.]+)%, test accuracy ([\d.]+)%")


def run(a, system, seed, chunks):
    """One training run; returns its per-epoch (train accuracy, test accuracy, seconds)."""
    train = [sys.executable, "-W", "ignore", os.path.join(HERE, "train.py"), "--epochs", str(a.epochs), "--seed", str(seed),
             "--batch-size", str(a.batch_size), "--workers", str(a.workers), "--lr", str(a.lr),
             "--test-data", os.path.join(a.data, "test")]
    serve, attach, env = None, None, dict(os.environ)
    if system == "baseline":
        train += ["--baseline", "--data", os.path.join(a.data, "train")]
    else:
        attach = tempfile.mkdtemp(prefix="brandrt-convergence-", dir="/dev/shm")
        env["BRANDRT_ATTACH"] = attach
        log = open(os.path.join(attach, "serve.log"), "w+")
        serve = subprocess.Popen([a.brandrt, "serve", "--chunks", chunks, "--mem", a.mem, "--consume", "0", "--epochs", str(a.epochs),
                                  "--seed", str(seed), "--policy", system], env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        train += ["--num-classes", "10"]
    try:
        out = subprocess.run(train, env=env, capture_output=True, text=True, timeout=a.timeout)
        if out.returncode != 0:
            raise SystemExit("%s, seed %d: train.py failed (%d):\n%s" % (system, seed, out.returncode, out.stderr[-3000:]))
        epochs = [m.groups() for m in map(EPOCH.match, out.stdout.splitlines()) if m]
        if serve is not None:
            serve.wait(timeout=120)
            if serve.returncode != 0:
                log.seek(0)
                raise SystemExit("%s, seed %d: brandrt serve failed (%d):\n%s" % (system, seed, serve.returncode, log.read()[-3000:]))
            log.seek(0)
            checks = log.read().count("every file delivered exactly once")
            if checks != a.epochs:
                raise SystemExit("%s, seed %d: serve checked %d of %d epochs" % (system, seed, checks, a.epochs))
    finally:
        if serve is not None and serve.poll() is None:
            os.killpg(serve.pid, 9)
            serve.wait()
        if attach:
            log.close()
            shutil.rmtree(attach, ignore_errors=True)
    if len(epochs) != a.epochs:
        raise SystemExit("%s, seed %d: %d epoch lines in train.py's output:\n%s" % (system, seed, len(epochs), out.stdout))
    return [{"epoch": int(e), "images": int(n), "seconds": float(s), "train_accuracy": float(tr), "test_accuracy": float(te)}
            for e, n, s, tr, te in epochs]


def table(records, systems):
    lines = ["| system | runs | test accuracy after the last epoch: mean ± sd | min–max | per seed |", "|---|---|---|---|---|"]
    for system in systems:
        rs = sorted((r for r in records if r["system"] == system), key=lambda r: r["seed"])
        accs = [r["epochs"][-1]["test_accuracy"] for r in rs]
        if not accs:
            continue
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        lines.append("| %s | %d | %.2f %% ± %.2f | %.2f–%.2f %% | %s |" % (system, len(accs), statistics.mean(accs), sd, min(accs), max(accs),
                                                                       ", ".join("%.2f" % x for x in accs)))
    return "\n".join(lines)


def per_epoch(records, systems):
    """Mean ± sd of the test accuracy after each epoch, per system."""
    epochs = max(len(r["epochs"]) for r in records)
    lines = ["| system | " + " | ".join("epoch %d" % (e + 1) for e in range(epochs)) + " |", "|---|" + "---|" * epochs]
    for system in systems:
        rs = [r for r in records if r["system"] == system]
        if not rs:
            continue
        cells = []
        for e in range(epochs):
            accs = [r["epochs"][e]["test_accuracy"] for r in rs if len(r["epochs"]) > e]
            cells.append("%.2f ± %.2f" % (statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0))
        lines.append("| %s (%d) | %s |" % (system, len(rs), " | ".join(cells)))
    return "\n".join(lines)


def plot(records, systems, path):
    """Test accuracy per epoch: each run's line, and each system's mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, system in enumerate(systems):
        rs = [r for r in records if r["system"] == system]
        if not rs:
            continue
        color = "C%d" % i
        for r in rs:
            ax.plot([e["epoch"] for e in r["epochs"]], [e["test_accuracy"] for e in r["epochs"]], color=color, alpha=0.3, lw=1)
        n = min(len(r["epochs"]) for r in rs)
        mean = [statistics.mean(r["epochs"][e]["test_accuracy"] for r in rs) for e in range(n)]
        ax.plot(range(1, n + 1), mean, color=color, lw=2.2, marker="o", label="%s (mean of %d seeds)" % (system, len(rs)))
    ax.set_xticks(range(1, max(len(r["epochs"]) for r in records) + 1))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Fashion-MNIST, small CNN: test accuracy per epoch (thin lines: single seeds)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("plot: %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="fashion_mnist.py's output (train/ and test/)")
    ap.add_argument("--chunks", help="the packed training set (default: DATA-chunks-k64, packed if missing)")
    ap.add_argument("--chunk-files", type=int, default=64, help="K when packing")
    ap.add_argument("--systems", default="baseline,window,paper")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--mem", default="25%", help="brandrt serve --mem")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    ap.add_argument("--out", default="convergence.jsonl", help="JSON lines, one per run (appended)")
    ap.add_argument("--report", action="store_true", help="print the tables of --out and stop")
    ap.add_argument("--plot", metavar="PNG", help="with --report: draw test accuracy per epoch into PNG (needs matplotlib: .venv/bin/python)")
    a = ap.parse_args()
    systems = a.systems.split(",")
    if a.report:
        with open(a.out) as f:
            records = [json.loads(line) for line in f if line.strip()]
        print(table(records, systems))
        print()
        print(per_epoch(records, systems))
        if a.plot:
            plot(records, systems, a.plot)
        return
    for s in systems:
        if s not in ("baseline", "window", "paper"):
            ap.error("unknown system %r: baseline, window or paper" % s)
    chunks = a.chunks or a.data.rstrip("/") + "-chunks-k%d" % a.chunk_files
    if any(s != "baseline" for s in systems) and not os.path.exists(chunks):
        subprocess.run([a.brandrt, "pack", "--input", os.path.join(a.data, "train"), "--out", chunks,
                        "--chunk-files", str(a.chunk_files)], check=True)
    print("command: %s" % " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]), flush=True)
    records = []
    for i, seed in enumerate(int(x) for x in a.seeds.split(",")):
        order = systems[i % len(systems):] + systems[: i % len(systems)]  # each seed starts one system later
        for system in order:
            start = time.monotonic()
            epochs = run(a, system, seed, chunks)
            rec = {"system": system, "seed": seed, "epochs": epochs, "mem": a.mem, "batch_size": a.batch_size,
                   "workers": a.workers, "lr": a.lr, "chunk_files": a.chunk_files}
            records.append(rec)
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print("%-8s seed %d: test accuracy %s (%.0f s)" % (system, seed, ", ".join("%.2f" % e["test_accuracy"] for e in epochs),
                                                               time.monotonic() - start), flush=True)
    print(table(records, systems))


if __name__ == "__main__":
    main()
