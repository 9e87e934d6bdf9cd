"""Train a small CNN on CPU over JPEGs, reading them through brandrt.

    # beside a running `mpirun -np N brandrt serve --chunks DIR --consume 0`:
    /usr/bin/python3 examples/pytorch/train.py --num-classes 10 --epochs 1
    # the same training reading the original files (torchvision ImageFolder,
    # shuffled DataLoader):
    /usr/bin/python3 examples/pytorch/train.py --baseline --data /tmp/jpegs --epochs 1

Prints images/s, loss and accuracy per epoch. With several brandrt ranks,
run one training process beside each (--local-rank on one machine) and
--world-size/--rank to train one model over all of them with
DistributedDataParallel (gloo, CPU); each process then reads its rank's
share of every epoch.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torchvision.transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def model(classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, classes))


def loaders(a, tf):
    if a.baseline:
        from torchvision.datasets import ImageFolder

        ds = ImageFolder(a.data, transform=tf)
        dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
        return dl, None, len(ds.classes)
    from brandrt.torch import BrandDataset, BrandSampler, decode_image

    # Each worker asks for its whole batch at once (BrandDataset.__getitems__).
    sampler = BrandSampler(local_rank=a.local_rank)
    ds = BrandDataset(transform=lambda data: tf(decode_image(data)), local_rank=a.local_rank)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                                     persistent_workers=a.workers > 0)
    return dl, sampler, a.num_classes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", action="store_true", help="read the original files with ImageFolder instead")
    ap.add_argument("--data", help="the ImageFolder directory (--baseline)")
    ap.add_argument("--num-classes", type=int, help="classes in the dataset (brandrt)")
    ap.add_argument("--local-rank", type=int, default=0, help="the brandrt rank of this node to read from")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--world-size", type=int, default=1, help="training processes in all (DDP when > 1)")
    ap.add_argument("--rank", type=int, default=0, help="this process's rank among them")
    ap.add_argument("--master", default="127.0.0.1:29517", help="host:port of rank 0, for DDP")
    a = ap.parse_args()
    if a.baseline and not a.data:
        ap.error("--baseline needs --data DIR")
    if not a.baseline and not a.num_classes:
        ap.error("reading through brandrt needs --num-classes N")
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    tf = T.Compose([T.Resize((32, 32)), T.ToTensor()])
    dl, sampler, classes = loaders(a, tf)
    net = model(classes)
    if a.world_size > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="tcp://" + a.master, world_size=a.world_size, rank=a.rank)
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    source = "files (ImageFolder)" if a.baseline else "brandrt"
    if a.world_size > 1:
        source += ", %d training processes" % a.world_size
    for epoch in range(a.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        start, seen, correct, total_loss = time.monotonic(), 0, 0, 0.0
        for x, y in dl:
            opt.zero_grad()
            out = net(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            correct += (out.argmax(1) == y).sum().item()
            total_loss += loss.item() * len(y)
        secs = time.monotonic() - start
        seen, correct, total_loss = reduce(a, seen, correct, total_loss)
        if a.rank == 0:
            print("epoch %d from %s: %d images in %.2f s, %.0f images/s, loss %.3f, accuracy %.1f%%"
                  % (epoch + 1, source, seen, secs, seen / secs, total_loss / max(seen, 1), 100 * correct / max(seen, 1)),
                  flush=True)


def reduce(a, seen, correct, total_loss):
    """The epoch's counts summed over the training processes."""
    if a.world_size == 1:
        return seen, correct, total_loss
    import torch.distributed as dist

    t = torch.tensor([seen, correct, total_loss], dtype=torch.float64)
    dist.all_reduce(t)
    return int(t[0]), int(t[1]), float(t[2])


if __name__ == "__main__":
    main()
