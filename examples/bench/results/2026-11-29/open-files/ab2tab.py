import glob, re, os, sys
d = sys.argv[1] if len(sys.argv) > 1 else "/var/tmp/m47/ab2"
print("%-7s %-5s %9s %9s %9s %9s %8s %8s %8s %8s" % ("build", "round", "e1 f/s", "e2+ f/s", "e1 µs", "e2+ µs", "nasproxy", "sshfs", "sftp", "NAS sum"))
for log in sorted(glob.glob(d + "/*-r*.log"), key=lambda p: (p[-5], p)):
    name = os.path.basename(log)[:-4]
    b, r = name.split("-r")
    t = open(log).read()
    m = re.search(r"^brandrt-window K=64\s+([\d,]+)\s+\d+\s+[\d.]+×\s+[\d.]+\s+-\s+([\d,]+)", t, re.M)
    c = re.search(r"^brandrt-window K=64\s+\d+ / \d+\s+\d+ / \d+\s+\d+ / \d+\s+\d+ / \d+\s+(\d+) / (\d+)", t, re.M)
    cpu = {}
    cf = log[:-4] + ".cpu"
    if os.path.exists(cf):
        for line in open(cf).read().splitlines()[1:]:
            k, v = line.rsplit(None, 1)
            cpu[k] = float(v)
    if not m:
        continue
    n = [cpu.get(k, 0) for k in ("nasproxy", "sshfs", "sftp-server")]
    print("%-7s %-5s %9s %9s %9s %9s %8.1f %8.1f %8.1f %8.1f" % (b, r, m.group(1), m.group(2), c.group(1), c.group(2), n[0], n[1], n[2], sum(n)))
