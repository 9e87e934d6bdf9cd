#!/usr/bin/env python3
"""`brandrt plan` against what an emulated cluster's links carried.

Runs the loader benchmark's brandrt on the emulated cluster (loaders.py
--nodes, every node reading through the emulated NAS), then, for each run,
`brandrt plan` with the --mem and --readers serve was given, and prints,
per epoch and over all of them, the bytes the plan has each node read from
storage against those the NAS link carried, and the bytes it has them move
to each other against those the nodes' links carried (the kernel's counts:
TCP and the NAS's protocol included), and each rank's footprint as plan
prints it against the peak of the memory cgroup that holds what mpirun
started on its node (orted and the rank; the DataLoader's processes are
in the node's group, outside it), and, with costs that hold the memory
fills (calibrate.py), each rank's likely peak against that same peak.

    .venv/bin/python examples/bench/plancheck.py --files 12000 --nodes 2,3 --mem 25%,100%

Arguments other than --out are loaders.py's (--systems is brandrt-window);
--report RESULTS.jsonl holds the plan against an earlier run instead.
Needs root, as loaders.py does.
"""

import argparse
import json
import os
import subprocess
import sys

import prepare

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def runs(results):
    """The brandrt-window runs of a loaders.py results file."""
    with open(results) as f:
        for line in f:
            r = json.loads(line)
            if r.get("system") == "brandrt-window" and r.get("nodes") and r.get("status", "ok") == "ok":
                yield r


def meta(results):
    """The results file's first record: the run's settings."""
    with open(results) as f:
        return json.loads(f.readline())


def rate(s):
    """Bytes per second of a tc rate: 3gbit, 100mbit."""
    for unit, bits in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)):
        if s.endswith(unit):
            return int(float(s[:-len(unit)]) * bits / 8)
    raise ValueError("rate %r: want NUMBER followed by gbit, mbit or kbit" % s)


