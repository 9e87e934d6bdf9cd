#!/usr/bin/env python3
"""The CPU costs `brandrt plan --cpu-costs` reads, fitted from runs of the
loader benchmark on the machine they are for.

Each brandrt-window run of a loaders.py results file (an emulated cluster,
--nodes) gives a row per node and epoch: what `brandrt plan` has that
node's rank do in that epoch (positions answered and their bytes, files
and bytes sent to and received from other ranks, bytes read from storage)
against the CPU seconds the kernel counted for its processes (runner.py's
split: the rank, the DataLoader's main process and workers, the NAS
client). Non-negative least squares fits, per process kind, seconds per
file and per byte:

    rank         per position answered, per file and per byte moved, per byte read;
                 in the first epoch once, and per byte of memory it fills
    NAS client   per byte read (added to the rank's: read_s_per_byte)
    DataLoader   per file taken from the rank (main and workers), and per byte:
                 of a copy (a file under 32 KiB), of a file handed on in place
                 (a rank with no bound on them), of one handed on under a bound
                 (past which files go as copies)

Runs with several file sizes (8 KB and 1 MB beside 110 KB) are what tell a
cost per file from a cost per byte. How busy the cores were in the epochs
that storage did not bound (the median) is the share of them plan counts
on (cores_busy); the time from the job's launch to its ranks serving (the
benchmark's first epoch less serve's own, the median) is what the first
epoch adds (start_s). What the machine's
cores spent outside the nodes' cgroups (its busy time less the nodes'):
the emulated NAS's server, per byte read, and the kernel's network work
between the namespaces (softirq), per byte moved, is fitted apart, as
host_s_per_read_byte and host_s_per_moved_byte. plan does not read them;
plancheck.py adds them, since on this machine they take the nodes' cores.
(On real nodes the network's kernel work is the nodes' own.)

What the nodes' links carried beyond the bytes of the files moved (over
each run's epochs, against plan's files and bytes moved) is fitted the
same way, per file and per byte moved (link_bytes_per_moved_file and
_byte): the messages' frames, MPI's and TCP/IP's headers and the
acknowledgements. plan adds them to the files' bytes between nodes.

How full the ranks kept the footprint's bounds is fitted too, from each
node's peak of the memory cgroup of what mpirun started there (the rank
and orted), against plan's footprint terms: the terms held whatever the
training does (the rank's own files, as the pages they write where its
--mem holds its shard; their records, the tables, the chunk reads, the
rings) count whole, and least squares on the peak's relative error fits
the process beside them (mem_process_bytes), the share of the bounds on
files in flight between ranks and answered in place it held
(mem_fill_in_flight), and that of the bound on files handed on in
place, for a training that takes its batches as they come
(mem_fill_handed) and for one that holds each for a step and so bounds
the epochs (mem_fill_handed_training; runs of loaders.py --step). plan
then prints each rank's likely peak beside its footprint. A run with a
step gives the fills and the links' bytes only: its cores idle while the
training holds a batch, so it tells nothing of CPU per file.

    .venv/bin/python examples/bench/calibrate.py --out costs.json RESULTS.jsonl [RESULTS.jsonl …]

Each RESULTS.jsonl needs its --work (loaders.py's, where the packed
datasets are): give them as RESULTS.jsonl=WORK when they differ from the
results' own record of it.
"""

import argparse
import json
import os
import sys

import numpy as np

import plancheck
import prepare

RANK = ("files", "moved_files", "moved_bytes", "read_bytes", "start", "filled_bytes")
CLIENT = ("files", "copied_bytes", "handed_bytes", "bounded_bytes")
# the costs of CLIENT's columns of files handed on, which only runs that
# hand files on that way fit (with no bound: a single rank whose --mem
# holds its shard, one node); a cost not fitted is left out of the file
HANDED = {"handed_bytes": "client_s_per_handed_byte", "bounded_bytes": "client_s_per_bounded_byte"}


