"""One training process of the end-to-end test: a DataLoader with BrandSampler
and BrandDataset over the brandrt rank with the given local rank, for a number
of epochs. Each generated file starts with its relative path and a newline;
the transform compares the delivered bytes with the original file (with
--in-place, this process does, on the files handed to it). Writes
[[epoch, path, bytes_equal, label, file id], ...] as JSON."""

import argparse
import json
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch.utils.data  # noqa: E402

from brandrt.handed import HandedFile  # noqa: E402
from brandrt.torch import BrandDataset, BrandSampler  # noqa: E402

# with --in-place, the files of the last KEEP batches stay referenced
# while later ones come, and are checked again at the end of each epoch:
# a file released too early would have changed by then
KEEP = 3


class Check:
    def __init__(self, root):
        self.root = root

    def __call__(self, data):
        raw = bytes(data[: min(len(data), 200)])
        rel = raw.split(b"\n", 1)[0].decode()
        with open(os.path.join(self.root, rel), "rb") as f:
            return rel, f.read() == data


def one(item):
    """collate_fn for items fetched one by one: a batch of one."""
    return [item]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--local-rank", type=int, help="the brandrt rank to read from (default: BrandSampler's)")
    ap.add_argument("--replica", type=int, help="this process's share of the rank's trace (BrandSampler rank; default: its)")
    ap.add_argument("--replicas", type=int, help="training processes of the rank (BrandSampler num_replicas; default: its)")
    ap.add_argument("--input", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--first-epoch", type=int, default=0, help="the sampler's first epoch (0-based)")
    ap.add_argument("--batch-size", type=int, default=8, help="the DataLoader's batch size (default 8; with --batched, the sampler's)")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--not-persistent", action="store_true")
    ap.add_argument("--batched", action="store_true", help="the sampler yields batches; each worker reads one at once")
    ap.add_argument("--one-by-one", action="store_true",
                    help="no batches: DataLoader fetches each item alone (BrandDataset.__getitem__, not __getitems__)")
    ap.add_argument("--ready", help="create this file once the first batch came, then wait --hold seconds")
    ap.add_argument("--hold", type=float, default=0)
    ap.add_argument("--state", help="a BrandSampler state (JSON) to resume from, beside brandrt serve --resume")
    ap.add_argument("--len", action="store_true", help="call len(sampler) before each epoch, as many training loops do")
    ap.add_argument("--in-place", action="store_true",
                    help="BrandDataset(in_place=True) without a transform: the files are checked in this process")
    a = ap.parse_args()
    sampler = BrandSampler(local_rank=a.local_rank, batch_size=a.batch_size if a.batched else None, rank=a.replica, num_replicas=a.replicas)
    check = Check(a.input)
    ds = BrandDataset(transform=None if a.in_place else check, local_rank=a.local_rank, timeout=60, with_id=True, in_place=a.in_place)
    batch_size = None if a.batched or a.one_by_one else a.batch_size
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler,
                                         num_workers=a.workers, collate_fn=one if a.one_by_one else list,
                                         persistent_workers=a.workers > 0 and not a.not_persistent,
                                         pin_memory=a.pin_memory)
    first = a.first_epoch
    if a.state:
        with open(a.state) as f:
            sampler.load_state_dict(json.load(f))
        first = sampler.epoch
    got, kept, agains, handed = [], [], [], 0
    for epoch in range(first, a.first_epoch + a.epochs):
        sampler.set_epoch(epoch)
        if a.len:
            print("epoch %d: %d positions" % (epoch, len(sampler)), flush=True)
        for batch in loader:
            if a.in_place:
                # a second holder of the batch's first file: pickled
                # again, it takes a reference of its own, kept for longer
                # than the batch, and must stay right once the batch goes
                again = (pickle.loads(pickle.dumps(batch[0][0])), batch[0][1], batch[0][2])
                agains = (agains + [again])[-4 * KEEP:]
                kept = (kept + [batch])[-KEEP:]
                handed += sum(isinstance(data, HandedFile) for data, _, _ in batch)
                batch = [(check(data), label, fid) for data, label, fid in batch]
            for (rel, equal), label, fid in batch:
                got.append([epoch, rel, equal, label, int(fid)])
            if a.ready and not os.path.exists(a.ready):
                with open(a.ready, "w") as f:
                    f.write("ready\n")
                time.sleep(a.hold)
        for batch in kept + [agains]:  # still the files they were?
            for data, _, fid in batch:
                try:
                    rel, equal = check(data)
                except (OSError, UnicodeDecodeError) as e:  # its first line is no longer a path
                    rel, equal = repr(e), False
                if not equal:
                    got.append([epoch, rel, False, -2, int(fid)])
    if a.in_place:
        print("in place: %d of %d files" % (handed, len(got)), flush=True)
    with open(a.out, "w") as f:
        json.dump(got, f)


if __name__ == "__main__":
    main()
