#!/usr/bin/env python3
"""Sample every brandrt rank's /proc/PID/smaps in cgroups matching a glob;
keep, per cgroup, its mappings at the peak of anonymous + shared Rss."""
import glob, re, sys, time, json, os
pat, out, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
best = {}
def maps(pid):
    res, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split(None, 5)
                cur = {"range": parts[0], "perm": parts[1], "path": parts[5].strip() if len(parts) > 5 else "", "anon": 0, "rss": 0, "shmem": 0}
                res.append(cur)
            elif cur is not None:
                k, _, v = line.partition(":")
                if k == "Anonymous": cur["anon"] = int(v.split()[0]) * 1024
                elif k == "Rss": cur["rss"] = int(v.split()[0]) * 1024
                elif k in ("Shared_Clean", "Shared_Dirty", "Private_Dirty", "Private_Clean"): pass
    return res
def held(m):
    shm = m["path"].startswith(("/dev/shm", "/memfd:", "/SYSV")) or "memfd" in m["path"]
    return m["rss"] if shm else m["anon"]
end = time.time() + secs
while time.time() < end:
    for cg in glob.glob(pat):
        try: pids = open(cg + "/cgroup.procs").read().split()
        except OSError: continue
        for p in pids:
            try:
                if open(f"/proc/{p}/comm").read().strip() != "brandrt": continue
                ms = maps(p)
            except OSError: continue
            tot = sum(held(m) for m in ms)
            if cg not in best or tot > best[cg]["total"]:
                best[cg] = {"total": tot, "maps": [dict(m, held=held(m)) for m in ms if held(m) > 0]}
    time.sleep(0.1)
json.dump(best, open(out, "w"), indent=1)
for k, v in sorted(best.items()):
    print(k, "held", v["total"])
    shm = sum(m["held"] for m in v["maps"] if m["held"] != m["anon"] or m["anon"] == 0)
    print("   shared", shm, "anonymous", v["total"] - shm)
    for m in sorted(v["maps"], key=lambda m: -m["held"])[:14]:
        print(f"   {m['range']:34s} {m['perm']} {m['held']/1e6:9.2f} MB  {m['path'][:50]}")