def rows(results, work, brandrt, nodes=None):
    """(features, measured CPU seconds) per node and epoch of every
    brandrt-window run in results (on nodes nodes, if given), planned on
    work's datasets; and per node, its footprint's terms against its
    cgroup's peak (memory_rows)."""
    out, nas = [], plancheck.rate(plancheck.meta(results)["nas_rate"])
    for run in plancheck.runs(results):
        if nodes and run["nodes"] not in nodes:
            continue
        # a training that held each batch (loaders.py --step) bounds the
        # epochs: the cores idle, a waiting rank polls, and the first epoch
        # waits for the training, so such a run gives the memory fills and
        # the links' bytes, not CPU costs, busy cores or the job's start
        stepped = bool(run.get("step_s"))
        stats = run.get("own", {}).get("stats")
        if stats and not stepped:  # the job's start: the benchmark's first epoch less serve's
            out.append(({}, {"start": run["epochs"][0]["seconds"] - stats[0]["seconds"]}))
        chunks = os.path.join(work, prepare.chunks_name(run["chunk_files"], run["nodes"]))
        _, planned = plancheck.plan(brandrt, chunks, run, run.get("workers", 4))
        link = {"link_files": 0, "link_bytes": 0, "carried": 0}
        for e, m in zip(planned["epochs"], run["epochs"]):
            for i, (rf, node) in enumerate(zip(e["ranks"], m["nodes"])):
                first = e["epoch"] == 1
                cap, handable = planned["hand_cap_bytes"][i], rf["handable_bytes"]
                x = {"files": rf["files"], "read_bytes": rf["read_bytes"],
                     "copied_bytes": rf["bytes"] - (handable if cap else 0),
                     "handed_bytes": handable if cap < 0 else 0, "bounded_bytes": handable if cap > 0 else 0,
                     "moved_files": rf["sent_files"] + rf["received_files"],
                     "moved_bytes": rf["sent_bytes"] + rf["received_bytes"], "start": int(first),
                     "filled_bytes": min(planned["mem_bytes"][i], planned["shard_bytes"][i]) if first else 0}
                by = node["cpu_by"]
                if not stepped:
                    out.append((x, {"rank": by["rank"], "client": by["main"] + by["workers"], "nas": by["nas client"]}))
            # the machine's busy time less every node's: the emulated NAS
            # server, mpirun, whatever else shares the cores
            machine = m["machine_busy"] * m["seconds"] * os.cpu_count()
            node_cpu = sum(n["cpu_s"] + n["cpu_by"]["nas client"] for n in m["nodes"])
            read = sum(rf["read_bytes"] for rf in e["ranks"])
            moved = sum(rf["received_bytes"] for rf in e["ranks"])
            if not stepped:
                out.append(({"host_read_bytes": read, "host_moved_bytes": moved}, {"host": max(0.0, machine - node_cpu)}))
            link["link_files"] += sum(rf["received_files"] for rf in e["ranks"])
            link["link_bytes"] += moved
            link["carried"] += m["between_nodes_bytes"]
            # how busy the cores were where storage did not bound the
            # epoch (its link under 80 % full), after the first
            if e["epoch"] > 1 and not stepped and m["net_bytes"] / nas < 0.8 * m["seconds"]:
                out.append(({}, {"busy": m["machine_busy"]}))
        out += memory_rows(run, planned)
        # what the nodes' links carried beyond the files' bytes, over the
        # run's epochs (an epoch's reads and pushes ahead cross the links
        # in the epoch before)
        if link["link_files"]:
            carried = link.pop("carried")
            out.append((link, {"link": carried - link["link_bytes"]}))
    return out


# the footprint's terms held whatever the training does, at their bounds,
# beside the rank's own files (plan's memFills.likelyPeak), and those it
# fills as it goes
HELD = ("Records", "Tables", "Dataset", "Order", "OrderOut", "Reads", "Rings")
IN_FLIGHT = ("Remote", "MPI", "Answered", "Received")
MEMORY = ("process", "in_flight", "handed", "handed_training")
FILLS = {"process": "mem_process_bytes", "in_flight": "mem_fill_in_flight", "handed": "mem_fill_handed",
         "handed_training": "mem_fill_handed_training"}


def memory_rows(run, planned):
    """A row per node of run: its footprint's terms as the fills weigh
    them, against the peak of its rank's memory cgroup (the rank and
    orted). A training that held each batch for a step (loaders.py
    --step) bounds the epoch, as plan --train-rate has it."""
    peaks = run.get("memory", {}).get("per_node_mpi_peak_bytes") or []
    training = bool(run.get("step_s"))
    out = []
    for t, peak in zip(planned["footprint_terms"], peaks):
        # own files: the pages they write where no place is lent twice
        held = sum(t[k] for k in HELD) + (t["Written"] if t["Budget"] >= t["Shard"] else t["Own"])
        x = {"process": 1, "in_flight": sum(t[k] for k in IN_FLIGHT),
             "handed": 0 if training else t["Handed"], "handed_training": t["Handed"] if training else 0}
        out.append((x, {"mem": peak - held, "mem_peak": peak}))
    return out


