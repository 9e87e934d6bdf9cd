"""A training process of a rank, for TestSecondTrainingProcess: it
declares share 0 of 1 of its rank's trace as a BrandSampler does (unless
--plain), reads positions --first of epoch 1 and prints "read N". With
--hold FILE it then waits for FILE and reads the rest of the epoch,
printing "done"; without, it reads positions --then. Each position the
rank refuses prints "refused SN: MESSAGE"; a refusal under --hold ends
the process with status 1."""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import BrandError, Client  # noqa: E402


def span(s):
    lo, hi = s.split(":")
    return range(int(lo), int(hi))


def read(c, sns):
    refused = 0
    for sn in sns:
        try:
            c.read(sn, 1)
        except BrandError as e:
            print("refused %d: %s" % (sn, e), flush=True)
            refused += 1
    return refused


p = argparse.ArgumentParser()
p.add_argument("--plain", action="store_true")
p.add_argument("--first", type=span, default=range(0))
p.add_argument("--then", type=span, default=range(0))
p.add_argument("--hold")
a = p.parse_args()
c = Client(timeout=30)
if not a.plain:
    c.declare(0, 1)
n = c.wait_epoch(1)
refused = read(c, a.first)
print("read %d" % (len(a.first) - refused), flush=True)
if a.hold:
    end = time.monotonic() + 60
    while not os.path.exists(a.hold) and time.monotonic() < end:
        time.sleep(0.05)
    refused += read(c, range(a.first.stop, n))
    print("done", flush=True)
    sys.exit(1 if refused else 0)
read(c, a.then)
