#!/usr/bin/env python3
"""`brandrt plan` against what an emulated cluster's links carried.

Runs the loader benchmark's brandrt on the emulated cluster (loaders.py
--nodes, every node reading through the emulated NAS), then, for each run,
`brandrt plan` with the --mem and --readers serve was given, and prints,
per epoch and over all of them, the bytes the plan has each node read from
storage against those the NAS link carried, and the bytes it has them move
to each other against those the nodes' links carried (the kernel's counts:
TCP and the NAS's protocol included).

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


def plan(brandrt, chunks, run, workers):
    """brandrt plan of run: its nodes, --mem and --readers, its epochs."""
    cmd = [brandrt, "plan", "--chunks", chunks, "--nodes", str(run["nodes"]), "--mem", str(run["budget_bytes"]),
           "--readers", str(max(1, workers)), "--epochs", str(len(run["epochs"])), "--seed", "1", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return cmd, json.loads(out.splitlines()[0])


def table(run, planned):
    """Rows of planned against carried bytes, per epoch and over all."""
    rows, sums = [], [0, 0, 0, 0]
    for e, m in zip(planned["epochs"], run["epochs"]):
        pr = sum(r["read_bytes"] for r in e["ranks"])
        pm = sum(r["received_bytes"] for r in e["ranks"])
        got = [pr, m["net_bytes"], pm, m["between_nodes_bytes"]]
        sums = [a + b for a, b in zip(sums, got)]
        rows.append([str(e["epoch"])] + got)
    rows.append(["all"] + sums)
    lines = ["%-6s %15s %15s %7s %15s %15s %7s" % ("epoch", "planned read", "NAS link", "ratio", "planned moved", "nodes' links", "ratio")]
    for name, pr, nas, pm, links in rows:
        lines.append("%-6s %15s %15s %7s %15s %15s %7s" % (name, "{:,}".format(pr), "{:,}".format(nas), ratio(nas, pr),
                                                             "{:,}".format(pm), "{:,}".format(links), ratio(links, pm)))
    return lines


def ratio(measured, planned):
    return "%.3f" % (measured / planned) if planned else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    ap.add_argument("--out", default="/var/tmp/brandrt-bench/plancheck", help="where the benchmark's results go")
    ap.add_argument("--work", default="/var/tmp/brandrt-bench/plancheck", help="loaders.py --work")
    ap.add_argument("--brandrt", default=os.path.join(ROOT, "bin", "brandrt"))
    ap.add_argument("--workers", type=int, default=4, help="loaders.py --workers (serve --readers)")
    ap.add_argument("--report", help="an earlier loaders.py results.jsonl: run nothing")
    a, rest = ap.parse_known_args()
    results = a.report
    if not results:
        cmd = [sys.executable, os.path.join(HERE, "loaders.py"), "--work", a.work, "--out", a.out, "--brandrt", a.brandrt,
               "--workers", str(a.workers), "--storage", "nas", "--systems", "brandrt-window"] + rest
        print("$ " + " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
        results = os.path.join(a.out, "results.jsonl")
    work = a.work
    for run in runs(results):
        chunks = os.path.join(work, prepare.chunks_name(run["chunk_files"], run["nodes"]))
        cmd, planned = plan(a.brandrt, chunks, run, run.get("workers", a.workers))
        print("\n== %d node%s, memory %s (--mem %s per node), %s files of %s bytes" % (
            run["nodes"], "" if run["nodes"] == 1 else "s", run["mem"], "{:,}".format(run["budget_bytes"]), "{:,}".format(run["files"]), "{:,}".format(run["dataset_bytes"])))
        print("$ " + " ".join(cmd))
        print("\n".join(table(run, planned)))


if __name__ == "__main__":
    main()
