#!/usr/bin/env python3
"""brandrt against the loaders people use instead: the same epochs of the
same files through each system, each in a memory cgroup of the same size,
from a cold page cache, on the local disk and on an emulated NAS, in one
run. Prints a table per storage and memory budget, writes JSON lines and
PNG plots.

    make bench-loaders                                   # the default run
    .venv/bin/python examples/bench/loaders.py --input /data/train --mem 10%,25%,50% --storage local,nas
    .venv/bin/python examples/bench/loaders.py --storage nas --file-size 8KB,110KB,1MB

Systems (--systems), each reading raw bytes (no decoding) through a torch
DataLoader with the same workers, batch size and collate:
  threads        reference, not a loader: --workers plain threads reading the
                 original files whole in a shuffled order
  random         the original files, an ImageFolder-like Dataset, shuffled
  coordl         random plus a static cache of a random subset of the files
                 that fits the budget, filled in epoch 1, never evicted
  webdataset     tar shards, shard shuffle and a sample shuffle buffer of the
                 budget (split over the workers)
  mosaic         Mosaic Streaming, MDS shards, its default shuffle (py1e), a
                 cache (cache_limit) of the budget in memory
  litdata        LitData's optimized format, shuffle=True, a cache
                 (max_cache_size) of the budget in memory
  brandrt-window brandrt serve (one rank, the window policy: its default)
                 through a BrandLoader over BrandDataset() and BrandSampler;
                 one run per --chunk-files K
  brandrt-paper  the same with the papers' policy (serve --policy paper)
  brandrt-fresh  brandrt-window started with serve --fresh: its first epoch
                 begins at once, not at the training's first word (it
                 cannot resume); not in "all"
  noio           the same DataLoader handing out bytes already in memory: the
                 loader's own upper bound

With --nodes N (a list: 1,2,3,4) every system runs on the N nodes of an
emulated cluster (examples/cluster/cluster.sh, its NAS in front of this
machine's files), all at once, each node in its own cgroup of the same
memory (cluster.py): --mem percentages are then of the dataset for all
nodes together (each node holds its share), --node-mem a size per node;
random reads through a DistributedSampler, coordl with its partitioned
cache across nodes, WebDataset split by node, Mosaic and LitData in their
multi-node settings (each node a cache of its budget), brandrt one rank
per node through the cluster's mpirun.

Each run gets a cgroup v1 memory limit of the budget plus --allowance (for
its processes: Python, torch, workers; page cache and shared memory count
against it), and the page cache is dropped before it starts. brandrt's
rank leaves 400 MiB of it for the DataLoader's processes (serve --leave,
measured: they held 267-361 MiB with up to 60,000 files, 491-498 MiB
with 400,000; each run prints what they held):
where its footprint with --mem the budget would not, it runs with the
most that does (--mem 100%cgroup), and says so. The bytes a
system read from storage are the kernel's: the cgroup's block-device
accounting on the local disk, the bytes received over the NAS link on the
NAS. Needs root.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
import cluster  # noqa: E402
import prepare  # noqa: E402
import cpusteps  # noqa: E402
import report  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ALL = ["threads", "random", "coordl", "webdataset", "mosaic", "litdata", "brandrt-window", "brandrt-paper", "noio"]
# brandrt's policies: the serve flags of each.
POLICIES = {"window": ["--policy", "window"], "paper": ["--policy", "paper"], "fresh": ["--policy", "window", "--fresh"]}
NAS_IF = "brnas-h"
NAS_MOUNT = "/run/brandrt-nas-mnt"
# The datasets of a list of --file-size: each as large as the default one
# (30,000 files of 110 KB) unless that takes more files than this.
SIZES_BYTES = 30000 * 110000
SIZES_FILES = 60000


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def parse_size(s):
    """Bytes from 110KB, 1.5GiB, 4096; SI and IEC units."""
    s = s.strip()
    units = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 1 << 10, "MIB": 1 << 20,
             "GIB": 1 << 30, "TIB": 1 << 40, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    i = len(s)
    while i > 0 and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    try:
        return int(float(s[:i]) * units[s[i:].strip().upper()])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError("%r is not a size (like 110KB, 512MiB or 4096)" % s) from None


def parse_mem(s):
    """A budget: a percentage of the dataset (25%) or a size."""
    s = s.strip()
    if s.endswith("%"):
        try:
            f = float(s[:-1])
        except ValueError:
            raise argparse.ArgumentTypeError("%r is not a percentage" % s) from None
        if not 0 < f <= 1000:  # over 100 %: more memory than the dataset (the papers measure 110 %)
            raise argparse.ArgumentTypeError("%r: a percentage in (0, 1000]" % s)
        return ("%", f)
    return ("B", parse_size(s))


def listed(parse):
    return lambda s: [parse(x) for x in s.split(",") if x.strip()]


def args_parser():
    p = argparse.ArgumentParser(prog="loaders.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("dataset")
    d.add_argument("--input", help="your dataset: an ImageFolder tree (a directory per class) or any tree of "
                                   "files; default: generate --files files of --file-size in WORK/input")
    d.add_argument("--file-size", type=listed(parse_size), default=[110000],
                   help="their mean size, or a list (8KB,110KB,1MB): one dataset, table and plot per size, "
                        "each in WORK/size-<SIZE> and OUT/<SIZE> (default 110KB)")
    d.add_argument("--files", type=listed(int),
                   help="files to generate, one count or one per --file-size (default 30000 for one size; "
                        "for a list, as many as %s holds, at most %s)" % (report.human_bytes(SIZES_BYTES),
                                                                          report.comma(SIZES_FILES)))
    d.add_argument("--classes", type=int, default=100, help="classes to generate (default 100)")
    d.add_argument("--work", default="/var/tmp/brandrt-bench/loaders",
                   help="where the formats are built and kept between runs (default %(default)s); on the disk "
                        "to measure")
    r = p.add_argument_group("runs")
    r.add_argument("--systems", type=listed(str.strip),
                   help="comma-separated, from: %s (default all; with --nodes all but threads)" % ", ".join(ALL))
    r.add_argument("--storage", type=lambda s: [x.strip() for x in s.split(",")], default=["local"],
                   help="local, nas or both (local,nas); nas starts the emulated NAS of nas.sh and stops it")
    r.add_argument("--mem", type=listed(parse_mem), default=[("%", 25.0)],
                   help="memory budgets, comma-separated: percentages of the dataset (over 100 %%: more than it) "
                        "or sizes (default 25%%)")
    r.add_argument("--chunk-files", type=listed(int), default=[64], help="brandrt's K values; 0 packs with pack's default (chunks of up to 16 MiB and 64 files) (default 64)")
    r.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3; epoch 1 is reported "
                                                         "apart from epochs 2 on)")
    r.add_argument("--workers", type=int, default=4, help="DataLoader workers (default 4)")
    r.add_argument("--batch-size", type=int, default=64, help="DataLoader batch size (default 64)")
    r.add_argument("--step", type=float, default=0.0,
                   help="seconds the training spends on each batch (slept after it, as a GPU's step would take; "
                        "default 0: a training that takes each batch as it comes). A training slower than its "
                        "DataLoader keeps the batches in flight full, which is what the footprint's terms bound")
    r.add_argument("--threads", type=int, default=4, help="threads of the reference `threads` (default 4)")
    r.add_argument("--pipe-size", type=parse_size, default=1 << 20,
                   help="the pipe that carries every DataLoader's batches from its workers (default 1MiB; 0: "
                        "Linux's 64 KiB, which caps a DataLoader at ~600 MB/s of raw bytes on 2 cores)")
    r.add_argument("--peers-inline", action="store_true",
                   help="the other systems' DataLoaders send their batches' small tensors (the labels) inside the "
                        "batch's pickle, as brandrt's BrandLoader does (brandrt.inline.InlineSmall over the same "
                        "collate), instead of by file descriptor as torch does: what part of brandrt's lead that is")
    r.add_argument("--allowance", type=parse_size,
                   help="memory for each run's processes on top of the budget (default 768MiB: a plain "
                        "DataLoader's 4 workers and libraries take ~620 MiB, Mosaic's ~720 MiB; with large "
                        "files, 620MiB and three batches in flight per worker when that is more: 1.3 GiB "
                        "for 1 MB files)")
    r.add_argument("--leave", type=parse_size, default=BRANDRT_LEAVE,
                   help="what brandrt's rank leaves of the cgroup for the processes beside it: the training "
                        "process, its DataLoader workers, mpirun (serve --leave; default 400MiB: they held "
                        "267-361 MiB with 1,300 to 60,000 files, 491-498 MiB with 400,000; each run prints "
                        "what they held)")
    r.add_argument("--repeat", type=int, default=1, help="rounds; each runs every system, in a rotated order; "
                                                         "tables give medians (default 1)")
    r.add_argument("--timeout", type=float, default=3600, help="seconds a run may take before it is killed and "
                                                               "shown as failed (default 3600)")
    r.add_argument("--stall", type=float, default=300, help="seconds without a batch after which a run is ended "
                                                            "and shown as stalled (default 300)")
    r.add_argument("--nodes", type=listed(int), help="run on an emulated cluster of this many nodes (a list: "
                                                   "1,2,3,4), every node reading through the NAS; --storage nas")
    r.add_argument("--node-mem", type=listed(parse_size),
                   help="with --nodes: memory budgets per node (sizes), instead of --mem's shares of the dataset")
    r.add_argument("--nic", default="10gbit", help="with --nodes: each node's link (default 10gbit)")
    r.add_argument("--nas-delay", default="100us", help="one-way delay of the NAS link (default 100us)")
    r.add_argument("--nas-rate", default="3gbit", help="rate of the NAS link (default 3gbit, ~0.38 GB/s)")
    r.add_argument("--profile", action="store_true",
                   help="sample every run's Python processes with py-spy and its brandrt rank with serve "
                        "--cpuprofile (in --out), and print the CPU µs per file of each step (cpusteps.py); "
                        "with --nodes, every rank's alone, beside the CPU of each kind of process; "
                        "sampling slows the runs: their speeds are not for comparing")
    o = p.add_argument_group("output")
    o.add_argument("--out", help="directory for results.jsonl, the tables and the plots (default "
                                 "WORK/results-<date>)")
    o.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"), help="the brandrt binary")
    o.add_argument("--report", metavar="RESULTS.jsonl", nargs="+",
                   help="run nothing: print the tables of earlier runs and draw their plots again, in --out "
                        "(default: beside the first file); several files are merged (each storage and memory "
                        "budget from one of them); FILE:local or FILE:nas takes that storage's runs alone")
    return p


def check_args(p, a):
    problems = []
    if a.systems is None:
        a.systems = [s for s in ALL if not (a.nodes and s == "threads")]
    for s in a.systems:
        if s not in ALL and not (s.startswith("brandrt-") and s[8:] in POLICIES):
            problems.append("unknown system %r (known: %s)" % (s, ", ".join(ALL)))
    for s in a.storage:
        if s not in ("local", "nas"):
            problems.append("unknown storage %r (local or nas)" % s)
    if a.epochs < 1 or a.workers < 0 or a.batch_size < 1 or a.repeat < 1 or a.threads < 1:
        problems.append("--epochs, --batch-size, --threads and --repeat must be ≥ 1 and --workers ≥ 0")
    if any(k < 0 for k in a.chunk_files):
        problems.append("--chunk-files must be ≥ 0 (0: pack's default)")
    if 0 in a.chunk_files and "brandrt-paper" in a.systems:
        problems.append("--chunk-files 0 (chunks cut by size) with brandrt-paper: the paper's policy needs K files per chunk")
    if not a.mem:
        problems.append("--mem names no budget")
    a.files = file_counts(a.files, a.file_size)
    if len(a.files) != len(a.file_size):
        problems.append("--files gives %d counts for %d --file-size values: give one, or one per size" %
                        (len(a.files), len(a.file_size)))
    elif a.input is None and (min(a.files, default=0) < 1 or a.classes < 1 or a.classes > min(a.files) or
                              min(a.file_size, default=0) < 1):
        problems.append("need --files ≥ 1, 1 ≤ --classes ≤ --files and a --file-size")
    if a.input is not None and len(a.file_size) > 1:
        problems.append("--input is one dataset: a list of --file-size is for generated ones")
    if len(set(a.file_size)) != len(a.file_size):
        problems.append("--file-size names a size twice")
    if any(s.startswith("brandrt") for s in a.systems) and not os.access(a.brandrt, os.X_OK):
        problems.append("%s: no brandrt binary (make build)" % a.brandrt)
    if a.nodes:
        if any(n < 1 for n in a.nodes):
            problems.append("--nodes must be ≥ 1")
        if a.storage != ["nas"]:
            problems.append("--nodes reads through the cluster's NAS: give --storage nas")
        if "threads" in a.systems:
            problems.append("threads is a reference for one machine: leave it out of --systems with --nodes")
        if a.node_mem:
            a.mem = [("B", b) for b in a.node_mem]
    elif a.node_mem:
        problems.append("--node-mem is a budget per node of --nodes")
    why = cgroups.available()
    if why:
        problems.append(why + ": every system must run under the same kernel-enforced memory limit")
    if problems:
        p.error("\n  ".join(problems))


def file_counts(files, sizes):
    """The files of each size of --file-size: --files (one count for
    every size, or one per size), else 30,000 for one size and, for a
    list, as many as SIZES_BYTES holds, at most SIZES_FILES."""
    if files is None:
        return [30000] if len(sizes) == 1 else [min(SIZES_FILES, max(1, round(SIZES_BYTES / max(1, s))))
                                                for s in sizes]
    return files * len(sizes) if len(files) == 1 else files


# What a DataLoader of 4 workers and its training process take, with
# their libraries (measured, 620 MiB): the allowance beside the budget
# is at least this.
PROCESSES_BYTES = 620 << 20

# What brandrt's rank leaves of the cgroup for the processes beside it
# (serve --leave): the training process, its 4 DataLoader workers reading
# through a BrandLoader, and mpirun. Their anonymous memory and the pages
# of the files they map (torch's libraries) peaked at 267-361 MiB with
# files of 8 KB, 110 KB and 1 MB, 1,300 to 60,000 of them (one node, a
# quarter in memory, 2026-11-28; every brandrt run records and prints
# it), and at 491-498 MiB with 400,000 files of 8 KB, where the rank's
# footprint had room to spare. The files they read stay in the rank's
# shared memory, which its footprint counts.
BRANDRT_LEAVE = 400 << 20


def allowance(a, cat):
    """--allowance, or its default for the dataset: 768 MiB, or the
    processes' ~620 MiB and, per DataLoader worker, three batches in
    flight (two prefetched, the pickled copy of one) when that is more;
    a batch of 64 files of 1 MB is 64 MB in every copy."""
    if a.allowance is not None:
        return a.allowance
    batch = a.batch_size * cat["bytes"] / max(1, len(cat["files"]))
    return max(768 << 20, int(PROCESSES_BYTES + 3 * max(1, a.workers) * batch))


def budget_bytes(mem, cat):
    kind, v = mem
    return int(cat["bytes"] * v / 100) if kind == "%" else int(v)


def mem_label(mem):
    kind, v = mem
    return ("%g%%" % v) if kind == "%" else report.human_bytes(v)


def prepare_all(a):
    os.makedirs(a.work, exist_ok=True)
    input_dir = os.path.abspath(a.input) if a.input else prepare.generate(a.work, a.files, a.file_size, a.classes, log)
    cat = prepare.catalog(a.work, input_dir, log)
    min_budget = min(budget_bytes(m, cat) for m in a.mem)
    need = {s.split("-")[0] for s in a.systems}
    # on a cluster, enough shards for every worker of the most nodes
    shards = max(1, a.workers) * max(a.nodes or [1])
    if "brandrt" in need:
        for k in a.chunk_files:
            for ranks in sorted(set(a.nodes or [1])):
                prepare.chunks(a.work, cat, k, a.brandrt, log, ranks)
    if "webdataset" in need:
        prepare.webdataset_shards(a.work, cat, shards, log)
    if "mosaic" in need:
        prepare.mds_shards(a.work, cat, shards, min_budget, log)
    if "litdata" in need:
        prepare.litdata_chunks(a.work, cat, shards, min_budget, log)
    return cat


def plan(a):
    """The runs of one round: (system, K or None) in the order given."""
    runs = []
    for s in a.systems:
        if s.startswith("brandrt"):
            runs += [(s, k) for k in a.chunk_files]
        else:
            runs.append((s, None))
    return runs


def run_one(a, cat, storage, mem, system, k, n):
    """One system's run in its own cgroup; returns its record."""
    budget = budget_bytes(mem, cat)
    work = os.path.abspath(a.work)
    root = NAS_MOUNT + work if storage == "nas" else work
    input_dir = NAS_MOUNT + cat["input"] if storage == "nas" else cat["input"]
    device = cgroups.block_device(work)
    group = cgroups.Group("brandrt-bench-%d-%d" % (os.getpid(), n), budget + a.allowance, device)
    rec = {"system": system, "storage": storage, "mem": mem_label(mem), "budget_bytes": budget,
           "limit_bytes": budget + a.allowance, "chunk_files": k, "files": len(cat["files"]),
           "dataset_bytes": cat["bytes"], "workers": a.workers, "batch_size": a.batch_size, "step_s": a.step, "epochs": []}
    spec = {"system": system, "root": root, "input": input_dir, "catalog": os.path.join(work, "files.json"),
            "budget": budget, "workers": a.workers, "batch_size": a.batch_size, "step_s": a.step, "epochs": a.epochs,
            "threads": a.threads, "pipe_size": a.pipe_size, "stall_s": a.stall, "peers_inline": a.peers_inline,
            "chunk_files": k, "brandrt": os.path.abspath(a.brandrt), "repo": REPO,
            "mpirun": ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"],
            "serve_flags": POLICIES.get(system[8:], []) if system.startswith("brandrt") else [],
            "leave": a.leave,
            "group": group.name, "device": device,
            "net_dev": NAS_IF if storage == "nas" else None, "owner": os.getpid()}
    # The run's own temporary directory (TMPDIR of everything it starts),
    # holding its spec: what its processes leave there (Mosaic's file
    # locks, the pymp-* directories of killed DataLoader workers, Open
    # MPI's session) goes with it.
    tmp = tempfile.mkdtemp(prefix="brandrt-bench-%d-%d-" % (os.getpid(), n), dir="/tmp")
    cmd = [sys.executable, "-W", "ignore", os.path.join(HERE, "runner.py")]
    if a.profile:
        # the runner and its DataLoader workers sampled, on CPU only; the
        # rank profiles itself
        prof = os.path.join(a.out, "profile-%d-%s" % (n, system + ("-k%d" % k if k else "")))
        rec["profile"] = {"py": prof + ".txt"}
        cmd = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--subprocesses", "--nonblocking",
               "-r", "250", "-f", "raw", "-o", prof + ".txt", "--"] + cmd
        if system.startswith("brandrt"):
            os.makedirs(prof + "-rank", exist_ok=True)
            spec["serve_flags"] = spec["serve_flags"] + ["--cpuprofile", prof + "-rank"]
            rec["profile"]["go"] = prof + "-rank"
    spec_file = os.path.join(tmp, "spec.json")
    with open(spec_file, "w") as f:
        json.dump(spec, f)
    shm_before = set(os.listdir("/dev/shm"))
    killed = threading.Event()
    # a daemon, cancelled however this ends: a pending timer would keep
    # the interpreter from exiting on SIGTERM
    timer = threading.Timer(a.timeout, lambda: (killed.set(), group.kill()))
    timer.daemon = True
    try:
        cgroups.drop_caches()
        proc = subprocess.Popen(cmd + [spec_file],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, TMPDIR=tmp), preexec_fn=group.join, start_new_session=True)
        err = []
        t = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        t.start()
        timer.start()
        held = [0, 0]
        sampler = threading.Thread(target=sample_held, args=(group, proc, held, system.startswith("brandrt")),
                                   daemon=True)
        sampler.start()
        # DataLoader workers inherit the runner's stdout: once the runner
        # has exited (or was killed), what is left of the run goes, so that
        # the pipe closes.
        threading.Thread(target=lambda: (proc.wait(), group.kill()), daemon=True).start()
        for line in proc.stdout:
            cluster.take(rec, line, system, k, storage)
        proc.wait()
        timer.cancel()
        t.join(timeout=5)
        group.kill()
        sampler.join(timeout=5)
        rec["memory"] = dict(group.memory(), held_peak_bytes=held[0])
        if held[1]:
            rec["memory"]["others_held_peak_bytes"] = held[1]
            log("  %s: the processes beside the rank (training, DataLoader workers, mpirun) held at most %s; "
                "the rank left them %s (serve --leave)" % (system, report.human_bytes(held[1]),
                                                          report.human_bytes(spec["leave"])))
        if rec["memory"]["oom_kills"]:  # the cause, whatever the runner saw of it
            rec["error"] = "a process killed by the kernel: out of memory (limit %s)%s" % (
                report.human_bytes(rec["limit_bytes"]), "; then " + rec["error"] if "error" in rec else "")
        elif proc.returncode != 0 and "error" not in rec:
            rec["error"] = ("timed out after %.0f s" % a.timeout) if killed.is_set() else \
                "exit status %d: %s" % (proc.returncode, "".join(err)[-500:].strip())
        if len(rec["epochs"]) < a.epochs and "error" not in rec:
            rec["error"] = "stopped after %d of %d epochs" % (len(rec["epochs"]), a.epochs)
        bad = [e for e in rec["epochs"] if e["check"] != "ok"]
        if bad and "error" not in rec:
            rec["error"] = "epoch %d: %s" % (bad[0]["epoch"], bad[0]["check"])
        rec["status"] = "failed" if "error" in rec else "ok"
        if rec["status"] == "failed":
            log("  %s failed: %s" % (system, rec["error"]))
        return rec
    finally:
        timer.cancel()
        group.remove()
        shutil.rmtree(tmp, ignore_errors=True)
        clean_shm(shm_before)


