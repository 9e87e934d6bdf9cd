"""Tables and plots of the loader benchmark's records (see loaders.py)."""

import os
import platform
import statistics


def human_bytes(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


def comma(n):
    return "{:,}".format(int(round(n)))


def read_bytes(ev, storage):
    """What an epoch read from storage: the bytes received over the NAS
    link, or the cgroup's reads from the local disk."""
    return ev["net_bytes"] if storage == "nas" else ev["read_bytes"]


def epoch_line(ev, storage):
    s = max(ev["seconds"], 1e-9)
    return "%s files in %.2f s: %s files/s, %.0f MB/s, read %.2f× delivered, %.2f CPU s per 1,000 files, %s" % (
        comma(ev["files"]), s, comma(ev["files"] / s), ev["bytes"] / s / 1e6,
        read_bytes(ev, storage) / max(ev["bytes"], 1), 1000 * ev["cpu_s"] / max(ev["files"], 1), ev["check"])


def phase(epochs, storage):
    """files/s, MB/s, bytes read per byte delivered and CPU s per 1,000
    files over a list of epochs."""
    if not epochs:
        return None
    files = sum(e["files"] for e in epochs)
    nbytes = sum(e["bytes"] for e in epochs)
    secs = max(sum(e["seconds"] for e in epochs), 1e-9)
    return {"files_s": files / secs, "mb_s": nbytes / secs / 1e6,
            "amp": sum(read_bytes(e, storage) for e in epochs) / max(nbytes, 1),
            "between": sum(e.get("between_nodes_bytes", 0) for e in epochs) / max(nbytes, 1),
            "slowest_node_files_s": min((sum(n["files"] for n in ns) / max(sum(n["seconds"] for n in ns), 1e-9)
                                         for ns in zip(*[e["nodes"] for e in epochs])), default=None)
            if all("nodes" in e for e in epochs) else None,
            "cpu_k": 1000 * sum(e["cpu_s"] for e in epochs) / max(files, 1),
            # CPU µs per file by process (runner.CPUSplit), when recorded
            "cpu_by": {k: 1e6 * sum(e["cpu_by"][k] for e in epochs) / max(files, 1) for k in epochs[0]["cpu_by"]}
            if all("cpu_by" in e for e in epochs) else None,
            "first_batch_s": epochs[0].get("first_batch_s") or 0.0,
            # the share of the machine's cores busy, over the epochs' time
            "busy": sum(e["machine_busy"] * e["seconds"] for e in epochs) / secs
            if all("machine_busy" in e for e in epochs) else None}


def summary(rec):
    """{'e1': phase of epoch 1, 'steady': phase of epochs 2 on} of a run."""
    if rec["status"] != "ok":
        return None
    return {"e1": phase(rec["epochs"][:1], rec["storage"]), "steady": phase(rec["epochs"][1:], rec["storage"])}


def label(rec):
    k = rec.get("chunk_files")
    return rec["system"] + ("" if k is None else " K=%d" % k if k else " 16MiB")


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _by_round(records, of=lambda r: r):
    """({round: {label: of(record)}}, the labels in first-run order)."""
    rounds, labels = {}, []
    for r in records:
        rounds.setdefault(r["round"], {})[label(r)] = of(r)
        if label(r) not in labels:
            labels.append(label(r))
    return rounds, labels


def rows(records):
    """Per system label (in first-run order): medians over the rounds of
    each figure, and of the per-round ratio to random."""
    rounds, labels = _by_round(records)
    out = []
    for lab in labels:
        runs = [rs[lab] for rs in rounds.values() if lab in rs]
        ok = []
        for rs in rounds.values():
            if lab in rs and rs[lab]["status"] == "ok":
                ok.append((rs[lab], summary(rs[lab]), summary(rs["random"]) if "random" in rs else None))
        row = {"label": lab, "runs": len(runs), "ok": len(ok), "errors": [r["error"] for r in runs if "error" in r],
               "peak": _median([r["memory"]["peak_bytes"] for r in runs if "memory" in r]),
               "held": _median([r["memory"].get("held_peak_bytes") for r in runs if "memory" in r])}
        for ph in ("e1", "steady"):
            vals = [s[ph] for _, s, _ in ok if s[ph]]
            if not vals:
                row[ph] = None
                continue
            row[ph] = {k: _median([v[k] for v in vals]) for k in vals[0] if k != "cpu_by"}
            by = [v["cpu_by"] for v in vals if v.get("cpu_by")]
            row[ph]["cpu_by"] = {k: _median([b[k] for b in by]) for k in by[0]} if by else None
            row[ph]["x_random"] = _median([s[ph]["files_s"] / rs[ph]["files_s"] for _, s, rs in ok
                                           if rs and rs[ph] and s[ph]])
        out.append(row)
    return out


def machine():
    """A line about this machine and the software measured."""
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        mem = 0
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from importlib import metadata

    versions = []
    for name in ("torch", "webdataset", "mosaicml-streaming", "litdata"):
        try:
            versions.append("%s %s" % (name, metadata.version(name)))
        except metadata.PackageNotFoundError:  # the run of that system will say why
            versions.append("%s missing" % name)
    return "%d cores (%s), %s RAM, Linux %s, Python %s; %s" % (
        os.cpu_count(), cpu, human_bytes(mem), platform.release(), platform.python_version(), ", ".join(versions))


def tables(meta, records):
    """The text of one table per (storage, memory budget)."""
    out = ["command:  %s" % meta["command"], "machine:  %s" % meta["machine"],
           "dataset:  %s files, %s (%s)" % (comma(meta["files"]), human_bytes(meta["bytes"]), meta["input"]),
           "loaders:  DataLoader with %d workers (persistent), batch %d, batches through a pipe of %s; "
           "threads: %d; %d epochs per run; page cache dropped before each run" % (
               meta["workers"], meta["batch_size"], human_bytes(meta["pipe_size"]) if meta["pipe_size"] else "64 KiB",
               meta["threads"], meta["epochs"])
           + ("; every DataLoader sends its batches' small tensors inline (--peers-inline)" if meta.get("peers_inline") else "")]
    if meta.get("nodes"):
        out.append("cluster:  examples/cluster/cluster.sh: nodes' links %s, the NAS's one link %s, +%s each way; "
                   "an epoch ends when its slowest node does" % (meta["nic"], meta["nas_rate"], meta["nas_delay"]))
    groups = []
    for r in records:
        key = (r["storage"], r.get("nodes"), r["mem"])
        if key not in groups:
            groups.append(key)
    for storage, nodes, mem in groups:
        recs = [r for r in records if (r["storage"], r.get("nodes"), r["mem"]) == (storage, nodes, mem)]
        r0 = recs[0]
        src = "bytes received over the NAS link" if storage == "nas" else "the cgroup's reads from the disk"
        rounds = max(r["round"] for r in recs)
        if nodes:
            out += ["", "== %d node%s, NAS, memory %s: budget %s per node, cgroup limit %s per node (budget + %s); "
                    "read = bytes over the NAS link, net = bytes between the nodes; %d round%s, medians" % (
                        nodes, "s" if nodes > 1 else "", mem, human_bytes(r0["budget_bytes"]), human_bytes(r0["limit_bytes"]),
                        human_bytes(meta["allowance_bytes"]), rounds, "s" if rounds > 1 else "")]
        else:
            out += ["", "== %s, memory %s: budget %s, cgroup limit %s (budget + %s for the processes); read = %s; "
                    "%d round%s, medians" % (storage, mem, human_bytes(r0["budget_bytes"]), human_bytes(r0["limit_bytes"]),
                                             human_bytes(meta["allowance_bytes"]), src, rounds, "s" if rounds > 1 else "")]
        out.append("%-20s %34s   %34s   %9s  %s" % ("", "-------------- epoch 1 -------------",
                                                   "----------- epochs 2 on -----------", "", ""))
        out.append("%-20s %9s %7s %6s %5s %6s   %9s %7s %6s %5s %6s   %9s %9s%s" % (
            "system", "files/s", "MB/s", "read", "CPU", "×rand", "files/s", "MB/s", "read", "CPU", "×rand",
            "mem peak", "held", "     net  slowest" if nodes else ""))
        for row in rows(recs):
            if not row["ok"]:
                out.append("%-20s failed: %s" % (row["label"], "; ".join(sorted(set(row["errors"])))[:200]))
                continue
            cells = []
            for ph in ("e1", "steady"):
                v = row[ph]
                if v is None:
                    cells.append("%9s %7s %6s %5s %6s" % ("-", "-", "-", "-", "-"))
                    continue
                xr = "%5.2f×" % v["x_random"] if v["x_random"] is not None else "     -"
                cells.append("%9s %7.0f %5.2f× %5.2f %s" % (comma(v["files_s"]), v["mb_s"], v["amp"], v["cpu_k"], xr))
            line = "%-20s %s   %s   %9s %9s" % (row["label"], cells[0], cells[1], human_bytes(row["peak"] or 0),
                                                 human_bytes(row["held"] or 0))
            if nodes and row["steady"]:
                line += "  %5.2f× %8s" % (row["steady"]["between"], comma(row["steady"]["slowest_node_files_s"] or 0))
            if row["ok"] < row["runs"]:
                line += "  (%d of %d rounds failed: %s)" % (row["runs"] - row["ok"], row["runs"], row["errors"][0][:80])
            out.append(line)
        out += cpu_split(recs)
        out += busy(recs)
        out += versus(recs)
        if nodes and nodes > 1:
            out += links_check(recs)
    out += ["", "files/s and MB/s of delivered files; read: bytes read from storage per byte delivered; CPU: CPU "
                "seconds per 1,000 files, every process of the run; ×rand: files/s over random's in the same "
                "round; mem peak: the cgroup's peak, page cache included; held: the peak of its anonymous and "
                "shared memory (what it cannot drop)" + ("; on a cluster, the largest node's; net (epochs 2 on): "
                                                         "bytes between the nodes per byte delivered; slowest: the "
                                                         "slowest node's own files/s" if meta.get("nodes") else "")]
    return "\n".join(out) + "\n"


def cpu_split(records):
    """Lines giving each system's CPU µs per file by process (main,
    DataLoader workers, brandrt rank, other), epoch 1 and epochs 2 on; none
    when the runs did not record it."""
    rs = [r for r in rows(records) if r["ok"] and r["e1"] and r["e1"].get("cpu_by")]
    if not rs:
        return []
    kinds = list(rs[0]["e1"]["cpu_by"])
    out = ["", "CPU µs per file by process, epoch 1 / epochs 2 on:",
           "%-20s " % "system" + " ".join("%15s" % k for k in kinds) + " %15s" % "all"]
    for r in rs:
        cells = []
        for k in kinds + ["all"]:
            v = []
            for ph in ("e1", "steady"):
                by = r[ph]["cpu_by"] if r[ph] else None
                v.append("-" if by is None else "%.0f" % (sum(by.values()) if k == "all" else by[k]))
            cells.append("%15s" % " / ".join(v))
        out.append("%-20s " % r["label"] + " ".join(cells))
    return out


def busy(records):
    """A line giving the share of the machine's cores that were busy
    while each system ran (every process and the kernel: the NAS's server
    and the emulated links too), epoch 1 / epochs 2 on; none when the
    runs did not record it. Near 100 %, the machine's cores bound every
    figure of the table."""
    cells = ["%s %s" % (r["label"], " / ".join("-" if not r[ph] or r[ph]["busy"] is None else
                                               "%.0f %%" % (100 * r[ph]["busy"]) for ph in ("e1", "steady")))
             for r in rows(records) if r["ok"] and r["e1"] and r["e1"].get("busy") is not None]
    return ["machine's cores busy (epoch 1 / epochs 2 on): " + ", ".join(cells)] if cells else []


def links_check(records):
    """Lines setting the bytes brandrt's ranks say they sent each other
    against the bytes the nodes' links carried in the same run: the check
    that MPI went over the emulated network, not through shared memory."""
    out = []
    for r in records:
        stats = (r.get("own") or {}).get("stats") or []
        if r["status"] != "ok" or not stats:
            continue
        sent = sum(s.get("network_bytes", 0) for s in stats)
        links = sum(e.get("between_nodes_bytes", 0) for e in r["epochs"])
        out.append("links check, %s round %d: its ranks sent each other %s (their count, payload); the nodes' links "
                   "carried %s between the nodes (TCP/IP included): %.3f×" % (
                       label(r), r["round"], human_bytes(sent), human_bytes(links), links / max(sent, 1)))
    return out


def versus(records):
    """Lines giving each brandrt run's files/s over every other system's,
    epoch 1 and epochs 2 on: medians of the ratios taken in each round."""
    rounds, labels = _by_round(records, summary)
    out = []
    for mine in [lab for lab in labels if lab.startswith("brandrt")]:
        cells = []
        for other in labels:
            if other == mine:
                continue
            xs = {ph: _median([rs[mine][ph]["files_s"] / rs[other][ph]["files_s"] for rs in rounds.values()
                               if rs.get(mine) and rs.get(other) and rs[mine][ph] and rs[other][ph]])
                  for ph in ("e1", "steady")}
            if xs["e1"] is None:
                cells.append("%s failed" % other)
            else:
                cells.append("%s %.2f×/%.2f×" % (other, xs["e1"], xs["steady"] or 0))
        out.append("%s against each (epoch 1 / epochs 2 on): %s" % (mine, ", ".join(cells)))
    return out


def plots(meta, records, out):
    """PNG plots per storage: files/s and bytes read per byte delivered,
    epoch 1 and epochs 2 on; against memory, one line per system, when the
    run had several budgets, else as bars. noio, the loader without
    storage, is given in the title (it would squeeze the others). Returns
    the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if meta.get("nodes"):
        return _cluster_plots(meta, records, out, plt)
    written = []
    for storage in sorted({r["storage"] for r in records}):
        recs = [r for r in records if r["storage"] == storage]
        mems = sorted({r["budget_bytes"] for r in recs})
        series = {}
        for b in mems:
            for row in rows([r for r in recs if r["budget_bytes"] == b]):
                series.setdefault(row["label"], {})[b] = row
        noio = series.pop("noio", {})
        for key, ylabel, name in (("files_s", "files per second", "files-per-s"),
                                  ("amp", "bytes read from storage per byte delivered", "read-amp")):
            fig, axes = plt.subplots(1, 2, figsize=(13.5 if len(mems) > 1 else 12, 5))
            for ax, ph, title in ((axes[0], "e1", "epoch 1 (cold)"), (axes[1], "steady", "epochs 2 on")):
                if len(mems) > 1:
                    _lines(ax, series, mems, ph, key, 100 / meta["bytes"])
                    ax.set_xlabel("memory budget, % of the dataset")
                    ax.set_ylabel(ylabel)
                else:
                    _bars(ax, series, mems[0], ph, key)
                    ax.set_xlabel(ylabel)
                ax.set_title("%s, %s" % (storage, title))
                ax.grid(alpha=0.3)
            if len(mems) > 1:  # beside the plots, where it hides no point
                axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
            ref = ""
            if noio and key == "files_s":
                ref = "; noio (the loader alone): %s files/s" % "/".join(
                    comma(noio[b]["steady"]["files_s"]) for b in mems if b in noio and noio[b]["steady"])
            fig.suptitle("%s files (%s), %d DataLoader workers, batch %d, memory %s%s" % (
                comma(meta["files"]), human_bytes(meta["bytes"]), meta["workers"], meta["batch_size"],
                ", ".join("%.0f%%" % (100 * b / meta["bytes"]) for b in mems), ref), fontsize=10)
            fig.tight_layout()
            path = os.path.join(out, "%s-%s.png" % (name, storage))
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


def _lines(ax, series, mems, ph, key, pct):
    others = iter(["C0", "C1", "C2", "C4", "C5", "C6", "C8", "C9", "C7"] * 4)
    reds = iter(["#d62728", "#7b0a0a", "#ff7f7f", "#3d0000"] * 4)
    for lab, pts in series.items():
        xs = [b * pct for b in mems if b in pts and pts[b][ph]]
        ys = [pts[b][ph][key] for b in mems if b in pts and pts[b][ph]]
        if xs:
            mine = lab.startswith("brandrt")
            ax.plot(xs, ys, "-" if mine else "--", marker="s" if mine else "o", label=lab,
                    color=next(reds) if mine else next(others), linewidth=2.5 if mine else 1.5)
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)


def _bars(ax, series, b, ph, key):
    labs = [lab for lab, pts in series.items() if b in pts and pts[b][ph]]
    vals = [series[lab][b][ph][key] for lab in labs]
    colors = ["C3" if lab.startswith("brandrt") else "C0" for lab in labs]
    ax.barh(range(len(labs)), vals, color=colors)
    ax.set_yticks(range(len(labs)), labs)
    ax.invert_yaxis()
    for y, v in enumerate(vals):
        ax.text(v, y, " " + (comma(v) if key == "files_s" else "%.2f×" % v), va="center", fontsize=8)
    ax.set_xlim(0, max(vals + [1e-9]) * 1.2)


def _cluster_plots(meta, records, out, plt):
    """On an emulated cluster: files/s against the number of nodes (one
    plot per memory setting), and against the nodes' memory together (one
    per number of nodes), epoch 1 and epochs 2 on, one line per system;
    bars where there is one point."""
    written = []
    counts = sorted({r["nodes"] for r in records})
    mems = []
    for r in records:
        if r["mem"] not in mems:
            mems.append(r["mem"])
    title = "%s files (%s), NAS link %s, nodes' links %s, %d DataLoader workers per node" % (
        comma(meta["files"]), human_bytes(meta["bytes"]), meta["nas_rate"], meta["nic"], meta["workers"])

    def draw(name, groups, xs, xlabel, suptitle, unit, ticks=False):
        series = {}
        for x, recs in zip(xs, groups):
            for row in rows(recs):
                series.setdefault(row["label"], {})[x] = row
        noio = series.pop("noio", {})  # the loader alone: given in the title, it would squeeze the others
        if noio:
            suptitle += "; noio (the loaders alone, no storage), epochs 2 on: %s" % ", ".join(
                "%s files/s at %.0f%s" % (comma(noio[x]["steady"]["files_s"]), x, unit)
                for x in xs if x in noio and noio[x]["steady"])
        fig, axes = plt.subplots(1, 2, figsize=(13.5, 5))
        for ax, ph, sub in ((axes[0], "e1", "epoch 1 (cold)"), (axes[1], "steady", "epochs 2 on")):
            if len(xs) > 1:
                _lines(ax, series, xs, ph, "files_s", 1)
                if ticks:
                    ax.set_xticks(xs)
                ax.set_xlabel(xlabel)
                ax.set_ylabel("files per second (the job's: its slowest node's epoch)")
            else:
                _bars(ax, series, xs[0], ph, "files_s")
                ax.set_xlabel("files per second")
            ax.set_title(sub)
            ax.grid(alpha=0.3)
        if len(xs) > 1:
            axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle(title + "\n" + suptitle, fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    for mem in mems:
        groups = [[r for r in records if r["nodes"] == n and r["mem"] == mem] for n in counts]
        ok = [(n, g) for n, g in zip(counts, groups) if g]
        draw("files-per-s-nodes-mem%s.png" % mem.replace("%", "pct").replace(" ", ""), [g for _, g in ok], [n for n, _ in ok],
             "nodes", "memory %s%s" % (mem, " (the nodes together)" if mem.endswith("%") else " per node") +
             (", %d nodes" % ok[0][0] if len(ok) == 1 else ""), " nodes", ticks=True)
    for n in counts:
        recs = [r for r in records if r["nodes"] == n]
        budgets = sorted({r["budget_bytes"] for r in recs})
        if len(budgets) < 2:
            continue
        groups = [[r for r in recs if r["budget_bytes"] == b] for b in budgets]
        draw("files-per-s-memory-%dnodes.png" % n, groups, [100 * b * n / meta["bytes"] for b in budgets],
             "the nodes' memory together, % of the dataset", "%d nodes" % n, "%")
    return written
