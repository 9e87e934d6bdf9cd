"""Where each file's CPU goes in a run of the loader benchmark, step by
step (loaders.py --profile):

    cpusteps.py RESULTS.jsonl

A profiled run samples its Python processes with py-spy (the main process
and its DataLoader workers; raw stacks) and its brandrt rank with serve
--cpuprofile. The samples give each step's share of its process's CPU;
the kernel's counts (runner.CPUSplit, every epoch of the run, start-up
included) give the seconds those shares are of. Prints, per system, CPU
µs per file delivered, by step. Sampling slows a run: the figures of a
profiled run are for the breakdown, not for comparing speed.
"""

import collections
import json
import os
import subprocess
import sys

import report

# Python steps: the first rule, from the innermost frame out, whose text
# is in a frame names the step. Frames read "function (file:line)".
PY_RULES = [
    ("_find_and_load", "start-up: imports"),
    ("BrandDataset._many.<locals>.use", "copy each file out of shared memory (bytes)"),
    ("Client._futex_wait", "ring: waiting for the rank"),
    ("Client._sleep", "ring: waiting for the rank"),
    ("Client._futex_wake", "ring: waking the rank"),
    ("Client._kick", "ring: waking the rank"),
    ("Client.flush", "handed files: releases"),
    ("brandrt/handed.py", "handed files: tickets, mapping in place"),
    ("brandrt/client.py", "ring: requests and records"),
    ("brandrt/torch.py", "ring: requests and records"),
    ("collate (systems.py", "collate"),
    ("(systems.py", "the system's Dataset (open, read, index)"),
    ("runner.py", "the benchmark's own check of each file"),
    ("Connection._recv", "pipe: receive batches"),
    ("Connection._send", "pipe: send batches"),
    ("Queue._feed", "pickle batches"),
    ("Queue.get", "unpickle batches"),
    ("(multiprocessing/", "multiprocessing, other"),
    ("(torch/utils/data/", "DataLoader, other"),
]

# Go steps, by the function a sample was in (pprof -top, flat).
GO_RULES = [
    ("runtime.memmove", "copy files into shared memory"),
    ("_ExternalCode", "C: MPI and its TCP (cgo)"),
    ("runtime.cgocall", "C: MPI and its TCP (cgo)"),
    ("gompi", "C: MPI and its TCP (cgo)"),
    ("collectives.", "C: MPI and its TCP (cgo)"),
    ("crc32", "checksums"),
    ("Syscall", "system calls (reads, wake-ups)"),
    ("syscall.", "system calls (reads, wake-ups)"),
    ("futex", "system calls (reads, wake-ups)"),
    ("rt/shm.", "shared memory: rings and allocator"),
    ("brandrt/proto", "protocol"),
    ("brandrt/rt.", "rank loop"),
    ("runtime.", "Go runtime (scheduler, GC)"),
]


def py_steps(path):
    """{process kind: {step: samples}} of a py-spy raw profile: the root
    process is the main one, those under it its DataLoader workers."""
    out = {"main": collections.Counter(), "workers": collections.Counter()}
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            frames = stack.split(";")
            kind = "workers" if len(frames) > 1 and frames[1].startswith("process ") else "main"
            step = "Python, other"
            for fr in reversed(frames):
                hit = next((s for text, s in PY_RULES if text in fr), None)
                if hit:
                    step = hit
                    break
            out[kind][step] += int(n)
    return out


def go_steps(binary, pprof):
    """{step: CPU seconds} of a serve --cpuprofile profile."""
    out = collections.Counter()
    top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=100000", binary, pprof],
                         capture_output=True, text=True, check=True, env=dict(os.environ, GOTOOLCHAIN="auto")).stdout
    for line in top.splitlines():
        f = line.split()
        if len(f) < 6 or not f[0].endswith(("s", "ms", "us")) or "%" not in f[1]:
            continue
        secs = _seconds(f[0])
        name = " ".join(f[5:])
        out[next((s for text, s in GO_RULES if text in name), "rank, other")] += secs
    return out


def _seconds(v):
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * scale
    return 0.0


def breakdown(rec, binary):
    """{(process kind, step): CPU µs per file} of a profiled run."""
    files = sum(e["files"] for e in rec["epochs"])
    if "go_ranks" in rec["profile"]:
        return cluster_breakdown(rec, binary, files)
    measured = {k: sum(e["cpu_by"][k] for e in rec["epochs"]) for k in ("main", "workers", "rank", "other")}
    out = {}
    for kind, steps in py_steps(rec["profile"]["py"]).items():
        total = sum(steps.values())
        for step, n in steps.items():
            out[(kind, step)] = 1e6 * measured[kind] * n / max(total, 1) / files
    go = rec["profile"].get("go")
    if go and os.path.exists(os.path.join(go, "cpu.pprof")):
        for step, secs in go_steps(binary, os.path.join(go, "cpu.pprof")).items():
            out[("rank", step)] = 1e6 * secs / files
    out[("other", "mpirun and the rest")] = 1e6 * measured["other"] / files
    return out


def cluster_breakdown(rec, binary, files):
    """{(process kind, step): CPU µs per file} of a profiled run on a
    cluster: the ranks' steps from their profiles, summed over the nodes,
    and every other kind of process whole (the kernel's counts)."""
    out = collections.Counter()
    for d in rec["profile"]["go_ranks"]:
        if os.path.exists(os.path.join(d, "cpu.pprof")):
            for step, secs in go_steps(binary, os.path.join(d, "cpu.pprof")).items():
                out[("rank", step)] += 1e6 * secs / files
    for kind in rec["epochs"][0]["cpu_by"]:
        if kind != "rank":
            row = ("other", "NAS client (sshfs)") if kind == "nas client" else (kind, "all")
            out[row] += 1e6 * sum(e["cpu_by"][kind] for e in rec["epochs"]) / files
    return dict(out)


def table(records, binary):
    """The text of the breakdown of every profiled run in records."""
    runs = [r for r in records if r.get("profile") and r.get("status") == "ok"]
    if not runs:
        return ""
    cols = [report.label(r) for r in runs]
    cells = [breakdown(r, binary) for r in runs]
    rows = []
    for c in cells:
        for k in c:
            if k not in rows:
                rows.append(k)
    order = {"main": 0, "workers": 1, "rank": 2, "other": 3}
    rows.sort(key=lambda k: (order[k[0]], -max(c.get(k, 0) for c in cells)))
    out = ["CPU µs per file by step, all epochs (start-up included); shares from the profilers, seconds from the kernel:",
           "%-10s %-46s" % ("process", "step") + "".join("%22s" % c for c in cols)]
    for k in rows:
        if max(c.get(k, 0) for c in cells) < 0.5:
            continue
        out.append("%-10s %-46s" % k + "".join("%22.1f" % c.get(k, 0) for c in cells))
    out.append("%-10s %-46s" % ("all", "") + "".join("%22.1f" % sum(c.values()) for c in cells))
    return "\n".join(out) + "\n"


def main():
    records = []
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") != "meta":
                records.append(r)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.stdout.write(table(records, os.path.join(here, "..", "..", "bin", "brandrt")))


if __name__ == "__main__":
    main()