def plan(brandrt, chunks, run, workers, timing=None):
    """brandrt plan of run: its nodes, --mem and --readers, its epochs;
    with timing (costs file, machine's cores, NAS rate, nodes' link rate),
    its time model too, each node given its share of the cores."""
    cmd = [brandrt, "plan", "--chunks", chunks, "--nodes", str(run["nodes"]), "--mem", str(run["budget_bytes"]),
           "--readers", str(max(1, workers)), "--epochs", str(len(run["epochs"])), "--seed", "1", "--json"]
    if timing:
        costs, cores, nas, nic = timing
        cmd += ["--cpu-costs", costs, "--cores", "%.4f" % (cores / run["nodes"]), "--storage-rate", str(nas), "--link-rate", str(nic)]
        if run.get("step_s"):  # the training's batches per second, on each node
            cmd += ["--train-rate", str(max(1, round(run["batch_size"] / run["step_s"])))]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("plancheck: %s: exit status %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return cmd, json.loads(p.stdout.splitlines()[0])


def times(run, planned, costs, cores, ratios):
    """Lines of each epoch's planned time against the measured one (each
    ratio appended to ratios, by epoch). The emulated nodes share the
    machine's cores with the emulated NAS's server and the kernel's
    network work between them (calibrate.py's host_s_per_read_byte and
    host_s_per_moved_byte): that CPU joins the nodes' in a bound of its
    own, all of it over every core."""
    lines = ["%-6s %10s %22s %13s %10s %7s" % ("epoch", "plan", "bound", "with server", "measured", "ratio")]
    for e, m in zip(planned["epochs"], run["epochs"]):
        read = sum(r["read_bytes"] for r in e["ranks"])
        moved = sum(r["received_bytes"] for r in e["ranks"])
        outside = costs.get("host_s_per_read_byte", 0) * read + costs.get("host_s_per_moved_byte", 0) * moved
        shared = (sum(e["cpu_seconds"]) + outside) / (cores * costs["cores_busy"])
        if e["epoch"] == 1:
            shared += costs["start_s"]
        model = max(e["seconds"], shared)
        ratios.append((e["epoch"], m["seconds"] / model, model, m["seconds"]))
        lines.append("%-6s %9.2fs %22s %12.2fs %9.2fs %7s" % (e["epoch"], e["seconds"], e["bound"], model, m["seconds"], ratio(m["seconds"], model)))
    return lines


def spread(ratios):
    """A line saying how many epochs' times (ratios: epoch, measured /
    planned) were within 20 % of the plan."""
    def part(rs):
        if not rs:
            return "none"
        return "%d of %d within 20 %% (%.2f to %.2f)" % (sum(0.8 <= r <= 1.2 for r in rs), len(rs), min(rs), max(rs))
    return "measured / planned time: epoch 1 %s; later epochs %s" % (
        part([r for e, r in ratios if e == 1]), part([r for e, r in ratios if e > 1]))


def table(run, planned):
    """Rows of planned against carried bytes, per epoch and over all, and
    the measured / planned ratios over all: storage's, and the network's
    (None where nothing was planned to move). The network's plan is what
    the links carry where plan had costs (the files' bytes and what the
    costs add per file and per byte moved: link_in_bytes), else the
    files' bytes."""
    rows, sums = [], [0, 0, 0, 0]
    links = all("link_in_bytes" in e for e in planned["epochs"])
    for e, m in zip(planned["epochs"], run["epochs"]):
        pr = sum(r["read_bytes"] for r in e["ranks"])
        pm = sum(e["link_in_bytes"]) if links else sum(r["received_bytes"] for r in e["ranks"])
        got = [pr, m["net_bytes"], pm, m["between_nodes_bytes"]]
        sums = [a + b for a, b in zip(sums, got)]
        rows.append([str(e["epoch"])] + got)
    rows.append(["all"] + sums)
    lines = ["%-6s %15s %15s %7s %15s %15s %7s" % ("epoch", "planned read", "NAS link", "ratio",
                                                   "planned on links" if links else "planned moved", "nodes' links", "ratio")]
    for name, pr, nas, pm, links in rows:
        lines.append("%-6s %15s %15s %7s %15s %15s %7s" % (name, "{:,}".format(pr), "{:,}".format(nas), ratio(nas, pr),
                                                             "{:,}".format(pm), "{:,}".format(links), ratio(links, pm)))
    pr, nas, pm, links = sums
    return lines, nas / pr, links / pm if pm else None


def memory(run, planned):
    """Lines of each node's planned footprint against the peak of what
    mpirun started on it (orted and the rank), the kernel's count: its
    cgroup's (page cache included, which a limit would reclaim) and that
    of its anonymous and shared memory (held, sampled every 50 ms)."""
    peaks = run.get("memory", {}).get("per_node_mpi_peak_bytes")
    if not peaks:
        return ["memory: this run has no peak per rank (a loaders.py from before the cluster's mpi groups)"]
    held = run["memory"].get("per_node_mpi_held_peak_bytes") or [0] * len(peaks)
    likely = planned.get("peak_bytes")
    lines = ["%-6s %15s %15s %7s %15s %7s %15s" % ("node", "footprint", "rank's peak", "ratio", "held", "ratio", "node's peak")
             + (" %15s %7s" % ("likely peak", "ratio") if likely else "")]
    for i, (fp, peak, h) in enumerate(zip(planned["footprint_bytes"], peaks, held)):
        node = run["memory"]["per_node_peak_bytes"][i]
        lines.append("%-6d %15s %15s %7s %15s %7s %15s" % (i + 1, "{:,}".format(fp), "{:,}".format(peak), ratio(peak, fp),
                                                       "{:,}".format(h), ratio(h, fp) if h else "-", "{:,}".format(node))
                     + (" %15s %7s" % ("{:,}".format(likely[i]), ratio(peak, likely[i])) if likely else ""))
    return lines


def ratio(measured, planned):
    return "%.3f" % (measured / planned) if planned else "-"


def datasets(a):
    """(results, work) of each dataset the run measured: one, or one per
    size of a --file-size list (loaders.py's OUT/<SIZE> and WORK/size-<SIZE>)."""
    if a.report and not os.path.isdir(a.report):
        return [(a.report, a.work)]
    out = a.report or a.out
    sizes = [x for x in (a.file_size or "").split(",") if x.strip()]
    if len(sizes) <= 1:
        return [(os.path.join(out, "results.jsonl"), a.work)]
    import loaders
    labels = [loaders.size_label(loaders.parse_size(x)) for x in sizes]
    return [(os.path.join(out, l, "results.jsonl"), os.path.join(a.work, "size-" + l)) for l in labels]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    ap.add_argument("--out", default="/var/tmp/brandrt-bench/plancheck", help="where the benchmark's results go")
    ap.add_argument("--work", default="/var/tmp/brandrt-bench/plancheck", help="loaders.py --work")
    ap.add_argument("--brandrt", default=os.path.join(ROOT, "bin", "brandrt"))
    ap.add_argument("--workers", type=int, default=4, help="loaders.py --workers (serve --readers)")
    ap.add_argument("--file-size", help="loaders.py --file-size: one size, or a list (a dataset each)")
    ap.add_argument("--report", help="an earlier run: its results.jsonl (of --work's dataset), or its --out (with its --file-size list); run nothing")
    ap.add_argument("--cpu-costs", help="calibrate.py's costs file: hold plan's epoch time against the measured too")
    ap.add_argument("--calibrate", metavar="NODES",
                    help="fit the CPU costs (calibrate.py) on this run's runs on these numbers of nodes (1,2: one node whose --mem holds the dataset is where files are handed on with no bound), "
                         "write them to OUT/costs.json and hold the time of every run against them")
    a, rest = ap.parse_known_args()
    print("$ " + " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0].startswith(ROOT) else sys.argv[0]] + sys.argv[1:]), flush=True)
    if not a.report:
        cmd = [sys.executable, os.path.join(HERE, "loaders.py"), "--work", a.work, "--out", a.out, "--brandrt", a.brandrt,
               "--workers", str(a.workers), "--storage", "nas", "--systems", "brandrt-window"] + rest
        if a.file_size:
            cmd += ["--file-size", a.file_size]
        print("$ " + " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
    pairs = datasets(a)
    # where this check writes: the run's --out, or the report's
    out = a.out if not a.report else a.report if os.path.isdir(a.report) else os.path.dirname(a.report)
    costs_path = a.cpu_costs
    if a.calibrate:
        import calibrate
        nodes = [int(n) for n in a.calibrate.split(",")]
        costs, lines = calibrate.calibrate(pairs, a.brandrt, nodes)
        costs_path = os.path.join(out, "costs.json")
        calibrate.write(costs, costs_path)
        print("\n== CPU costs fitted on the runs on %s node(s), written to %s" % (a.calibrate, costs_path))
        print("\n".join(lines))
    total = Totals()
    for results, work in pairs:
        check(a, results, work, costs_path, total)
    print("\n== over every run\n" + "\n".join(total.lines()))
    if total.times or total.memory:
        path = os.path.join(out, "plancheck.png")
        plot(total, path)
        print("plot: " + path)


class Totals:
    """What every run's check found, for the last lines."""

    def __init__(self):
        self.bytes, self.rows = [], []
        self.times = []  # (size label, epoch, measured / planned, planned s, measured s)
        self.memory = []  # (size label, footprint, rank's cgroup peak, held, likely peak or None), per node

    def lines(self):
        def span(rs):
            return "%.3f to %.3f" % (min(rs), max(rs)) if rs else "-"
        mem = [peak / fp for _, fp, peak, _, _ in self.memory]
        held = [h / fp for _, fp, _, h, _ in self.memory]
        likely = [peak / lp for _, _, peak, _, lp in self.memory if lp]
        out = ["%-8s %5s %6s %8s %8s %13s %13s %13s %s" % ("files", "nodes", "memory", "storage", "network", "rank's peak", "held", "likely peak", "time by epoch")]
        out += self.rows
        out += ["(storage, network: bytes over all epochs, measured / planned; rank's peak, held: per node, the lowest and",
                "highest against the footprint; likely peak: the rank's peak against it; time: each epoch's measured / planned)", ""]
        out += ["bytes over all epochs, measured / planned: storage and network %s" % span(self.bytes)]
        if mem:
            out.append("memory, rank's cgroup peak / footprint: %s, %d of %d nodes within 10 %%; held (anonymous and shared) / footprint: %s, %d of %d" % (
                span(mem), sum(0.9 <= r <= 1.1 for r in mem), len(mem), span(held), sum(0.9 <= r <= 1.1 for r in held), len(held)))
        if likely:
            out.append("memory, rank's cgroup peak / likely peak: %s, %d of %d nodes within 10 %%" % (
                span(likely), sum(0.9 <= r <= 1.1 for r in likely), len(likely)))
        if self.times:
            out.append(spread([(e, r) for _, e, r, _, _ in self.times]))
        return out


def plot(self, path):
    """Measured against planned: each epoch's time, and each rank's memory
    (its cgroup's peak and its held memory against its footprint), a
    colour per file size, the lines of equality and of ±20 % (time) and
    ±10 % (memory). Without times (no --cpu-costs), memory alone."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if self.times:
        fig, (ta, ma) = plt.subplots(1, 2, figsize=(12, 5.5))
    else:
        fig, ma = plt.subplots(1, 1, figsize=(6.5, 5.5))
        ta = None
    sizes = sorted({p[0] for p in self.times + self.memory}, key=lambda s: float(s.split()[0]) * (1e3 if s.endswith("MB") else 1))
    colours = dict(zip(sizes, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    for size in sizes:
        pts = [p for p in self.times if p[0] == size]
        if ta is not None:
            ta.scatter([p[3] for p in pts if p[1] == 1], [p[4] for p in pts if p[1] == 1], marker="s", color=colours[size],
                       label="files of ~%s, epoch 1" % size)
            ta.scatter([p[3] for p in pts if p[1] > 1], [p[4] for p in pts if p[1] > 1], marker="o", color=colours[size],
                       label="files of ~%s, later epochs" % size)
        mem = [p for p in self.memory if p[0] == size]
        ma.scatter([p[1] / 2**20 for p in mem], [p[2] / 2**20 for p in mem], marker="^", color=colours[size],
                   label="files of ~%s: the rank's cgroup peak" % size)
        ma.scatter([p[1] / 2**20 for p in mem], [p[3] / 2**20 for p in mem], marker="x", color=colours[size],
                   label="files of ~%s: held (anonymous and shared)" % size)
        likely = [p for p in mem if p[4]]
        if likely:
            ma.scatter([p[4] / 2**20 for p in likely], [p[2] / 2**20 for p in likely], marker="o", facecolors="none",
                       edgecolors=colours[size], label="files of ~%s: the rank's cgroup peak against its likely peak" % size)
    for ax, band in ((ta, 0.2), (ma, 0.1)):
        if ax is None:
            continue
        lo, hi = ax.get_xlim()
        hi = max(hi, ax.get_ylim()[1])
        xs = [0, hi]
        ax.plot(xs, xs, color="black", linewidth=1)
        for f in (1 - band, 1 + band):
            ax.plot(xs, [x * f for x in xs], color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    if ta is not None:
        ta.set_xlabel("planned epoch time (s): brandrt plan --cpu-costs, on the emulated cluster's shared cores")
        ta.set_ylabel("measured epoch time (s)")
        ta.set_title("Epoch time: measured against planned (dashed: ±20 %)", fontsize=10)
    if any(p[4] for p in self.memory):
        ma.set_xlabel("planned per rank (MiB): the footprint (^, x), the likely peak (o)")
        ma.set_title("Memory: measured against the footprint and the likely peak (dashed: ±10 %)", fontsize=10)
    else:
        ma.set_xlabel("planned footprint per rank (MiB)")
        ma.set_title("Memory: measured against the footprint (dashed: ±10 %)", fontsize=10)
    ma.set_ylabel("measured per rank (MiB)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check(a, results, work, costs_path, total):
    """Holds plan against each brandrt-window run of results (its
    datasets in work), printing a section per run; adds to total."""
    timing, costs = None, None
    if costs_path:
        m = meta(results)
        timing = (costs_path, os.cpu_count(), rate(m["nas_rate"]), rate(m["nic"]))
        with open(costs_path) as f:
            costs = json.load(f)
    for run in runs(results):
        chunks = os.path.join(work, prepare.chunks_name(run["chunk_files"], run["nodes"]))
        cmd, planned = plan(a.brandrt, chunks, run, run.get("workers", a.workers), timing)
        print("\n== %d node%s, memory %s (--mem %s per node), %s files of %s bytes" % (
            run["nodes"], "" if run["nodes"] == 1 else "s", run["mem"], "{:,}".format(run["budget_bytes"]), "{:,}".format(run["files"]), "{:,}".format(run["dataset_bytes"])))
        print("$ " + " ".join(cmd))
        lines, storage, network = table(run, planned)
        print("\n".join(lines))
        total.bytes += [storage] + ([network] if network is not None else [])
        print("\n".join(memory(run, planned)))
        mean = run["dataset_bytes"] / run["files"]
        size = "%.0f KB" % (mean / 1e3) if mean < 0.95e6 else "%.1f MB" % (mean / 1e6)
        mem = run.get("memory", {})
        likely = planned.get("peak_bytes") or [None] * len(planned["footprint_bytes"])
        nodes = [(size, fp, peak, held, lp) for fp, peak, held, lp in
                 zip(planned["footprint_bytes"], mem.get("per_node_mpi_peak_bytes", []), mem.get("per_node_mpi_held_peak_bytes", []), likely)]
        total.memory += nodes
        ratios = []
        if timing:
            print("\n".join(times(run, planned, costs, os.cpu_count(), ratios)))
            total.times += [(size,) + r for r in ratios]

        def minmax(rs):
            return "%.2f-%.2f" % (min(rs), max(rs)) if rs else "-"
        total.rows.append("%-8s %5d %6s %8.3f %8s %13s %13s %13s %s" % (
            size, run["nodes"], run["mem"], storage, "%.3f" % network if network is not None else "-",
            minmax([peak / fp for _, fp, peak, _, _ in nodes]), minmax([held / fp for _, fp, _, held, _ in nodes]),
            minmax([peak / lp for _, _, peak, _, lp in nodes if lp]),
            " ".join("%.2f" % r for _, r, _, _ in ratios) or "-"))


if __name__ == "__main__":
    main()
