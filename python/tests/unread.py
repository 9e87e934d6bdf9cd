"""Clients of the tests of a client that does not read (cmd/brandrt
stall_test.go), one per process, attached to the rank with the given
local rank once it serves epoch 1:

  ask-all       asks for every position with request() before reading
                any (the natural misuse); prints what request() raised,
                reads the replies of what it asked, then the rest of the
                epoch with read_many(), and prints the counts
  stall PERIOD  asks for every PERIOD-th position from 0 and never reads
                (a process stopped in a debugger); prints how many it
                asked before request() raised, then sleeps until killed
  read PERIOD [QUIET]
                reads the positions a staller with PERIOD leaves (all
                with PERIOD 0) and prints how many and how fast; with
                QUIET, stops once no file came for QUIET seconds
  stand-in PERIOD [QUIET]
                reads the positions a staller with PERIOD would ask for
                (what it would have done had it not stopped), as read
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import BrandError, Client  # noqa: E402


def main():
    mode, local = sys.argv[1], int(sys.argv[2])
    period = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    quiet = float(sys.argv[4]) if len(sys.argv) > 4 else None
    c = attach(local, quiet)
    n = c.wait_epoch(1)
    if mode == "ask-all":
        ask_all(c, n)
    elif mode == "stall":
        stall(c, n, period)
    elif mode == "stand-in":
        read(c, n, period, [sn for sn in range(0, n, period)])
    else:
        read(c, n, period)


def attach(local, quiet=None):
    """A Client of the rank, once it listens (within a minute), whose
    next() gives up after quiet seconds (None: never)."""
    end = time.monotonic() + 60
    while True:
        try:
            return Client(local_rank=local, timeout=quiet)
        except BrandError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def ask_all(c, n):
    asked = 0
    try:
        for sn in range(n):
            c.request(sn, 1)
            asked += 1
        print("request() took all %d" % n, flush=True)
        return
    except BrandError as e:
        print("request() raised after %d: %s" % (asked, e), flush=True)
    for _ in range(asked):  # the replies of what was asked
        c.next()
    got = []
    c.read_many(range(asked, n), 1, lambda sn, fid, label, data: got.append(sn))
    print("read the %d asked, then read_many read %d of the %d positions left" % (asked, len(got), n - asked), flush=True)


def stall(c, n, period):
    asked = 0
    try:
        for sn in range(0, n, period):
            c.request(sn, 1)
            asked += 1
        print("stalling: asked all %d" % asked, flush=True)
    except BrandError as e:
        print("stalling: request() raised after %d: %s" % (asked, e), flush=True)
    time.sleep(3600)


def read(c, n, period, sns=None):
    if sns is None:
        sns = [sn for sn in range(n) if period == 0 or sn % period != 0]
    t0 = last = time.monotonic()
    got = []

    def use(sn, fid, label, data):
        nonlocal last
        got.append(sn)
        last = time.monotonic()

    why = ""
    try:
        c.read_many(sns, 1, use)
    except BrandError as e:
        why = " (then stopped: %s)" % e
    dt = last - t0
    print("read %d of %d in %.2f s: %.0f files/s%s" % (len(got), len(sns), dt, len(got) / max(dt, 1e-9), why), flush=True)


if __name__ == "__main__":
    main()
