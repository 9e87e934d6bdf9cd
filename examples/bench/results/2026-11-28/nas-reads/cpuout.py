#!/usr/bin/env python3
"""CPU seconds of every process on the machine by command name between
start and SIGTERM (sshfs, sftp-server, kernel threads, ...): prints the
top ones."""
import os, signal, sys, time, collections
HZ = os.sysconf("SC_CLK_TCK")
def snap():
    d = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            s = open(f"/proc/{p}/stat").read()
            comm = s[s.index("(")+1:s.rindex(")")]
            f = s[s.rindex(")")+2:].split()
            d[int(p)] = (comm, (int(f[11]) + int(f[12])) / HZ)
        except (OSError, ValueError): pass
    return d
a = snap(); t0 = time.time()
stop = [False]
signal.signal(signal.SIGTERM, lambda *x: stop.__setitem__(0, True))
last = a
while not stop[0]:
    time.sleep(0.5)
    last = {**last, **snap()}
by = collections.Counter()
for pid, (comm, cpu) in last.items():
    by[comm] += cpu - a.get(pid, (comm, 0))[1]
print("%.1f s" % (time.time() - t0))
for comm, c in by.most_common(15):
    print("%-24s %8.2f" % (comm, c))
