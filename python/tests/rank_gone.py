"""Reads the positions of epoch 1, then waits for a reply that will not
come, until the rank goes away (the test kills it); prints how long after
the last successful read the client raised."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import Client, RankGone  # noqa: E402

c = Client(timeout=None)
n = c.wait_epoch(1)
c.read(0, 1)
print("reading", flush=True)
last = time.monotonic()
try:
    for sn in range(1, n):
        c.read(sn, 1)
        last = time.monotonic()
    c.next(timeout=None)
except RankGone as e:
    print("rank gone after %.2f s: %s" % (time.monotonic() - last, e), flush=True)
