"""The builds alternated, one run each: per run, files/s and the rank's CPU
per file, epoch 1 and epochs 2 on, and the new build over the old in the
same round. Run from this directory: python3 abtable.py"""

import glob
import json
import os
import statistics


def run(path):
    rows = [json.loads(line) for line in open(path)]
    r = next(x for x in rows if x.get("system") == "brandrt-window")
    out = []
    for first in (True, False):
        es = [e for e in r["epochs"] if (e["epoch"] == 1) == first]
        files, secs = sum(e["files"] for e in es), sum(e["seconds"] for e in es)
        rank = sum(e["cpu_by"]["rank"] for e in es)
        out += [files / secs, rank / files * 1e6]
    return out + [r.get("held_peak_bytes", 0)]


NAMES = {"110": "110 KB, one node", "1M": "1 MB, one node", "8K": "8 KB, one node", "3n": "110 KB, 3 nodes"}
for size in NAMES:
    runs = sorted(glob.glob("ab%s*-*-?/results.jsonl" % size))
    if size != "3n":
        runs = [r for r in runs if not r.startswith("ab3n")]
    if not runs:
        continue
    print("== files of %s" % NAMES[size])
    print("%-12s %-5s %9s %9s   %12s %12s" % ("round", "build", "files/s e1", "e2 on", "rank µs e1", "e2 on"))
    got = {}
    for p in runs:
        name = os.path.dirname(p)  # abTAG-BUILD-ROUND
        tag, build, rnd = name.rsplit("-", 2)
        got[(tag, rnd, build)] = v = run(p)
        print("%-12s %-5s %9.0f %9.0f   %12.0f %12.0f" % (tag + " " + rnd, build, v[0], v[2], v[1], v[3]))
    ratios = [[got[k[:2] + ("new",)][i] / got[k[:2] + ("old",)][i] for i in range(4)]
              for k in got if k[2] == "new" and k[:2] + ("old",) in got]
    print("new / old, per round: files/s e1 %s, e2 on %s; rank CPU e1 %s, e2 on %s" % tuple(
        " ".join("%.2f" % r[i] for r in ratios) for i in (0, 2, 1, 3)))
    print("medians: files/s %.2f / %.2f, rank CPU per file %.2f / %.2f" % tuple(
        statistics.median(r[i] for r in ratios) for i in (0, 2, 1, 3)))
    print()
