"""Does training through brandrt learn as well as a true shuffle? Trains
examples/pytorch/train.py's CNN on Fashion-MNIST (fashion_mnist.py's image
folders) for --epochs, once per seed, system and setting, and reports the
test accuracy after every epoch: mean, spread and range per system.

Systems: `baseline` reads the original PNG files through torchvision's
ImageFolder with a shuffled DataLoader (a true shuffle; it does not depend
on K or memory, so it runs once per seed); `window` and `paper` read the
packed dataset through `brandrt serve` (one rank, that policy) for every
setting: every K of --chunk-files (packed with that K if missing) with every
--mem. A seed sets both the model's initialisation (train.py --seed) and the
order (the DataLoader's shuffle, or serve --seed). Runs alternate the
systems within each seed.

    /usr/bin/python3 examples/pytorch/fashion_mnist.py --out /var/tmp/fashion-mnist
    /usr/bin/python3 examples/pytorch/convergence.py --data /var/tmp/fashion-mnist \\
        --chunk-files 64,256 --mem 10%,25% --seeds 1-5 --epochs 4

Appends one JSON line per run to --out and skips the runs already there:
an interrupted sweep goes on where it stopped. --report prints, per
setting, the test accuracy after each epoch of every system, whether each
policy is within the bound (its mean within one standard deviation of the
baseline's, the larger of the two, and its standard deviation at most 1.5×
the baseline's), and `brandrt simulate`'s randomness figures for the same
setting (the order serve delivers, measured against a shuffle of it), the
mean over the seeds.
"""

import argparse
import functools
import itertools
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
POLICIES = ("window", "paper")
MEAN_SDS, SPREAD = 1.0, 1.5  # the bound: |mean − baseline's| ≤ MEAN_SDS × the larger sd; sd ≤ SPREAD × baseline's