def fit_memory(data):
    """The fills (FILLS) that bring held terms and process to each node's
    cgroup peak, by least squares on the peak's relative error; a share
    past 1 (a bound more than full) is taken as 1. Returns them (a fill no
    row could fit, none), the rows' count, and the peaks' ratios to the
    fit."""
    sel = [(x, y) for x, y in data if "mem" in y]
    if not sel:
        return {}, 0, []
    x = np.array([[float(xi[n]) for n in MEMORY] for xi, _ in sel])
    peak = np.array([yi["mem_peak"] for _, yi in sel], dtype=float)
    y = np.array([yi["mem"] for _, yi in sel], dtype=float)
    coef = nnls(x / peak[:, None], y / peak)
    coef[1:] = np.minimum(coef[1:], 1)
    fitted = x.any(axis=0)
    fills = {FILLS[n]: float(c) for n, c, f in zip(MEMORY, coef, fitted) if f}
    return fills, len(sel), list(peak / (peak - y + x @ coef))


def nnls(x, y):
    """Non-negative least squares by dropping the most negative
    coefficient until none is (few columns: an exact active set is not
    needed); columns are scaled to unit norm first."""
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1
    xs = x / scale
    keep = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        if keep:
            coef[keep] = np.linalg.lstsq(xs[:, keep], y, rcond=None)[0]
        if not keep or coef[keep].min() >= 0:
            return coef / scale
        keep.remove(keep[int(np.argmin(coef[keep]))])


def fit(data, names, kind):
    """Seconds per unit of each of names for the CPU of kind."""
    sel = [(x, y) for x, y in data if kind in y]
    x = np.array([[float(xi.get(n, 0)) for n in names] for xi, _ in sel])
    y = np.array([yi[kind] for _, yi in sel])
    coef = nnls(x, y)
    pred = x @ coef
    err = np.abs(pred - y) / np.maximum(y, 1e-9)
    big = y > 0.1 * y.max()  # rows that carry weight
    return coef, len(y), float(np.median(err[big])) if big.any() else 0.0, float(err[big].max()) if big.any() else 0.0