def sample_held(group, proc, held, others):
    """The peak of group.held() while proc runs, sampled every 50 ms, in
    held[0]; with others (a brandrt run), in held[1] the peak of what the
    processes beside its rank (the training process, its DataLoader
    workers, mpirun) hold, sampled every 200 ms: their anonymous memory
    and the pages of files they map (torch's libraries), each page shared
    between processes counted once (the sum of their Pss). The shared
    memory they map is the rank's arena and rings, which its footprint
    counts."""
    tick = 0
    while proc.poll() is None:
        try:
            held[0] = max(held[0], group.held())
        except OSError:
            return
        if others and tick % 4 == 0:
            beside = others_held(group.pids())
            if beside is not None:
                held[1] = max(held[1], beside)
        tick += 1
        time.sleep(0.05)


def others_held(pids):
    """What the processes of pids beside the brandrt rank hold (Pss_Anon
    and Pss_File of their smaps_rollup, summed), or None when no rank
    (cgroups.is_rank) is among them."""
    cmds = {}
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmds[pid] = f.read().split(b"\0")
        except OSError:
            continue
    if not any(cgroups.is_rank(c) for c in cmds.values()):
        return None
    total = 0
    for pid, cmd in cmds.items():
        if cgroups.is_rank(cmd):
            continue
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                for line in f:
                    if line.startswith(("Pss_Anon:", "Pss_File:")):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def clean_shm(before):
    """Removes what the run left in /dev/shm: our caches and attach points,
    Open MPI's segments, Mosaic's shared memory (NNNNNN_name), the
    semaphores of Python's multiprocessing (its workers were killed)."""
    for d in set(os.listdir("/dev/shm")) - before:
        if d.startswith(("brandrt-bench-", "vader_segment.", "sem.mp-")) or (d[:6].isdigit() and d[6:7] == "_"):
            p = os.path.join("/dev/shm", d)
            try:
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
            except OSError:
                pass