def run(a, system, seed, chunks, mem):
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
        serve = subprocess.Popen([a.brandrt, "serve", "--chunks", chunks, "--mem", mem, "--consume", "0", "--epochs", str(a.epochs),
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
            log.seek(0)
            said = log.read()
            if serve.returncode != 0:
                raise SystemExit("%s, seed %d: brandrt serve failed (%d):\n%s" % (system, seed, serve.returncode, said[-3000:]))
            checks = said.count("every file delivered exactly once")
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


def key(r):
    """What makes two runs the same run: the skip test and the report's groups."""
    setting = (None, None) if r["system"] == "baseline" else (r["chunk_files"], r["mem"])
    return (r["system"], r["seed"]) + setting + (len(r["epochs"]), r["batch_size"], r["workers"], r["lr"])


def accuracies(records, epoch):
    return [r["epochs"][epoch]["test_accuracy"] for r in records if len(r["epochs"]) > epoch]


def summary(accs):
    """mean, sd, min, max."""
    return statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0, min(accs), max(accs)


def within(policy, baseline):
    """Whether a policy's accuracies after one epoch meet the bound against the baseline's; and why not."""
    (m, sd, _, _), (bm, bsd, _, _) = summary(policy), summary(baseline)
    why = []
    if abs(m - bm) > MEAN_SDS * max(sd, bsd):
        why.append("mean %+.2f off, more than the larger sd %.2f" % (m - bm, max(sd, bsd)))
    if sd > SPREAD * bsd:
        why.append("sd %.2f is %.2f× the baseline's %.2f" % (sd, sd / bsd if bsd else float("inf"), bsd))
    return not why, "; ".join(why)


@functools.lru_cache(maxsize=None)
def chance(n, n_base, epochs, trials=10000):
    """How often two systems whose accuracies after each epoch come from the
    same normal distribution meet the bound in every epoch, with n and
    n_base seeds: what the bound can tell with this many seeds."""
    import random

    rng, passed = random.Random(1), 0
    for _ in range(trials):
        passed += all(within([rng.gauss(0, 1) for _ in range(n)], [rng.gauss(0, 1) for _ in range(n_base)])[0] for _ in range(epochs))
    return passed / trials


def settings(records):
    """The (K, mem) settings the policies' records cover, in order."""
    return sorted({(r["chunk_files"], r["mem"]) for r in records if r["system"] != "baseline"}, key=lambda s: (s[0], float(s[1].rstrip("%"))))


def runs(records, system, setting):
    return [r for r in records if r["system"] == system and (system == "baseline" or (r["chunk_files"], r["mem"]) == setting)]


def report(records, systems, a):
    """The tables of --out: one per setting, with the verdicts and simulate's figures."""
    epochs = max(len(r["epochs"]) for r in records)
    ok = True
    for setting in settings(records):
        print("## K=%d, --mem %s" % setting)
        print()
        print("| system | runs | " + " | ".join("epoch %d" % (e + 1) for e in range(epochs)) + " |")
        print("|---|---|" + "---|" * epochs)
        for system in systems:
            rs = runs(records, system, setting)
            if rs:
                cells = ["%.2f ± %.2f (%.2f–%.2f)" % summary(accuracies(rs, e)) for e in range(epochs)]
                print("| %s | %d | %s |" % (system, len(rs), " | ".join(cells)))
        base = runs(records, "baseline", setting)
        print()
        odds = set()
        for policy in (s for s in systems if s in POLICIES):
            rs = runs(records, policy, setting)
            if not rs or len(base) < 2:
                continue
            misses = []
            for e in range(epochs):
                good, why = within(accuracies(rs, e), accuracies(base, e))
                if not good:
                    misses.append("epoch %d: %s" % (e + 1, why))
            ok = ok and (policy != "window" or not misses)
            print("%s against the baseline: %s" % (policy, "within the bound after every epoch" if not misses else "; ".join(misses)))
            odds.add((len(rs), len(base)))
        for n, n_base in sorted(odds):
            print("(with %d and %d seeds, a system whose accuracies come from the baseline's own distribution is within the bound after "
                  "all %d epochs in %.0f %% of sweeps)" % (n, n_base, epochs, 100 * chance(n, n_base, epochs)))
        figures = randomness(a, setting, sorted({r["seed"] for r in records if r["system"] != "baseline"}), epochs, records)
        if figures:
            print()
            print(figures)
        print()
    return ok


def randomness(a, setting, seeds, epochs, records):
    """simulate's figures for one setting: the mean over seeds of each
    policy's, per epoch, beside a shuffle's; "" when simulate cannot run."""
    k, mem = setting
    chunks = a.chunks or packed(a.data, k)
    if not os.path.exists(a.brandrt) or not os.path.isdir(chunks):
        return ""
    batch = next(r["batch_size"] for r in records if r["system"] != "baseline")
    rows = []
    for policy in POLICIES:
        got = {}
        for seed in seeds:
            out = subprocess.run([a.brandrt, "simulate", "--chunks", chunks, "--ranks", "1", "--mem-fraction", str(fraction(mem)),
                                  "--batch", str(batch), "--epochs", str(epochs), "--seed", str(seed), "--policy", policy, "--json"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                return "simulate failed: %s" % out.stderr.strip()
            for line in out.stdout.splitlines():
                rec = json.loads(line)
                got.setdefault(rec["epoch"], []).append(rec)
        for epoch in sorted(got):
            rs = got[epoch]
            mean = lambda f: statistics.mean(r[f] for r in rs if r.get(f) is not None) if any(r.get(f) is not None for r in rs) else None
            pairs = mean("pairs_again")
            rows.append("| %s | %d | %.1f (%.1f) | %.1f (%.1f) | %.3f (%.3f) | %s | %.2f× |" % (
                policy, epoch, mean("distinct_chunks_per_batch"), mean("distinct_chunks_per_batch_shuffle"),
                mean("distinct_first_1pct"), mean("distinct_first_1pct_shuffle"), mean("chunk_span"), mean("chunk_span_shuffle"),
                "%.3f %% (%.3f %%)" % (100 * pairs, 100 * mean("pairs_again_shuffle")) if pairs is not None else "–",
                mean("read_amplification")))
    cmd = "brandrt simulate --chunks %s --ranks 1 --mem-fraction %s --batch %d --epochs %d --seed S --policy P --json" % (
        chunks, fraction(mem), batch, epochs)
    head = ["the order, from `%s` for seeds %s (mean; a shuffle's in brackets):" % (cmd, ",".join(map(str, seeds))), "",
            "| policy | epoch | distinct chunks per batch of %d | in the first 1 %% | chunk span | pairs again | read amp |" % batch,
            "|---|---|---|---|---|---|---|"]
    return "\n".join(head + rows)


def fraction(mem):
    if not mem.endswith("%"):
        raise SystemExit("--mem %r: give a percentage of the shard (25%%), which simulate --mem-fraction can mirror" % mem)
    return float(mem[:-1]) / 100


def plot(records, systems, path):
    """Test accuracy per epoch, one panel per setting: each system's mean, its
    ± sd band and its seeds' range (dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = settings(records)
    cols = min(2, len(sets))
    rows = (len(sets) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 3.9 * rows), squeeze=False, sharey=True)
    for ax, setting in zip(axes.flat, sets):
        for i, system in enumerate(systems):
            rs = runs(records, system, setting)
            if not rs:
                continue
            n = min(len(r["epochs"]) for r in rs)
            xs = list(range(1, n + 1))
            stats = [summary(accuracies(rs, e)) for e in range(n)]
            mean = [s[0] for s in stats]
            color = "C%d" % i
            ax.plot(xs, mean, color=color, lw=2, marker="o", label="%s (%d seeds)" % (system, len(rs)))
            ax.fill_between(xs, [s[0] - s[1] for s in stats], [s[0] + s[1] for s in stats], color=color, alpha=0.18)
            ax.plot(xs, [s[2] for s in stats], color=color, lw=0.8, ls=":")
            ax.plot(xs, [s[3] for s in stats], color=color, lw=0.8, ls=":")
            ax.set_xticks(xs)
        ax.set_title("K=%d, --mem %s" % setting)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy (%)")
    for ax in list(axes.flat)[len(sets):]:
        ax.set_visible(False)
    fig.suptitle("Fashion-MNIST, small CNN: test accuracy after each epoch\n(mean; ± one sd shaded; the seeds' range dotted)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("plot: %s" % path)


def packed(data, k):
    return data.rstrip("/") + "-chunks-k%d" % k


def seeds_of(text):
    """1,2,3 or 1-5."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="fashion_mnist.py's output (train/ and test/)")
    ap.add_argument("--chunks", help="the packed training set, for a single K (default: DATA-chunks-kK, packed if missing)")
    ap.add_argument("--chunk-files", default="64", help="K: files per chunk, one or several (64,256)")
    ap.add_argument("--mem", default="25%", help="brandrt serve --mem, one or several (10%%,25%%)")
    ap.add_argument("--systems", default="baseline,window,paper")
    ap.add_argument("--seeds", default="1-5", help="1,2,3 or 1-5")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    ap.add_argument("--out", default="convergence.jsonl", help="JSON lines, one per run (appended; runs already there are skipped)")
    ap.add_argument("--report", action="store_true", help="print the tables of --out and stop; exit status 1 when the window policy "
                    "misses the bound somewhere")
    ap.add_argument("--plot", metavar="PNG", help="with --report: draw test accuracy per epoch into PNG (needs matplotlib: .venv/bin/python)")
    a = ap.parse_args()
    systems = a.systems.split(",")
    for s in systems:
        if s not in ("baseline",) + POLICIES:
            ap.error("unknown system %r: baseline, window or paper" % s)
    ks = [int(k) for k in a.chunk_files.split(",")]
    mems = a.mem.split(",")
    if a.chunks and len(ks) > 1:
        ap.error("--chunks names one packed dataset: give a single --chunk-files")
    records = []
    if os.path.exists(a.out):
        with open(a.out) as f:
            records = [json.loads(line) for line in f if line.strip()]
    if a.report:
        if not records:
            raise SystemExit("%s holds no runs" % a.out)
        ok = report(records, systems, a)
        if a.plot:
            plot(records, systems, a.plot)
        sys.exit(0 if ok else 1)
    for k in ks:
        chunks = a.chunks or packed(a.data, k)
        if any(s != "baseline" for s in systems) and not os.path.exists(chunks):
            subprocess.run([a.brandrt, "pack", "--input", os.path.join(a.data, "train"), "--out", chunks, "--chunk-files", str(k)], check=True)
    print("command: %s" % " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]), flush=True)
    done = {key(r) for r in records}
    todo = []
    for i, seed in enumerate(seeds_of(a.seeds)):
        order = systems[i % len(systems):] + systems[: i % len(systems)]  # each seed starts one system later
        for system in order:
            for k, mem in itertools.product(ks, mems) if system != "baseline" else [(None, None)]:
                rec = {"system": system, "seed": seed, "chunk_files": k, "mem": mem, "batch_size": a.batch_size,
                       "workers": a.workers, "lr": a.lr, "epochs": [None] * a.epochs}
                if key(rec) not in done:
                    todo.append(rec)
    print("%d runs to make, %d already in %s" % (len(todo), len(records), a.out), flush=True)
    for n, rec in enumerate(todo, 1):
        start = time.monotonic()
        system, seed = rec["system"], rec["seed"]
        rec["epochs"] = run(a, system, seed, a.chunks or packed(a.data, rec["chunk_files"] or 0), rec["mem"])
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        where = "" if system == "baseline" else " K=%d --mem %s" % (rec["chunk_files"], rec["mem"])
        print("[%d/%d] %-8s seed %d%s: test accuracy %s (%.0f s)" % (n, len(todo), system, seed, where,
                                                                     ", ".join("%.2f" % e["test_accuracy"] for e in rec["epochs"]),
                                                                     time.monotonic() - start), flush=True)


if __name__ == "__main__":
    main()
