# compare.py: the statistics of run.sh's runs: which fields differ (timings dropped), between two runs of one
# build and between the builds; and what the damaged runs delivered and left out.
import json
timing = {"seconds", "files_per_second", "bytes_per_second", "client_stall_seconds", "idle_seconds",
          "idle_cpu_seconds", "first_wait_seconds"}
def load(n):
    return [{k: v for k, v in json.loads(l).items() if k not in timing} for l in open("/tmp/ds-%s.json" % n)]
def cmp(x, y):
    diffs = sorted({k for p, q in zip(load(x), load(y)) for k in set(p) | set(q) if p.get(k) != q.get(k)})
    print("%s vs %s: fields that differ: %s" % (x, y, ", ".join(diffs) or "none"))
cmp("old1", "old2"); cmp("new1", "new2"); cmp("old1", "new1"); cmp("old2", "new2"); cmp("old-dmg", "new-dmg")
keys = ["files_delivered", "files_skipped", "skipped_crc_sum", "duplicate_deliveries", "files_missing", "checksum_errors", "verified"]
for n in ["old-dmg", "new-dmg"]:
    for d in load(n):
        print("%s epoch %d: %s" % (n, d["epoch"], " ".join("%s=%s" % (k, d[k]) for k in keys)))
# where each damaged file went: its home (the rank whose log names it) and the rank whose client got the news
import re
homes = {}
for l in open("/tmp/ds-new-dmg.log"):
    m = re.search(r"brandrt: rank (\d+): chunk: rank (\d+) chunk 0 .* slot (\d+) ", l)
    if m:
        homes[64 * int(m.group(2)) + int(m.group(3))] = int(m.group(1))  # K = 64, one chunk per shard
for l in open("/tmp/ds-new-dmg.order"):
    f = l.split()
    if not l.startswith("#") and int(f[3]) in homes:
        print("new-dmg epoch %s: file %s (home rank %d) answered rank %s's position %s" % (f[0], f[3], homes[int(f[3])], f[1], f[2]))