def calibrate(pairs, brandrt, nodes=None):
    """The costs fitted on the runs of pairs ((results, work) each), on
    nodes nodes if given, and the lines that say how well they fit."""
    data = []
    for results, work in pairs:
        data += rows(results, work, brandrt, nodes)
    rank, n_rank, med_r, max_r = fit(data, RANK, "rank")
    client, n_client, med_c, max_c = fit(data, CLIENT, "client")
    nas, _, med_n, max_n = fit(data, ("read_bytes",), "nas")
    host, _, med_h, max_h = fit(data, ("host_read_bytes", "host_moved_bytes"), "host")
    link, _, med_l, max_l = fit(data, ("link_files", "link_bytes"), "link")
    busy = [y["busy"] for _, y in data if "busy" in y]
    busy = float(np.median(busy)) if busy else 1.0
    start = [y["start"] for _, y in data if "start" in y]
    start = max(0.0, float(np.median(start))) if start else 0.0
    fills, n_mem, mem_ratios = fit_memory(data)
    fitted = {c: any(x.get(c) for x, y in data if "client" in y) for c in HANDED}
    per_mb = {c: "%.0f" % (client[CLIENT.index(c)] * 1e12) if fitted[c] else "-" for c in HANDED}
    costs = {
        "rank_s_per_file": rank[0], "rank_s_per_moved_file": rank[1], "rank_s_per_moved_byte": rank[2],
        "read_s_per_byte": rank[3] + nas[0], "rank_s_start": rank[4], "rank_s_per_filled_byte": rank[5],
        "client_s_per_file": client[0], "client_s_per_byte": client[1],
        **{HANDED[c]: client[CLIENT.index(c)] for c in HANDED if fitted[c]},
        "cores_busy": busy, "start_s": start, "host_s_per_read_byte": host[0], "host_s_per_moved_byte": host[1],
        "link_bytes_per_moved_file": link[0], "link_bytes_per_moved_byte": link[1], **fills,
        "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
        "fitted_on": ["%s (nodes %s)" % (r, ",".join(map(str, nodes)) if nodes else "all") for r, _ in pairs],
    }
    lines = [
        "fitted on %d node-epochs; |fit - measured| / measured over the rows above a tenth of the largest, median / most:" % n_rank,
        "  rank        %5.1f %% / %5.1f %%   %.1f µs per position, %.1f µs per file moved, %.0f µs per MB moved, %.0f µs per MB read;" % (
            100 * med_r, 100 * max_r, rank[0] * 1e6, rank[1] * 1e6, rank[2] * 1e12, rank[3] * 1e12),
        "                                epoch 1: %.2f s, and %.0f µs per MB of memory filled" % (rank[4], rank[5] * 1e12),
        "  NAS client  %5.1f %% / %5.1f %%   %.0f µs per MB read" % (100 * med_n, 100 * max_n, nas[0] * 1e12),
        "  DataLoader  %5.1f %% / %5.1f %%   %.1f µs per file, %.0f µs per MB copied, %s µs per MB handed on in place (no bound), %s µs under a bound" % (
            100 * med_c, 100 * max_c, client[0] * 1e6, client[1] * 1e12, per_mb["handed_bytes"], per_mb["bounded_bytes"]),
    ] + [
        "              no run handed files on %s: plan counts their bytes %s" % (what, then)
        for col, what, then in (("handed_bytes", "with no bound (one node whose --mem holds the dataset)",
                                 "as under a bound" if fitted["bounded_bytes"] else "as copies"),
                                ("bounded_bytes", "under a bound", "as copies")) if not fitted[col]
    ] + [
        "  outside     %5.1f %% / %5.1f %%   %.0f µs per MB read, %.0f µs per MB moved between nodes (the emulation's: plan leaves it out)" % (
            100 * med_h, 100 * max_h, host[0] * 1e12, host[1] * 1e12),
        "  links       %5.1f %% / %5.1f %%   %.0f B per file moved and %.2f %% of its bytes, beyond the files' bytes (frames, MPI's and TCP/IP's headers, acknowledgements)" % (
            100 * med_l, 100 * max_l, link[0], 100 * link[1]),
    ] + memory_lines(fills, n_mem, mem_ratios) + [
        "  the cores were %.0f %% busy (median) in the epochs after the first that storage did not bound" % (100 * busy),
        "  the job started in %.2f s (median): from its launch to serving, which the first epoch adds" % start,
    ]
    return costs, lines


def memory_lines(fills, n, ratios):
    """What the memory fit says: the fills, and how near the nodes'
    peaks it came."""
    if not n:
        return ["  memory      no run had its ranks' cgroup peaks: plan prints no likely peak"]
    pct = lambda k: "%.0f %%" % (100 * fills[k]) if k in fills else "-"
    lines = ["  memory      %d of %d nodes' cgroup peaks within 10 %% of the fit (%.2f to %.2f): the process %.1f MiB; files in flight %s of their bounds," % (
        sum(0.9 <= r <= 1.1 for r in ratios), n, min(ratios), max(ratios), fills.get("mem_process_bytes", 0) / 2**20, pct("mem_fill_in_flight")),
        "              files handed on %s of theirs (a training that takes batches as they come), %s (one that bounds the epoch)" % (
        pct("mem_fill_handed"), pct("mem_fill_handed_training"))]
    for key, what in (("mem_fill_handed", "took batches as they came"), ("mem_fill_handed_training", "bounded its epochs (loaders.py --step)")):
        if key not in fills:
            lines.append("              no run's training %s: plan counts files handed on at their bound there" % what)
    return lines


def write(costs, path):
    """Writes costs to path whole, or not at all."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(costs, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="loaders.py results.jsonl files, each as RESULTS or RESULTS=WORK")
    ap.add_argument("--out", required=True, help="the costs file to write (JSON)")
    ap.add_argument("--work", default="/var/tmp/brandrt-bench/plan", help="loaders.py --work of a results file that names none")
    ap.add_argument("--brandrt", default=os.path.join(plancheck.ROOT, "bin", "brandrt"))
    ap.add_argument("--nodes", help="fit on the runs on these numbers of nodes only (2,3): hold the others out")
    a = ap.parse_args()
    nodes = [int(n) for n in a.nodes.split(",")] if a.nodes else None
    pairs = [(r, w or a.work) for r, _, w in (spec.partition("=") for spec in a.results)]
    costs, lines = calibrate(pairs, a.brandrt, nodes)
    write(costs, a.out)
    print("$ " + " ".join(sys.argv))
    print("\n".join(lines))
    print("wrote " + a.out)


if __name__ == "__main__":
    main()