class NAS:
    """The emulated NAS of nas.sh, up for the duration of a with block."""

    def __init__(self, a):
        self.a = a

    def __enter__(self):
        subprocess.run(["bash", os.path.join(HERE, "nas.sh"), "up", "/", NAS_MOUNT, self.a.nas_delay,
                        self.a.nas_rate], check=True, stdout=sys.stderr)
        return self

    def __exit__(self, *exc):
        subprocess.run(["bash", os.path.join(HERE, "nas.sh"), "down"], check=False)


def remove_stale():
    """Removes the cgroups and the /dev/shm and /tmp directories of earlier
    runs whose driver died (SIGKILL, a reboot of a VM that kept /dev/shm),
    with what is left in them; all are named brandrt-bench-<driver's
    pid>-…"""
    for d in os.listdir(os.path.join(cgroups.ROOT, "memory")):
        parts = d.split("-")
        if len(parts) == 4 and _stale(d):
            log("removing cgroup %s, left by a run that was killed" % d)
            cgroups.Group.existing(d).remove()
    for top in ("/dev/shm", "/tmp"):
        for d in os.listdir(top):
            if _stale(d) and os.path.isdir(os.path.join(top, d)):
                log("removing %s/%s, left by a run that was killed" % (top, d))
                shutil.rmtree(os.path.join(top, d), ignore_errors=True)


