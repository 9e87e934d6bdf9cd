"""One system's run of the loader benchmark, inside its cgroup:

    runner.py SPEC.json

Builds the system (systems.py), reads spec['epochs'] epochs through it,
and prints one JSON object per line on stdout: {"event": "start"} once the
system is built, {"event": "epoch", …} after each epoch, {"event": "end"}
or {"event": "error"}. The counters of an epoch are differences, taken
right before the epoch's first request and right after its last file:
read_bytes from the cgroup's block-device accounting, net_bytes from the
NAS link (the veth's received bytes), cpu_s from the cgroup's cpuacct (every
process of the run: DataLoader workers, the main process, mpirun and the
brandrt rank). Every file delivered is counted against the dataset's
catalog: each must arrive exactly once per epoch, with its label.
"""

import collections
import json
import os
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
import prepare  # noqa: E402
import systems  # noqa: E402


def emit(**kw):
    print(json.dumps(kw), flush=True)


class Counters:
    """The run's cgroup counters (cgroups.Group.counters), and the NAS
    link's received bytes."""

    def __init__(self, spec):
        self.group = cgroups.Group.existing(spec["group"], spec.get("device"))
        self.net = spec.get("net_dev")

    def read(self):
        out = dict(self.group.counters(), net_bytes=0)
        if self.net:
            with open("/sys/class/net/%s/statistics/rx_bytes" % self.net) as f:
                out["net_bytes"] = int(f.read())
        return out


def verdict(seen, want, sizes_only):
    """'ok', or what differs between the delivered and the expected files."""
    if seen == want:
        return "ok"
    missing = sum((want - seen).values())
    extra = sum((seen - want).values())
    dup = sum(n - 1 for n in seen.values() if n > 1)
    what = "sizes" if sizes_only else "files"
    return "%s differ: %d missing, %d unexpected (%d repeats)" % (what, missing, extra, dup)


def run(spec):
    with open(spec["catalog"]) as f:
        cat = json.load(f)
    start = time.monotonic()
    system = systems.make(spec, cat)
    emit(event="start", startup_s=time.monotonic() - start)
    sizes_only = system.check == "sizes"
    if sizes_only:
        want = collections.Counter(s for _, s, _ in cat["files"])
    else:
        want = collections.Counter(tuple(p) for p in cat["prints"])
    counters = Counters(spec)
    fp = prepare.fingerprint
    progress = [time.monotonic()]
    threading.Thread(target=watchdog, args=(progress, spec.get("stall_s", 300)), daemon=True).start()
    try:
        for e in range(spec["epochs"]):
            seen = collections.Counter()
            files = nbytes = 0
            first = None
            c0, t0 = counters.read(), time.monotonic()
            for datas, labels in system.epoch(e):
                progress[0] = time.monotonic()
                if first is None:
                    first = progress[0] - t0
                labels = labels.tolist() if hasattr(labels, "tolist") else labels
                for d, l in zip(datas, labels):
                    files += 1
                    nbytes += len(d)
                    seen[len(d) if sizes_only else fp(d, l)] += 1
            t1, c1 = time.monotonic(), counters.read()
            emit(event="epoch", epoch=e + 1, files=files, bytes=nbytes, seconds=t1 - t0, first_batch_s=first,
                 read_bytes=c1["read_bytes"] - c0["read_bytes"], net_bytes=c1["net_bytes"] - c0["net_bytes"],
                 cpu_s=(c1["cpu_ns"] - c0["cpu_ns"]) / 1e9, check=verdict(seen, want, sizes_only))
    finally:
        system.close()
    emit(event="end", own=system.own())


def watchdog(progress, limit):
    """Ends the run, as an error, when no batch came for limit seconds (a
    loader that stalls: Mosaic with a cache too small for its downloads
    waits for room forever)."""
    while True:
        time.sleep(1)
        idle = time.monotonic() - progress[0]
        if idle > limit:
            emit(event="error", error="stalled: no file for %.0f s" % idle)
            os._exit(1)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        run(spec)
    except BaseException as e:  # the driver records the failure and moves on
        emit(event="error", error="%s: %s" % (type(e).__name__, e), trace=traceback.format_exc()[-3000:])
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # DataLoader workers and peers' threads are not waited for: the driver
    # kills what is left in the cgroup.
    os._exit(0)


if __name__ == "__main__":
    main()
