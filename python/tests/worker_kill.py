"""A training process whose DataLoader loses a worker to SIGKILL in epoch 0:
it ends that epoch on its rank (for its share of the trace, with
--replicas), then a new DataLoader reads epoch 1 whole; with --die it exits
with status 3 instead, as a training script that does not catch the error.
Writes [[epoch, path, bytes_equal, label], ...] of what it got as JSON."""

import argparse
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch.utils.data  # noqa: E402

from brandrt.torch import BrandDataset, BrandSampler  # noqa: E402
from loader import Check  # noqa: E402


def loader(a, sampler):
    ds = BrandDataset(transform=Check(a.input), local_rank=a.local_rank, timeout=60)
    return torch.utils.data.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=4, collate_fn=list)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--local-rank", type=int, default=0)
    ap.add_argument("--replica", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--die", action="store_true")
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    got = []
    sampler = BrandSampler(local_rank=a.local_rank, rank=a.replica, num_replicas=a.replicas)
    sampler.set_epoch(0)
    it = iter(loader(a, sampler))
    try:
        for i, batch in enumerate(it):
            got += [[0, rel, eq, label] for (rel, eq), label in batch]
            if i == 5:
                os.kill(it._workers[1].pid, signal.SIGKILL)
        raise SystemExit("the DataLoader did not notice its dead worker")
    except RuntimeError as e:
        print("epoch 0 stopped after %d files: %s" % (len(got), str(e).splitlines()[0]), flush=True)
        if a.die:
            sys.exit(3)
    del it
    sampler.end_epoch()
    sampler = BrandSampler(local_rank=a.local_rank, rank=a.replica, num_replicas=a.replicas)
    sampler.set_epoch(1)
    for batch in loader(a, sampler):
        got += [[1, rel, eq, label] for (rel, eq), label in batch]
    print("epoch 1 read %d files" % sum(1 for g in got if g[0] == 1), flush=True)
    with open(a.out, "w") as f:
        json.dump(got, f)


if __name__ == "__main__":
    main()