def _stale(name):
    parts = name.split("-")
    if not (name.startswith("brandrt-bench-") and len(parts) >= 4 and parts[2].isdigit()):
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def report_again(paths, out):
    """The tables and plots of earlier runs' results.jsonl files, merged.
    Each (storage, memory budget, nodes) must come from one run: its
    ratios are taken within the rounds of that run."""
    SAME = ("files", "bytes", "workers", "batch_size", "epochs", "threads", "pipe_size", "allowance_bytes", "peers_inline")
    LATER = {"peers_inline": False}  # what the runs from before a key was recorded had
    metas, records, source = [], [], {}
    for path in paths:
        path, _, only = path.rpartition(":") if path.endswith((":local", ":nas")) else (path, "", "")
        meta = None
        try:
            with open(path) as f:
                lines = [(n, json.loads(line)) for n, line in enumerate(f, 1) if line.strip()]
        except OSError as e:
            sys.exit("bench: %s: %s" % (path, e.strerror))
        except ValueError as e:
            sys.exit("bench: %s: not JSON lines (%s)" % (path, e))
        for n, r in lines:
            if r.get("event") == "meta":
                meta = r
                continue
            if only and r.get("storage") != only:
                continue
            key = (r.get("storage"), r.get("mem"), r.get("nodes"))
            if source.setdefault(key, path) != path:
                sys.exit("bench: %s, memory %s%s is in both %s and %s; give each once" % (
                    key[0], key[1], ", %s nodes" % key[2] if key[2] else "", source[key], path))
            records.append(r)
        if meta is None:
            sys.exit("bench: %s: no meta line; not a results.jsonl of loaders.py" % path)
        for k in SAME:
            was, now = (m.get(k, LATER.get(k)) for m in (metas[0] if metas else meta, meta))
            if was != now:
                sys.exit("bench: %s and %s differ in %s (%s, %s): not the same benchmark" % (paths[0], path, k, was, now))
        metas.append(meta)
    meta = dict(metas[0], command="\n          ".join(m["command"] for m in metas))
    print(report.tables(meta, records), end="")
    out = out or os.path.dirname(os.path.abspath(paths[0]))
    os.makedirs(out, exist_ok=True)
    for png in report.plots(meta, records, out):
        log("plot: " + png)


