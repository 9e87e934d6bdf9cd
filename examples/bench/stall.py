"""What one client that stops reading costs the others (issue 40).

Runs `brandrt serve` on 2 ranks of this machine over a packed dataset,
one epoch, with readers beside it (python/tests/unread.py): rank 0's
reader reads every other position (the odd ones), rank 1's its whole
trace. Each round runs the job twice, in alternating order: with a
staller on rank 0 that asks for the even positions and never reads them,
and without it, a client reading the even positions in its place. Prints
each run's files/s for the two readers, and the ratio of each one's rate
with the staller to its rate without it in the same round.

  /usr/bin/python3 examples/bench/stall.py --chunks DIR --mem 100%,25% --rounds 3

A reader that gets no file for --quiet seconds stops and counts what it
read by then (a job whose readers wait on the staller).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
UNREAD = os.path.join(ROOT, "python", "tests", "unread.py")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
READ = re.compile(r"read (\d+) of (\d+) in ([\d.]+) s")


def run(args, mem, staller):
    """One job: the readers' (files read, files asked, seconds)."""
    attach = tempfile.mkdtemp(prefix="brandrt-stall-")
    env = dict(os.environ, BRANDRT_ATTACH=attach, BRANDRT_ALLOW_SHARED_NODE="1")
    serve = subprocess.Popen(MPIRUN + ["-np", "2", args.brandrt, "serve", "--chunks", args.chunks, "--mem", mem, "--epochs", "1",
                                       "--client-wait", "0", "--training-wait", "0"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs = []
    try:
        other = ["stall", "0", "2"] if staller else ["stand-in", "0", "2", str(args.quiet)]
        procs.append(subprocess.Popen([sys.executable, UNREAD] + other, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        time.sleep(1)  # it asks before the readers start
        readers = [subprocess.Popen([sys.executable, UNREAD, "read", str(r), p, str(args.quiet)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True) for r, p in ((0, "2"), (1, "0"))]
        procs += readers
        out = []
        for rd in readers:
            text = rd.communicate(timeout=args.quiet + 600)[0]
            m = READ.search(text)
            if not m:
                raise SystemExit("a reader printed:\n" + text)
            out.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
        return out
    finally:
        for p in procs + [serve]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(attach, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", required=True, help="a dataset packed for 2 ranks (brandrt pack --ranks 2)")
    ap.add_argument("--mem", default="100%,25%", help="serve --mem values, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quiet", type=float, default=20, help="seconds without a file after which a reader stops")
    ap.add_argument("--brandrt", default=os.path.join(ROOT, "bin", "brandrt"))
    args = ap.parse_args()
    print("$ " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]))
    print("%-5s %-5s %-8s %26s %26s" % ("mem", "round", "staller", "rank 0's other reader", "rank 1's reader"))
    for mem in args.mem.split(","):
        for rnd in range(args.rounds):
            got = {}
            for staller in ((False, True) if rnd % 2 == 0 else (True, False)):
                got[staller] = run(args, mem, staller)
                cells = ["%7d/%-7d %6.0f files/s" % (n, of, n / max(dt, 1e-9)) for n, of, dt in got[staller]]
                print("%-5s %-5d %-8s %26s %26s" % (mem, rnd + 1, "yes" if staller else "no", *cells), flush=True)
            ratios = []
            for (n0, of0, dt0), (n1, of1, dt1) in zip(got[False], got[True]):
                whole = n1 == of1
                ratios.append("%.2fx%s" % ((n1 / dt1) / (n0 / dt0), "" if whole else " (stopped after %d)" % n1))
            print("%-5s %-5d %-8s %26s %26s" % (mem, rnd + 1, "ratio", *ratios), flush=True)


if __name__ == "__main__":
    main()
