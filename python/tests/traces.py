"""One training process of the supplied-traces test: it first offers the
trace in --bad for epoch 1 (the test makes the ranks' offers share a file,
so every rank must refuse it), then reads --epochs epochs through a
DataLoader whose BrandSampler supplies the orders in --orders. Prints
"refused: <why>" (or "accepted"), and writes [[epoch, path, bytes_equal,
label], ...] as JSON, as loader.py does."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch.utils.data  # noqa: E402

from brandrt import BrandError, Client  # noqa: E402
from brandrt.torch import BrandDataset, BrandSampler  # noqa: E402
from loader import Check  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--local-rank", type=int, default=0)
    ap.add_argument("--input", required=True)
    ap.add_argument("--orders", required=True, help="JSON: per epoch, the file ids this rank reads")
    ap.add_argument("--bad", required=True, help="JSON: file ids offered first for epoch 1")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.orders) as f:
        orders = json.load(f)
    with open(a.bad) as f:
        bad = json.load(f)
    refused = None
    with Client(local_rank=a.local_rank) as c:
        try:
            c.set_trace(1, bad, timeout=60)
        except BrandError as e:
            refused = str(e)
    if not (c._mm.closed and c._arena_mm.closed):
        sys.exit("Client.close() left its shared mappings open")
    sampler = BrandSampler(local_rank=a.local_rank, order=lambda epoch: orders[epoch])
    ds = BrandDataset(transform=Check(a.input), local_rank=a.local_rank, timeout=60)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, collate_fn=list)
    got = []
    for epoch in range(len(orders)):
        sampler.set_epoch(epoch)
        for batch in loader:
            for (rel, equal), label in batch:
                got.append([epoch, rel, equal, label])
    print("refused: %s" % refused if refused else "accepted", flush=True)
    with open(a.out, "w") as f:
        json.dump(got, f)


if __name__ == "__main__":
    main()