def main():
    p = args_parser()
    a = p.parse_args()
    if a.report:
        return report_again(a.report, a.out)
    check_args(p, a)
    # SIGTERM ends the run like ^C: the finally clauses kill what the
    # current system started and remove its cgroup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    remove_stale()
    a.out = a.out or os.path.join(a.work, "results-" + time.strftime("%Y%m%d-%H%M%S"))
    command = " ".join([os.path.relpath(sys.argv[0], REPO) if sys.argv[0].startswith(REPO) else sys.argv[0]] +
                       sys.argv[1:])
    if len(a.file_size) == 1:
        a.files, a.file_size = a.files[0], a.file_size[0]
        run_dataset(a, command)
        return
    # one dataset per size, each a run of its own with its own tables and
    # plots; then brandrt's ratios by size
    summary = []
    for size, files in zip(a.file_size, a.files):
        b = argparse.Namespace(**vars(a))
        b.file_size, b.files = size, files
        b.work = os.path.join(a.work, "size-" + size_label(size))
        b.out = os.path.join(a.out, size_label(size))
        log("files of %s: %s files in %s" % (size_label(size), report.comma(files), b.work))
        records = run_dataset(b, command)
        summary += ["%s (%s files): %s" % (size_label(size), report.comma(files), line)
                    for line in report.versus(records)]
    text = "== by file size\n" + "\n".join(summary) + "\n"
    print(text)
    with open(os.path.join(a.out, "sizes.txt"), "w") as f:
        f.write(text)


def size_label(n):
    """110000 → 110KB, 1048576 → 1MiB: a file size as a short name."""
    for unit, div in (("MB", 10**6), ("MiB", 1 << 20), ("KB", 10**3), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return "%dB" % n


def run_dataset(a, command):
    """Every round of every system on one dataset (a.files of
    a.file_size, or a.input); writes a.out's results, tables and plots.
    Returns the records."""
    try:
        cat = prepare_all(a)
    except prepare.PrepareError as e:
        sys.exit("bench: %s" % e)
    a.allowance = allowance(a, cat)
    out = a.out
    os.makedirs(out, exist_ok=True)
    results = os.path.join(out, "results.jsonl")
    meta = {"command": command, "machine": report.machine(), "files": len(cat["files"]), "bytes": cat["bytes"],
            "input": cat["input"], "allowance_bytes": a.allowance, "workers": a.workers,
            "batch_size": a.batch_size, "epochs": a.epochs, "threads": a.threads, "pipe_size": a.pipe_size,
            "peers_inline": a.peers_inline, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if a.nodes:
        meta.update(nodes=a.nodes, nic=a.nic, nas_rate=a.nas_rate, nas_delay=a.nas_delay)
    records = []
    runs = plan(a)
    n = 0
    with open(results, "w") as jf:
        jf.write(json.dumps(dict(meta, event="meta")) + "\n")
        if a.nodes:
            records = run_cluster(a, cat, runs, jf)
        for storage in a.storage if not a.nodes else []:
            ctx = NAS(a) if storage == "nas" else _Nothing()
            with ctx:
                for rnd in range(a.repeat):
                    for mem in a.mem:
                        order = runs[rnd % len(runs):] + runs[: rnd % len(runs)]
                        for system, k in order:
                            n += 1
                            log("%s, %s, round %d: %s%s" % (storage, mem_label(mem), rnd + 1, system,
                                                             " K=%d" % k if k else ""))
                            rec = run_one(a, cat, storage, mem, system, k, n)
                            rec["round"] = rnd + 1
                            records.append(rec)
                            jf.write(json.dumps(rec) + "\n")
                            jf.flush()
    text = report.tables(meta, records)
    if a.profile:
        text += "\n" + cpusteps.table(records, a.brandrt)
    print(text)
    with open(os.path.join(out, "tables.txt"), "w") as f:
        f.write(text)
    for png in report.plots(meta, records, out):
        log("plot: " + png)
    log("results: " + results)
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        log("%d of %d runs failed (shown in the table)" % (len(failed), len(records)))
    return records


def run_cluster(a, cat, runs, jf):
    """Every round of every system on each cluster size of --nodes."""
    records, n = [], 0
    for nodes in a.nodes:
        with cluster.Cluster(a, nodes) as cl:
            for rnd in range(a.repeat):
                for mem in a.mem:
                    order = runs[rnd % len(runs):] + runs[: rnd % len(runs)]
                    for system, k in order:
                        n += 1
                        log("%d nodes, %s, round %d: %s%s" % (nodes, mem_label(mem), rnd + 1, system, " K=%d" % k if k else ""))
                        flags = POLICIES.get(system[8:], []) if system.startswith("brandrt") else []
                        prof = None
                        if a.profile and system.startswith("brandrt"):
                            # every rank profiles itself; the Python side is
                            # not sampled on a cluster (its CPU is split by
                            # process all the same)
                            prof = os.path.join(a.out, "profile-%d-%s-k%d" % (n, system, k))
                            flags = flags + ["--cpuprofile", os.path.join(prof, "rank-{rank}")]
                        rec = cluster.run(a, cl, cat, mem, mem_label(mem), system, k, n, flags)
                        if prof:
                            rec["profile"] = {"go_ranks": [os.path.join(prof, "rank-%d" % r) for r in range(nodes)]}
                        rec["round"] = rnd + 1
                        records.append(rec)
                        jf.write(json.dumps(rec) + "\n")
                        jf.flush()
    return records


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


if __name__ == "__main__":
    main()
